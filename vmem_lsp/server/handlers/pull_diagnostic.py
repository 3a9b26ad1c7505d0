"""textDocument/diagnostic: the same diagnostics as pushed, for clients that
pull; a notebook cell's are those of its notebook that fall in it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from ..convert import to_diagnostics

if TYPE_CHECKING:
    from ..app import VmemServer


def handle(ls: VmemServer, params: types.DocumentDiagnosticParams) -> types.FullDocumentDiagnosticReport:
    uri = params.text_document.uri
    path = ls.path_of(uri)
    by_uri = to_diagnostics(ls.session.diagnostics(path), ls.positions())
    doc = ls.session.documents.get(path)
    if doc is not None and doc.cells is None and not ls.uses_pull(path):
        return types.FullDocumentDiagnosticReport(items=[])  # pushed to this client: shown once, not twice
    if doc is None or doc.cells is None:  # a file's: all of them, however the client spells its URI
        return types.FullDocumentDiagnosticReport(items=[d for shown in by_uri.values() for d in shown])
    return types.FullDocumentDiagnosticReport(items=by_uri.get(uri, []))
