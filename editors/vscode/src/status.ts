// The status-bar item: what the server's compile worker is doing, from its vmemLsp/status
// notification, and what the extension itself is doing before the server runs.
import * as vscode from "vscode";

export const STATUS_NOTIFICATION = "vmemLsp/status";

export interface StatusParams {
  /** "starting" | "compiling" | "ready" | "crashed" | "no_compiler" (others shown as they are) */
  state: string;
  message?: string;
  done?: number;
  total?: number;
  targets?: string[];
  /** Errors of vmem-lsp itself (never of the user's files) since the server started. */
  internalErrors?: number;
}

export class StatusItem implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  /** A target without a compiler was reported during the current compile; the "ready" that
   * follows it then still says that the verdicts are estimates. */
  private noCompiler: string | undefined;
  private targets: string[] = [];
  /** Targets named by the "compiling" messages of the current compile ("v6e: f(...)"), for when
   * neither the notification nor the settings name them (targets from pyproject.toml). */
  private compiledTargets: string[] = [];

  constructor() {
    this.item = vscode.window.createStatusBarItem("vmemLsp.status", vscode.StatusBarAlignment.Left, 10);
    this.item.name = "VMEM (vmem-lsp)";
    this.show("VMEM", "vmem-lsp", "vmemLsp.showOutput");
  }

  /** The extension is starting the server (before any notification from it). */
  starting(detail: string): void {
    this.noCompiler = undefined;
    this.show("VMEM $(sync~spin) starting", detail, "vmemLsp.showOutput");
  }

  /** The server process runs; its worker has not said anything yet. */
  running(detail: string): void {
    this.show("VMEM", detail, "vmemLsp.showOutput");
  }

  stopped(detail: string): void {
    this.show("VMEM $(debug-stop) stopped", `${detail}\nClick to restart the server.`, "vmemLsp.restart", "warning");
  }

  /** The server cannot be started: no interpreter, or vmem_lsp is not installed in it. */
  notInstalled(detail: string): void {
    this.show("VMEM $(warning) not installed", detail, "vmemLsp.howToInstall", "error");
  }

  /** Targets from the settings, shown when the server's notification carries none. */
  setConfiguredTargets(targets: string[]): void {
    this.targets = targets;
  }

  update(params: StatusParams): void {
    const message = params.message ?? "";
    const targets =
      params.targets && params.targets.length > 0
        ? params.targets
        : this.targets.length > 0
          ? this.targets
          : this.compiledTargets;
    const done = params.done ?? 0;
    const total = params.total ?? 0;
    switch (params.state) {
      case "starting":
        this.show("VMEM $(sync~spin) starting", message, "vmemLsp.showOutput");
        break;
      case "compiling":
        if (done === 0 && total > 0) {
          this.noCompiler = undefined;   // a new compile: forget what the last one said
          this.compiledTargets = [];
        }
        {
          const target = /^(v\d+[a-z]*): /.exec(message)?.[1];
          if (target && !this.compiledTargets.includes(target)) {
            this.compiledTargets.push(target);
          }
        }
        this.show(
          total > 0 ? `VMEM $(sync~spin) compiling ${done}/${total}` : "VMEM $(sync~spin) compiling",
          message,
          "vmemLsp.showOutput",
        );
        break;
      case "ready":
        if (this.noCompiler !== undefined) {
          this.show("VMEM no compiler: estimates only", `${this.noCompiler}\n${message}`, "vmemLsp.showOutput", "warning");
        } else if ((params.internalErrors ?? 0) > 0) {
          const count = params.internalErrors ?? 0;
          this.show(
            `VMEM ready $(bug) ${count}`,
            `${message}\nvmem-lsp hit ${count} internal error${count === 1 ? "" : "s"} (its own bugs, not your ` +
              "files'); what was checked is still shown. Click for the log, and please report it.",
            "vmemLsp.showOutput",
            "warning",
          );
        } else {
          this.show(targets.length > 0 ? `VMEM ready · ${targets.join(", ")}` : "VMEM ready", message, "vmemLsp.showOutput");
        }
        break;
      case "no_compiler":
        this.noCompiler = message;
        this.show("VMEM no compiler: estimates only", message, "vmemLsp.showOutput", "warning");
        break;
      case "crashed":
        this.show("VMEM $(error) crashed", `${message}\nClick to restart the server.`, "vmemLsp.restart", "error");
        break;
      default:
        this.show(`VMEM ${params.state}`, message, "vmemLsp.showOutput");
    }
  }

  private show(text: string, tooltip: string, command: string, background?: "warning" | "error"): void {
    this.item.text = text;
    this.item.tooltip = tooltip || undefined;
    this.item.command = command;
    this.item.backgroundColor = background ? new vscode.ThemeColor(`statusBarItem.${background}Background`) : undefined;
    this.item.show();
  }

  dispose(): void {
    this.item.dispose();
  }
}
