"""textDocument/diagnostic: the same diagnostics as pushed, for clients that pull."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from ..convert import to_diagnostic

if TYPE_CHECKING:
    from ..app import VmemServer


def handle(ls: VmemServer, params: types.DocumentDiagnosticParams) -> types.FullDocumentDiagnosticReport:
    path = ls.path_of(params.text_document.uri)
    positions = ls.positions()
    return types.FullDocumentDiagnosticReport(items=[to_diagnostic(d, positions) for d in ls.session.diagnostics(path)])
