// Which Python runs the server: the vmemLsp.interpreter setting, else the interpreter selected in
// the Python extension (ms-python.python) when it is installed, else the workspace's .venv (or
// venv), else python3 on PATH. Which vmem_lsp it runs (vmemLsp.importStrategy): that Python's own
// when it can import it, else that of a `vmem-lsp` installed as a tool (pipx, uv tool) on PATH,
// else the one the .vsix bundles (bundled/tool/launch.py, checked with checkBundled). And which
// Python the server's worker compiles in: the project's, as the Python extension selected it
// (projectPython), else the one the server finds (.venv).
import { execFile } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import * as vscode from "vscode";

export const PYTHON_EXTENSION_ID = "ms-python.python";

export interface Interpreter {
  /** The command, e.g. /home/me/.venv/bin/python. */
  command: string;
  /** Arguments that come before ours (e.g. from `conda run`), usually none. */
  args: string[];
  /** Where it came from, for messages. */
  source: "setting" | "python extension" | "workspace's .venv" | "workspace's venv" | "PATH" | "vmem-lsp on PATH";
}

// The parts of the Python extension's exported API that we use. Both the newer `environments`
// API and the older `settings.getExecutionDetails` are optional: any of them may be missing in
// the installed version, and every call is guarded.
interface PythonEnvironmentsApi {
  getActiveEnvironmentPath?(resource?: vscode.Uri): { id?: string; path: string } | undefined;
  resolveEnvironment?(env: { id?: string; path: string } | string): Promise<
    { executable?: { uri?: vscode.Uri } } | undefined
  >;
  onDidChangeActiveEnvironmentPath?: vscode.Event<unknown>;
}

interface PythonExtensionApi {
  ready?: Promise<void>;
  environments?: PythonEnvironmentsApi;
  settings?: {
    getExecutionDetails?(resource?: vscode.Uri): { execCommand?: string[] } | undefined;
    onDidChangeExecutionDetails?: vscode.Event<unknown>;
  };
}

async function pythonExtensionApi(): Promise<PythonExtensionApi | undefined> {
  const extension = vscode.extensions.getExtension<PythonExtensionApi>(PYTHON_EXTENSION_ID);
  if (!extension) {
    return undefined;
  }
  try {
    const api = extension.isActive ? extension.exports : await extension.activate();
    if (api?.ready) {
      await Promise.race([api.ready, new Promise((resolve) => setTimeout(resolve, 10_000))]);
    }
    return api;
  } catch {
    return undefined;
  }
}

/** The interpreter selected in the Python extension, or undefined. */
export async function fromPythonExtension(resource: vscode.Uri | undefined): Promise<Interpreter | undefined> {
  const api = await pythonExtensionApi();
  if (!api) {
    return undefined;
  }
  try {
    const environments = api.environments;
    const active = environments?.getActiveEnvironmentPath?.(resource);
    if (active?.path) {
      const resolved = await environments?.resolveEnvironment?.(active);
      const executable = resolved?.executable?.uri?.fsPath;
      if (executable) {
        return { command: executable, args: [], source: "python extension" };
      }
    }
  } catch {
    // fall through to the older API
  }
  try {
    const exec = api.settings?.getExecutionDetails?.(resource)?.execCommand;
    if (exec && exec.length > 0 && exec[0]) {
      return { command: exec[0], args: exec.slice(1), source: "python extension" };
    }
  } catch {
    // no interpreter from the Python extension
  }
  return undefined;
}

/** The interpreters that may run the server, in the order of precedence: the setting alone when
 * it is set; else the Python extension's selection, the workspace's .venv/bin/python (or venv's)
 * and python3 on PATH, those that are there (python3 always: whether it is, running it tells). */
export async function findInterpreters(resource: vscode.Uri | undefined): Promise<Interpreter[]> {
  const configured = vscode.workspace.getConfiguration("vmemLsp", resource).get<string | null>("interpreter");
  if (configured && configured.trim()) {
    return [{ command: expandVariables(configured.trim()), args: [], source: "setting" }];
  }
  const found: Interpreter[] = [];
  const selected = await fromPythonExtension(resource);
  if (selected) {
    found.push(selected);
  }
  const folder = resource?.scheme === "file" ? resource.fsPath : vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
  for (const venv of [".venv", "venv"] as const) {
    const python = folder ? path.join(folder, venv, process.platform === "win32" ? "Scripts/python.exe" : "bin/python") : "";
    if (python && fs.existsSync(python) && !found.some((f) => f.command === python)) {
      found.push({ command: python, args: [], source: venv === ".venv" ? "workspace's .venv" : "workspace's venv" });
    }
  }
  found.push({ command: "python3", args: [], source: "PATH" });
  return found;
}

/** The interpreter to run the server with: the first of findInterpreters. */
export async function findInterpreter(resource: vscode.Uri | undefined): Promise<Interpreter> {
  return (await findInterpreters(resource))[0];
}

/** vmemLsp.importStrategy: "fromEnvironment" (the interpreter's own vmem_lsp when it has one,
 * else the bundled one) or "useBundled" (always the bundled one). */
export type ImportStrategy = "fromEnvironment" | "useBundled";

export function importStrategy(resource: vscode.Uri | undefined): ImportStrategy {
  const value = vscode.workspace.getConfiguration("vmemLsp", resource).get<string>("importStrategy");
  return value === "useBundled" ? "useBundled" : "fromEnvironment";
}

