// Bundles the extension and vscode-languageclient into one file, dist/extension.js, and writes
// dist/THIRD_PARTY_NOTICES.txt with the licenses of the npm packages bundled into it.
// usage: node esbuild.mjs [--production] [--watch]
import * as esbuild from "esbuild";
import fs from "node:fs";
import path from "node:path";

const production = process.argv.includes("--production");
const watch = process.argv.includes("--watch");

const options = {
  entryPoints: ["src/extension.ts"],
  bundle: true,
  outfile: "dist/extension.js",
  external: ["vscode"],
  format: "cjs",
  platform: "node",
  target: "node18",
  minify: production,
  sourcemap: !production,
  sourcesContent: false,
  metafile: true,
  logLevel: "info",
};

/** The license texts of the packages under node_modules that went into the bundle. */
function writeNotices(metafile) {
  const packages = new Map();
  for (const input of Object.keys(metafile.inputs)) {
    const match = /^(.*node_modules\/)((?:@[^/]+\/)?[^/]+)\//.exec(input);
    if (match) {
      packages.set(match[2], match[1] + match[2]);
    }
  }
  const parts = ["Third-party software bundled in dist/extension.js", ""];
  for (const [name, dir] of [...packages].sort()) {
    const meta = JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8"));
    const file = fs.readdirSync(dir).find((f) => /^licen[cs]e/i.test(f));
    parts.push("=".repeat(78), `${name} ${meta.version} (${meta.license ?? "see below"})`, "=".repeat(78));
    parts.push(file ? fs.readFileSync(path.join(dir, file), "utf8").trim() : "(no license file in the package)", "");
  }
  fs.writeFileSync("dist/THIRD_PARTY_NOTICES.txt", parts.join("\n"));
}

if (watch) {
  const context = await esbuild.context(options);
  await context.watch();
} else {
  const result = await esbuild.build(options);
  writeNotices(result.metafile);
}
