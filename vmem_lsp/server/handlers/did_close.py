"""didClose: forget the buffer; what compiles of other files say about it stays."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from ..app import VmemServer


def handle(ls: VmemServer, params: types.DidCloseTextDocumentParams) -> None:
    close(ls, ls.path_of(params.text_document.uri))


def close(ls: VmemServer, path: str) -> None:
    """Forget a file or a notebook, and clear what it showed (every cell's)."""
    task = ls.debounced.pop(path, None)
    if task is not None:
        task.cancel()
    ls.session.close(path)
    ls.publish({path})
