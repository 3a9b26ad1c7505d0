// The VS Code client of vmem-lsp: starts the server over stdio, `<python> -m vmem_lsp serve` with
// the user's Python when it has vmem_lsp (or that of vmem-lsp installed as a tool), else the
// vmem_lsp the .vsix bundles, `<python> bundled/tool/launch.py serve` (vmemLsp.importStrategy);
// keeps it in step with the settings and the selected interpreter (the worker compiles in the
// project's Python: the `python` option), and shows the compile worker's state in the status bar.
import * as os from "os";
import * as path from "path";
import * as vscode from "vscode";
import {
  CloseAction,
  CodeLensRequest,
  DidChangeConfigurationNotification,
  ErrorAction,
  InlayHintRequest,
  LanguageClient,
  type ResponseError,
  type LanguageClientOptions,
  type ServerOptions,
  State,
} from "vscode-languageclient/node";

import {
  type BundledCheck,
  checkBundled,
  checkImportable,
  findInterpreter,
  findInterpreters,
  fromToolOnPath,
  importStrategy,
  type Interpreter,
  onPythonInterpreterChange,
  projectPython,
} from "./python";
import { defaultScope, needsRestart, SECTION, type ServerSettings, userSettings } from "./settings";
import { STATUS_NOTIFICATION, type StatusParams, StatusItem } from "./status";

const CLIENT_ID = "vmemLsp";
const CLIENT_NAME = "VMEM (vmem-lsp)";
/** The button that runs `<python> -m vmem_lsp doctor` in a terminal. */
const DOCTOR = "Run vmem-lsp doctor";

class Controller implements vscode.Disposable {
  readonly output = vscode.window.createOutputChannel(CLIENT_NAME);
  private readonly trace = vscode.window.createOutputChannel(`${CLIENT_NAME} trace`);
  readonly status = new StatusItem();
  private client: LanguageClient | undefined;
  private interpreter: Interpreter | undefined;
  /** Whether the running server is the bundled one (launch.py), not the interpreter's vmem_lsp. */
  private bundled = false;
  /** The first interpreter findInterpreters gave at the last start (the one a change of the
   * Python extension's selection is compared with). */
  private first: Interpreter | undefined;
  /** bundled/tool/launch.py in the installed extension. */
  private readonly launcher: string;

  constructor(extensionPath: string) {
    this.launcher = path.join(extensionPath, "bundled", "tool", "launch.py");
  }

  /** The arguments that run vmem-lsp's `command` with the chosen interpreter. */
  private vmemArgs(command: string): string[] {
    const before = this.interpreter?.args ?? [];
    return this.bundled ? [...before, this.launcher, command] : [...before, "-m", "vmem_lsp", command];
  }
  /** What the running server was given; see needsRestart. */
  private sent: ServerSettings = {};
  /** Serialises starts and stops. */
  private queue: Promise<void> = Promise.resolve();
  /** Restarts asked for and not finished; while any is, setting changes are not forwarded. */
  private pendingRestarts = 0;
  /** When the server process exited unexpectedly, recently. */
  private crashes: number[] = [];
  private disposed = false;