/** The Python of a `vmem-lsp` command on PATH (pipx and uv tool install one whose first line names
 * its venv's python), or undefined: how vmem-lsp installed as a tool serves a project whose own
 * Python does not have it. */
export function fromToolOnPath(): Interpreter | undefined {
  for (const folder of (process.env.PATH ?? "").split(path.delimiter)) {
    if (!folder) {
      continue;
    }
    try {
      const head = fs.readFileSync(path.join(folder, "vmem-lsp"), { encoding: "utf8", flag: "r" }).slice(0, 512);
      const python = /^#!\s*(\S+)/.exec(head)?.[1];
      if (python && path.isAbsolute(python) && fs.existsSync(python)) {
        return { command: python, args: [], source: "vmem-lsp on PATH" };
      }
    } catch {
      // not in this folder
    }
  }
  return undefined;
}

/** The Python the server's worker compiles in, sent as the server's `python` option: the
 * vmemLsp.python setting (relative: the workspace folder's; the server resolves it), else the
 * interpreter the Python extension selected for `resource` (the project's, with its jax and
 * libtpu), else undefined (the server looks for VIRTUAL_ENV, then .venv). */
export async function projectPython(resource: vscode.Uri | undefined): Promise<string | undefined> {
  const configured = vscode.workspace.getConfiguration("vmemLsp", resource).get<string | null>("python");
  if (configured && configured.trim()) {
    return expandVariables(configured.trim());
  }
  const selected = await fromPythonExtension(resource);
  // `conda run ...` and other launchers are no interpreter path: the server finds one itself then.
  return selected && selected.args.length === 0 ? selected.command : undefined;
}

/** ${workspaceFolder}, ${userHome} and ~ in the interpreter setting. */
function expandVariables(value: string): string {
  const home = process.env.HOME ?? process.env.USERPROFILE ?? "";
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? "";
  return value
    .replace(/^~(?=$|[\\/])/, home)
    .replace(/\$\{userHome\}/g, home)
    .replace(/\$\{workspaceFolder\}/g, folder);
}

/** Calls `listener` when the Python extension's selected interpreter changes. */
export async function onPythonInterpreterChange(listener: () => void): Promise<vscode.Disposable> {
  const api = await pythonExtensionApi();
  const disposables: vscode.Disposable[] = [];
  try {
    const event = api?.environments?.onDidChangeActiveEnvironmentPath ?? api?.settings?.onDidChangeExecutionDetails;
    if (event) {
      disposables.push(event(() => listener()));
    }
  } catch {
    // an older or broken Python extension: the setting and the restart command still work
  }
  return vscode.Disposable.from(...disposables);
}

export type ImportCheck =
  | { ok: true; version: string }
  | { ok: false; reason: "no-interpreter" | "not-installed" | "failed"; detail: string };

/** Whether `python -c "import vmem_lsp"` works with this interpreter. */
export function checkImportable(interpreter: Interpreter, cwd: string | undefined): Promise<ImportCheck> {
  const code = "import vmem_lsp; print(getattr(vmem_lsp, '__version__', '?'))";
  return new Promise((resolve) => {
    execFile(
      interpreter.command,
      [...interpreter.args, "-c", code],
      { cwd, timeout: 60_000, windowsHide: true },
      (error, stdout, stderr) => {
        if (!error) {
          resolve({ ok: true, version: stdout.trim() });
          return;
        }
        const detail = (stderr || error.message).trim();
        if ((error as NodeJS.ErrnoException).code === "ENOENT" || (error as NodeJS.ErrnoException).code === "EACCES") {
          resolve({ ok: false, reason: "no-interpreter", detail });
        } else if (/No module named '?vmem_lsp'?/.test(detail)) {
          resolve({ ok: false, reason: "not-installed", detail });
        } else {
          resolve({ ok: false, reason: "failed", detail });
        }
      },
    );
  });
}

export type BundledCheck =
  | { ok: true; version: string; python: string }
  | { ok: false; reason: "no-interpreter" | "cannot-run"; detail: string };

/** Whether the bundled server runs with this interpreter: `python launch.py --check` imports the
 * bundled vmem_lsp, pygls and libcst (whose native module exists for CPython 3.11 to 3.13 only),
 * or says on stderr why it cannot (an older Python, no libraries for its version). */
export function checkBundled(interpreter: Interpreter, launcher: string, cwd: string | undefined): Promise<BundledCheck> {
  return new Promise((resolve) => {
    execFile(
      interpreter.command,
      [...interpreter.args, launcher, "--check"],
      { cwd, timeout: 60_000, windowsHide: true },
      (error, stdout, stderr) => {
        if (!error) {
          try {
            const answer = JSON.parse(stdout.trim().split("\n").pop() ?? "") as { vmem_lsp?: string; python?: string };
            resolve({ ok: true, version: answer.vmem_lsp ?? "?", python: answer.python ?? "?" });
          } catch {
            resolve({ ok: false, reason: "cannot-run", detail: `unexpected answer: ${stdout.trim() || stderr.trim()}` });
          }
          return;
        }
        const code = (error as NodeJS.ErrnoException).code;
        const detail = (stderr.trim() || error.message).replace(/^vmem-lsp \(bundled\): /, "");
        resolve({ ok: false, reason: code === "ENOENT" || code === "EACCES" ? "no-interpreter" : "cannot-run", detail });
      },
    );
  });
}
