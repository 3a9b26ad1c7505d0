// @ts-check
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/**", "node_modules/**", "test/ui/output/**", "*.vsix"] },
  js.configs.recommended,
  {
    files: ["src/**/*.ts"],
    extends: [...tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_" }],
      eqeqeq: "error",
    },
  },
  {
    files: ["**/*.mjs", "**/*.js"],
    languageOptions: {
      sourceType: "module",
      globals: Object.fromEntries(["process", "console", "setTimeout", "clearTimeout", "setInterval", "clearInterval"]
        .map((name) => [name, "readonly"])),
    },
  },
  {
    // Node (CommonJS); the functions given to page.evaluate run in the browser.
    files: ["test/**/*.js"],
    languageOptions: {
      sourceType: "commonjs",
      globals: { require: "readonly", module: "writable", __dirname: "readonly", document: "readonly", NodeFilter: "readonly",
                 window: "readonly", MutationObserver: "readonly" },
    },
  },
);