  /**
   * "Explain a VMEM report": the selection, else the clipboard, sent to the
   * server's vmemLsp.explain command; its explanation opens as a Markdown
   * preview, and the report's diagnostics appear on the lines that made it.
   */
  async explainReport(): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    const selected = editor && !editor.selection.isEmpty ? editor.document.getText(editor.selection) : "";
    const text = selected || (await vscode.env.clipboard.readText());
    if (!this.client) {
      void vscode.window.showWarningMessage("vmem-lsp: the server is not running");
      return;
    }
    const answer = await this.client.sendRequest<{ markdown?: string } | null>("workspace/executeCommand", {
      command: "vmemLsp.explain",
      arguments: [text],
    });
    // A file, not an untitled document: closing the preview asks nothing about saving.
    const file = vscode.Uri.file(path.join(os.tmpdir(), `vmem-lsp-explain-${process.pid}.md`));
    await vscode.workspace.fs.writeFile(file, Buffer.from(answer?.markdown ?? "", "utf8"));
    await vscode.commands.executeCommand("markdown.showPreviewToSide", file);
  }

  /** Stops the running server, if any, and starts a new one. */
  restart(reason: string): Promise<void> {
    this.pendingRestarts += 1;
    const next = this.queue.then(async () => {
      try {
        await this.stop();
        if (!this.disposed) {
          this.output.appendLine(`[client] starting the server (${reason})`);
          await this.start();
        }
      } catch (error) {
        this.output.appendLine(`[client] the server did not start: ${describe(error)}`);
        this.status.stopped(`vmem-lsp did not start: ${describe(error)}`);
        void vscode.window
          .showErrorMessage(`vmem-lsp did not start: ${describe(error)}`, "Show output", DOCTOR)
          .then((choice) => (choice === DOCTOR ? this.runDoctor() : choice && this.output.show(true)));
      } finally {
        this.pendingRestarts -= 1;
      }
    });
    this.queue = next;
    return next;
  }

  /** What the server is sent: the keys the user set, and the Python the worker compiles in
   * (vmemLsp.python, else the Python extension's selection) when there is one. */
  private async serverSettings(scope: vscode.Uri | undefined): Promise<ServerSettings> {
    const settings = userSettings(scope);
    const python = await projectPython(scope);
    return python ? { ...settings, python } : settings;
  }

  private async start(): Promise<void> {
    const scope = defaultScope();
    const cwd = scope?.scheme === "file" ? scope.fsPath : undefined;
    const strategy = importStrategy(scope);
    const candidates = await findInterpreters(scope);
    let interpreter = candidates[0];
    this.first = interpreter;
    this.bundled = false;
    let version: string | undefined;
    if (strategy === "fromEnvironment") {
      this.status.starting(`Checking ${[interpreter.command, ...interpreter.args].join(" ")}`);
      let check = await checkImportable(interpreter, cwd);
      // The project's Python has no vmem_lsp: vmem-lsp may be installed as a tool of its own.
      const tool = !check.ok && check.reason !== "failed" && interpreter.source !== "setting" ? fromToolOnPath() : undefined;
      if (tool) {
        const toolCheck = await checkImportable(tool, cwd);
        if (toolCheck.ok) {
          [interpreter, check] = [tool, toolCheck];
        }
      }
      if (check.ok) {
        version = check.version;
      } else if (interpreter.source === "setting" || check.reason === "failed") {
        // The Python named in vmemLsp.interpreter must have vmem_lsp (useBundled runs the bundled
        // one in it); a vmem_lsp that is installed but fails to import is to be fixed, not hidden.
        this.interpreter = interpreter;
        this.reportNotInstalled(interpreter, check.reason, check.detail);
        return;
      } else {
        this.output.appendLine(`[client] no vmem_lsp in ${[interpreter.command, ...interpreter.args].join(" ")} (from the ${interpreter.source}): the bundled one runs`);
      }
    }
    if (version === undefined) {
      // The bundled vmem_lsp, in the first of the interpreters that can run it (3.11 to 3.13).
      const failures: [Interpreter, BundledCheck][] = [];
      for (const candidate of candidates) {
        this.status.starting(`Checking the bundled vmem-lsp with ${[candidate.command, ...candidate.args].join(" ")}`);
        const check = await checkBundled(candidate, this.launcher, cwd);
        if (check.ok) {
          [interpreter, version, this.bundled] = [candidate, check.version, true];
          break;
        }
        failures.push([candidate, check]);
      }
      if (version === undefined) {
        this.interpreter = candidates[0];
        this.reportCannotRunBundled(failures);
        return;
      }
    }
    this.interpreter = interpreter;
    const shown = [interpreter.command, ...interpreter.args].join(" ");
    const what = this.bundled ? `the bundled vmem_lsp ${version}` : `vmem_lsp ${version}`;
    this.output.appendLine(`[client] ${shown} (from the ${interpreter.source}): ${what}`);
    this.status.setConfiguredTargets(asTargets(vscode.workspace.getConfiguration(SECTION, scope).get("targets")));

    const serverOptions: ServerOptions = {
      command: interpreter.command,
      args: this.vmemArgs("serve"),
      // stdio, but no `transport`: with TransportKind.stdio the client appends "--stdio" to the
      // arguments, which `vmem_lsp serve` rejects.
      options: { cwd, env: { ...process.env, PYTHONUNBUFFERED: "1" } },
    };
    this.sent = await this.serverSettings(scope);
    this.output.appendLine(`[client] the worker compiles in ${typeof this.sent.python === "string" ? this.sent.python : "the Python the server finds"}`);
    const clientOptions: LanguageClientOptions = {
      // Python files, and the Python cells of Jupyter notebooks: the client syncs a notebook's cells
      // (LSP 3.17 notebook sync) and the server treats its code cells as one module.
      documentSelector: [{ scheme: "file", language: "python" }, { notebook: "jupyter-notebook", language: "python" }],
      // Workspace trust carries over: the server runs a folder's examples only in folders named here
      // (or trusted with `vmem-lsp trust`), and never takes this list from workspace settings.
      initializationOptions: { [SECTION]: { ...this.sent, trustedFolders: trustedFolders() } },
      synchronize: { configurationSection: SECTION },
      outputChannel: this.output,
      traceOutputChannel: this.trace,
      errorHandler: {
        error: (_error, _message, count) => ({
          action: count !== undefined && count <= 3 ? ErrorAction.Continue : ErrorAction.Shutdown,
        }),
        closed: () => {
          // Like the default handler: start it again, unless it keeps dying.
          const now = Date.now();
          this.crashes = this.crashes.filter((t) => now - t < 3 * 60_000);
          this.crashes.push(now);
          if (this.crashes.length <= 3) {
            this.output.appendLine("[client] the server exited unexpectedly; starting it again");
            return { action: CloseAction.Restart, handled: true };
          }
          this.status.stopped("The vmem-lsp server exited 4 times in 3 minutes.");
          const message =
            "The vmem-lsp server exited 4 times in 3 minutes and was not started again. The output shows why; " +
            "`vmem-lsp doctor` in a terminal checks this machine (versions, the worker, a compile per chip).";
          void vscode.window
            .showErrorMessage(message, DOCTOR, "Show output", "Restart server")
            .then((choice) => {
              if (choice === DOCTOR) {
                this.runDoctor();
              } else if (choice === "Show output") {
                this.output.show(true);
              } else if (choice === "Restart server") {
                void this.restart("restart after the server exited");
              }
            });
          return { action: CloseAction.DoNotRestart, message, handled: true };
        },
      },
      middleware: {
        workspace: {
          // Answer the server's workspace/configuration for our section with the keys the user set.
          configuration: async (params, token, next) => {
            const answers: unknown = await next(params, token);
            if (!Array.isArray(answers)) {
              return answers as ResponseError<void>;
            }
            return Promise.all(
              params.items.map((item, i): unknown =>
                item.section === SECTION
                  ? this.serverSettings(item.scopeUri ? vscode.Uri.parse(item.scopeUri) : scope)
                  : (answers as unknown[])[i],
              ),
            );
          },
          // Send only the keys the user set (the default would send every key, defaults included).
          didChangeConfiguration: async () => {
            const client = this.client;
            if (this.pendingRestarts > 0 || !client || !client.isRunning()) {
              return;
            }
            this.sent = await this.serverSettings(scope);
            await client.sendNotification(DidChangeConfigurationNotification.type, {
              settings: { [SECTION]: this.sent },
            });
            // The server answers later hint requests with the new settings but does not ask the
            // editor to refresh them: do that here, so that turning inlay hints or lenses off shows.
            refreshHints(client);
          },
        },
      },
    };
    const client = new LanguageClient(CLIENT_ID, CLIENT_NAME, serverOptions, clientOptions);
    client.onNotification(STATUS_NOTIFICATION, (params: StatusParams) => this.status.update(params));
    client.onDidChangeState((event) => {
      if (event.newState === State.Running) {
        this.status.running(`vmem-lsp ${version}${this.bundled ? " (bundled)" : ""} on ${shown}`);
      } else if (event.newState === State.Stopped && this.client === client && this.pendingRestarts === 0) {
        this.status.stopped("The vmem-lsp server is not running.");
      }
    });
    this.client = client;
    this.status.starting(`Starting ${what} on ${shown}`);
    await client.start();
  }

  private async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (!client) {
      return;
    }
    try {
      if (client.needsStop()) {
        await client.stop(5000);
      }
    } catch (error) {
      this.output.appendLine(`[client] stopping the server: ${describe(error)}`);
    }
    try {
      await client.dispose(2000);
    } catch {
      // already stopped
    }
  }

  private reportNotInstalled(interpreter: Interpreter, reason: string, detail: string): void {
    const shown = [interpreter.command, ...interpreter.args].join(" ");
    const what =
      reason === "no-interpreter"
        ? `vmem-lsp: the Python interpreter ${shown} (from the ${interpreter.source}) was not found.`
        : reason === "not-installed"
          ? `vmem-lsp is not installed in ${shown} (from the ${interpreter.source}).`
          : `vmem-lsp: "import vmem_lsp" failed with ${shown} (from the ${interpreter.source}).`;
    this.output.appendLine(`[client] ${what}\n${detail}`);
    this.status.notInstalled(`${what}\nClick for how to install it.`);
    // Installed but failing to import: doctor's own output shows why.
    const hint =
      reason === "failed"
        ? " Run `vmem-lsp doctor` in a terminal to see why."
        : interpreter.source === "setting"
          ? ' Install it there, or set "vmemLsp.importStrategy" to "useBundled" to run the vmem-lsp this extension bundles in that Python.'
          : " Once it is installed, run `vmem-lsp doctor` in a terminal: it checks this machine.";
    const buttons = reason === "failed" ? [DOCTOR] : [];
    void vscode.window
      .showErrorMessage(what + hint, "How to install", "Select interpreter", "Show output", ...buttons)
      .then((choice) => {
        if (choice === DOCTOR) {
          this.runDoctor();
        } else if (choice === "How to install") {
          this.showInstallHelp();
        } else if (choice === "Select interpreter") {
          void vscode.commands.executeCommand("workbench.action.openSettings", `${SECTION}.interpreter`);
        } else if (choice === "Show output") {
          this.output.show(true);
        }
      });
  }

  /** No interpreter could run the bundled vmem_lsp: says why, for each one tried. */
  private reportCannotRunBundled(failures: [Interpreter, BundledCheck][]): void {
    const why = failures.map(([interpreter, check]) => {
      const shown = [interpreter.command, ...interpreter.args].join(" ");
      const detail = check.ok ? "" : check.reason === "no-interpreter" ? "not found" : check.detail;
      return `${shown} (from the ${interpreter.source}): ${detail}`;
    });
    const what =
      "vmem-lsp: no Python here can run the vmem-lsp this extension bundles (it needs CPython 3.11 to 3.13 on Linux x86-64).";
    this.output.appendLine(`[client] ${what}\n${why.map((w) => `  ${w}`).join("\n")}`);
    this.status.notInstalled(`${what}\n${why.join("\n")}\nClick for how to install it.`);
    void vscode.window
      .showErrorMessage(
        `${what} Tried: ${why.join("; ")}. Select a Python 3.11+ (vmemLsp.interpreter or the Python extension), or install vmem-lsp in yours.`,
        "How to install",
        "Select interpreter",
        "Show output",
      )
      .then((choice) => {
        if (choice === "How to install") {
          this.showInstallHelp();
        } else if (choice === "Select interpreter") {
          void vscode.commands.executeCommand("workbench.action.openSettings", `${SECTION}.interpreter`);
        } else if (choice === "Show output") {
          this.output.show(true);
        }
      });
  }

  showInstallHelp(): void {
    const python = this.interpreter ? [this.interpreter.command, ...this.interpreter.args].join(" ") : "python3";
    this.output.appendLine(
      [
        "",
        "How to install vmem-lsp",
        "=======================",
        "The extension bundles vmem-lsp's own Python code (no Python interpreter): it runs the server with",
        "your Python, found as: the \"vmemLsp.interpreter\" setting, else the interpreter selected in the",
        "Python extension, else the workspace's .venv (or venv), else python3 on PATH. That Python's own",
        "vmem_lsp runs when it has one, else the bundled one (\"vmemLsp.importStrategy\"), which needs",
        "CPython 3.11 to 3.13. The compile worker runs in the project's Python, with its jax and libtpu.",
        `It tried: ${python}`,
        "",
        "To use the bundled vmem-lsp: select a Python 3.11+ (set \"vmemLsp.interpreter\", or select one in the",
        "Python extension) and, if \"vmemLsp.interpreter\" is set to a Python without vmem-lsp, set",
        "\"vmemLsp.importStrategy\" to \"useBundled\". Or install vmem-lsp yourself:",
        "",
        "1. Install vmem-lsp (it brings jax[tpu], whose libtpu holds the TPU compiler; Linux, Python 3.11+):",
        "   vmem-lsp is not on PyPI yet: install it from its repository at a tag or commit,",
        `     ${python} -m pip install "vmem-lsp @ git+https://<repo-url>@<tag-or-commit>"`,
        "   or from a wheel built with scripts/build_artifacts.sh,",
        `     ${python} -m pip install /path/to/vmem_lsp-<version>-py3-none-any.whl`,
        "   or from a checkout of vmem-lsp:",
        `     ${python} -m pip install -e /path/to/vmem-lsp`,
        `   (once it is published: ${python} -m pip install vmem-lsp)`,
        "2. Or point the extension at the Python that has it: set \"vmemLsp.interpreter\"",
        "   (e.g. /path/to/project/.venv/bin/python), or select that interpreter in the Python extension.",
        "3. Run \"VMEM: Restart server\".",
        `4. To check this machine (versions, the worker, a compile per chip): ${python} -m vmem_lsp doctor`,
        "",
      ].join("\n"),
    );
    this.output.show(true);
  }

  /** `<python> -m vmem_lsp doctor` in a terminal of its own, in the workspace's folder. */
  runDoctor(): void {
    const scope = defaultScope();
    const python = this.interpreter ? [this.interpreter.command, ...this.interpreter.args] : ["python3"];
    const command = this.interpreter && this.bundled ? [this.interpreter.command, ...this.vmemArgs("doctor")] : [...python, "-m", "vmem_lsp", "doctor"];
    const terminal = vscode.window.createTerminal({
      name: "vmem-lsp doctor",
      cwd: scope?.scheme === "file" ? scope.fsPath : undefined,
    });
    terminal.show();
    terminal.sendText(shellCommand(command));
  }

  /** Settings changed: restart when needed; otherwise the language client forwards them. */
  async onConfigurationChanged(event: vscode.ConfigurationChangeEvent): Promise<void> {
    if (!event.affectsConfiguration(SECTION)) {
      return;
    }
    const scope = defaultScope();
    this.status.setConfiguredTargets(asTargets(vscode.workspace.getConfiguration(SECTION, scope).get("targets")));
    if (!this.client || needsRestart(event, this.sent, await this.serverSettings(scope))) {
      void this.restart("settings changed");
    }
  }

  /** The Python extension's interpreter changed: the server restarts when it ran in the old one;
   * else the worker's Python (the `python` option) is sent again, and the server restarts its
   * workers in the new one. */
  async onPythonInterpreterChanged(): Promise<void> {
    const scope = defaultScope();
    const first = this.first;
    if (first && first.source !== "setting") {
      const next = await findInterpreter(scope);
      if (next.command !== first.command || next.args.join(" ") !== first.args.join(" ")) {
        void this.restart(`the selected interpreter is now ${next.command}`);
        return;
      }
    }
    const client = this.client;
    const now = await this.serverSettings(scope);
    if (!client || !client.isRunning() || this.pendingRestarts > 0 || now.python === this.sent.python) {
      return;
    }
    if (!("python" in now)) {
      void this.restart("no interpreter is selected now");  // the server keeps a value it was sent
      return;
    }
    this.sent = now;
    this.output.appendLine(`[client] the worker compiles in ${typeof now.python === "string" ? now.python : "?"} now`);
    await client.sendNotification(DidChangeConfigurationNotification.type, { settings: { [SECTION]: now } });
  }

  async dispose(): Promise<void> {
    this.disposed = true;
    await this.queue.catch(() => undefined);
    await this.stop();
    this.status.dispose();
    this.output.dispose();
    this.trace.dispose();
  }
}

