"""didSave: compile the file's examples; a newer save supersedes this one."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from ..app import VmemServer


async def handle(ls: VmemServer, params: types.DidSaveTextDocumentParams) -> None:
    path = ls.path_of(params.text_document.uri)
    if path not in ls.session.documents:
        return
    ls.session.saved(path)          # before any await: typing after the save must not move it
    await ls.analyse_now(path)
    if ls.session.options.compile_on_save:
        ls.compile(path)
