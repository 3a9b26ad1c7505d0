"""didSave: compile the file's examples; a newer save supersedes this one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from ..app import VmemServer


async def handle(ls: VmemServer, params: types.DidSaveTextDocumentParams) -> None:
    await saved(ls, ls.path_of(params.text_document.uri))


async def saved(ls: VmemServer, path: str) -> None:
    """A file or a notebook just saved: what is on disk is what a compile reads."""
    if path not in ls.session.documents:
        return
    if not ls.session.saved(path):  # before any await: typing after the save must not move it
        ls.log(
            types.MessageType.Warning,
            f"vmem-lsp: {path} on disk is not what the editor holds "
            f"(a notebook's code cell in another language?): not compiled",
        )
    await ls.analyse_now(path)
    if ls.session.options.compile_on_save:
        ls.compile(path)
