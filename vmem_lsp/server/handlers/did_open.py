"""didOpen: estimate at once, and compile in the background."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from ..app import VmemServer


async def handle(ls: VmemServer, params: types.DidOpenTextDocumentParams) -> None:
    document = params.text_document
    path = ls.path_of(document.uri)
    ls.session.open(path, document.version, document.text)
    await opened(ls, path)


async def opened(ls: VmemServer, path: str) -> None:
    """A file or a notebook just opened: estimate it, and compile it if asked to."""
    await ls.analyse_now(path)
    if ls.session.options.compile_on_open:
        ls.compile(path)
