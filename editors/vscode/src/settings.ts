// The vmemLsp.* settings as the server sees them: only the keys the user has set (so that the
// server falls back to pyproject.toml and its own defaults for the rest), with camelCase keys.
import * as vscode from "vscode";

export const SECTION = "vmemLsp";

/** Keys the server reads (vmem_lsp/server/options.py). */
export const SERVER_KEYS = [
  "targets",
  "worker",
  "python",
  "backend",
  "rayAddress",
  "timeout",
  "traceTimeout",
  "scopedVmemLimit",
  "headroomWarning",
  "inlayHints",
  "codeLens",
  "compileOnOpen",
  "compileOnSave",
  "debounceMs",
  "cache",
  "fasterFixes",
] as const;

/** Keys whose change needs a new server process rather than a didChangeConfiguration. */
export const RESTART_KEYS = ["interpreter", "importStrategy"] as const;

export type ServerSettings = Partial<Record<(typeof SERVER_KEYS)[number], unknown>>;

function isSet(inspected: ReturnType<vscode.WorkspaceConfiguration["inspect"]>): boolean {
  if (!inspected) {
    return false;
  }
  const values = [
    inspected.globalValue,
    inspected.workspaceValue,
    inspected.workspaceFolderValue,
    inspected.globalLanguageValue,
    inspected.workspaceLanguageValue,
    inspected.workspaceFolderLanguageValue,
  ];
  return values.some((value) => value !== undefined && value !== null);
}

/** The settings the user has set, for the server (initializationOptions, workspace/configuration,
 * workspace/didChangeConfiguration). A null value (the default of targets, worker and timeout)
 * counts as not set. */
export function userSettings(scope?: vscode.Uri): ServerSettings {
  const config = vscode.workspace.getConfiguration(SECTION, scope ?? defaultScope());
  const result: ServerSettings = {};
  for (const key of SERVER_KEYS) {
    if (isSet(config.inspect(key))) {
      const value = config.get(key);
      if (value !== undefined && value !== null) {
        result[key] = value;
      }
    }
  }
  return result;
}

export function defaultScope(): vscode.Uri | undefined {
  return vscode.workspace.workspaceFolders?.[0]?.uri;
}

/** Whether a change of settings needs the server restarted: a restart key changed, or a key the
 * server had been given was unset (the server keeps a value it was sent until it is restarted,
 * so going back to pyproject.toml or the default needs a fresh process). */
export function needsRestart(
  event: vscode.ConfigurationChangeEvent,
  sent: ServerSettings,
  now: ServerSettings,
): boolean {
  if (RESTART_KEYS.some((key) => event.affectsConfiguration(`${SECTION}.${key}`))) {
    return true;
  }
  return Object.keys(sent).some((key) => !(key in now));
}
