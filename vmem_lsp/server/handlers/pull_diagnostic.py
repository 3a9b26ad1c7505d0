"""textDocument/diagnostic: the same diagnostics as pushed, for clients that pull."""
from lsprotocol import types

from ..convert import to_diagnostic


def handle(ls, params: types.DocumentDiagnosticParams) -> types.FullDocumentDiagnosticReport:
    path = ls.path_of(params.text_document.uri)
    positions = ls.positions()
    return types.FullDocumentDiagnosticReport(items=[to_diagnostic(d, positions) for d in ls.session.diagnostics(path)])
