"""didChange: the static tier, debounced; typing never waits on a compiler."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from ..app import VmemServer


def handle(ls: VmemServer, params: types.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    path = ls.path_of(uri)
    text = ls.workspace.get_text_document(uri).source
    if ls.session.change(path, params.text_document.version, text) is not None:
        ls.schedule_analysis(path, ls.session.options.debounce_ms / 1000)