/** Asks VS Code to request inlay hints and code lenses again for the visible Python files. */
function refreshHints(client: LanguageClient): void {
  for (const editor of vscode.window.visibleTextEditors) {
    try {
      client.getFeature(InlayHintRequest.method)?.getProvider(editor.document)?.onDidChangeInlayHints.fire();
      client.getFeature(CodeLensRequest.method)?.getProvider(editor.document)?.onDidChangeCodeLensEmitter.fire();
    } catch {
      // not a document of ours, or the feature is not registered
    }
  }
}

/** The workspace's folders when the user trusts the workspace (the extension runs only then). */
function trustedFolders(): string[] {
  if (!vscode.workspace.isTrusted) {
    return [];
  }
  return (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === "file").map((f) => f.uri.fsPath);
}

function asTargets(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === "string") : [];
}

/** A command line for the terminal's shell: a word with spaces or quotes quoted, in single quotes
 * for a POSIX shell, in double quotes on Windows (PowerShell runs a quoted program after `&`). */
function shellCommand(words: string[]): string {
  const windows = process.platform === "win32";
  const quoted = words.map((w) =>
    /^[\w@%+=:,./\\-]+$/.test(w) ? w : windows ? `"${w}"` : `'${w.replace(/'/g, "'\\''")}'`,
  );
  return windows && quoted[0].startsWith('"') ? `& ${quoted.join(" ")}` : quoted.join(" ");
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

let controller: Controller | undefined;

export function activate(context: vscode.ExtensionContext): void {
  const ctl = new Controller(context.extensionPath);
  controller = ctl;
  context.subscriptions.push(
    ctl.status,
    vscode.commands.registerCommand("vmemLsp.restart", () => ctl.restart("restart command")),
    vscode.commands.registerCommand("vmemLsp.showOutput", () => ctl.output.show(true)),
    vscode.commands.registerCommand("vmemLsp.howToInstall", () => ctl.showInstallHelp()),
    vscode.commands.registerCommand("vmemLsp.explainReport", () => ctl.explainReport()),
    vscode.workspace.onDidChangeConfiguration((event) => void ctl.onConfigurationChanged(event)),
  );
  void onPythonInterpreterChange(() => void ctl.onPythonInterpreterChanged()).then((disposable) =>
    context.subscriptions.push(disposable),
  );
  void ctl.restart("activation");
}

export async function deactivate(): Promise<void> {
  await controller?.dispose();
  controller = undefined;
}
