"""One module per LSP message; `register` wires them to the server."""

from lsprotocol import types

from . import (
    code_action,
    code_lens,
    did_change,
    did_change_configuration,
    did_close,
    did_open,
    did_save,
    execute_command,
    hover,
    initialize,
    initialized,
    inlay_hint,
    notebook_sync,
    pull_diagnostic,
    rank_sweep,
    shutdown,
)


def register(server) -> None:
    server.feature(types.INITIALIZE)(initialize.handle)
    server.feature(types.INITIALIZED)(initialized.handle)
    server.feature(types.SHUTDOWN)(shutdown.handle)
    server.feature(types.TEXT_DOCUMENT_DID_OPEN)(did_open.handle)
    server.feature(types.TEXT_DOCUMENT_DID_CHANGE)(did_change.handle)
    server.feature(types.TEXT_DOCUMENT_DID_SAVE)(did_save.handle)
    server.feature(types.TEXT_DOCUMENT_DID_CLOSE)(did_close.handle)
    server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)(notebook_sync.did_open)
    server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)(notebook_sync.did_change)
    server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)(notebook_sync.did_save)
    server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)(notebook_sync.did_close)
    server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)(did_change_configuration.handle)
    server.feature(types.TEXT_DOCUMENT_HOVER)(hover.handle)
    server.command(execute_command.EXPLAIN)(execute_command.handle)
    server.command(rank_sweep.RANK)(rank_sweep.handle)
    server.feature(types.TEXT_DOCUMENT_INLAY_HINT)(inlay_hint.handle)
    server.feature(types.TEXT_DOCUMENT_CODE_LENS)(code_lens.handle)
    server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=code_action.KINDS, resolve_provider=True),
    )(code_action.handle)
    server.feature(types.CODE_ACTION_RESOLVE)(code_action.resolve)
    server.feature(
        types.TEXT_DOCUMENT_DIAGNOSTIC,
        types.DiagnosticOptions(identifier="vmem-lsp", inter_file_dependencies=True, workspace_diagnostics=False),
    )(pull_diagnostic.handle)
