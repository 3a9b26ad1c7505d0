"""notebookDocument/didOpen, didChange, didSave, didClose (LSP 3.17): a
notebook is one document of the session, at the notebook's path, whose text
is the module its Python code cells make (source/notebook.open_notebook).
pygls keeps the cells' texts and order in its workspace; each message here
rebuilds the module from them. The four messages share that, so they live
in one module. Typing in a cell runs the static tier, like didChange; saving
the notebook runs the compiler tier, which reads the .ipynb from disk."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING
from urllib.parse import unquote

from lsprotocol import types

from ...source.notebook import OpenNotebook, open_notebook
from .did_close import close
from .did_open import opened
from .did_save import saved

if TYPE_CHECKING:
    from ..app import VmemServer

PYTHON = "python"
SYNC = types.NotebookDocumentSyncOptions(
    notebook_selector=[
        types.NotebookDocumentFilterWithNotebook(
            notebook="jupyter-notebook", cells=[types.NotebookCellLanguage(PYTHON)]
        )
    ],
    save=True,
)


unquoted = lru_cache(maxsize=4096)(unquote)  # pygls' key of a cell's URI: once per cell, not per keystroke


def cells(ls: VmemServer, uri: str, previous: OpenNotebook | None = None) -> OpenNotebook:
    """The module of the notebook's Python code cells, as pygls holds them now."""
    notebook = ls.workspace.get_notebook_document(notebook_uri=uri)
    code = []
    for cell in notebook.cells if notebook is not None else ():
        document = ls.workspace.text_documents.get(unquoted(cell.document))
        if (
            cell.kind == types.NotebookCellKind.Code
            and document is not None
            and (document.language_id or PYTHON) == PYTHON
        ):
            code.append((cell.document, document.source))
    return open_notebook(code, previous)


async def did_open(ls: VmemServer, params: types.DidOpenNotebookDocumentParams) -> None:
    notebook = params.notebook_document
    path = ls.path_of(notebook.uri)
    module = cells(ls, notebook.uri)
    ls.session.open(path, notebook.version, module.module, module)
    await opened(ls, path)


def did_change(ls: VmemServer, params: types.DidChangeNotebookDocumentParams) -> None:
    """Cells added, removed, moved or edited, or metadata changed: the module
    again. When the module's text is the same (metadata, a markdown cell),
    its version stays, and so does a verdict of the compiler on it."""
    uri = params.notebook_document.uri
    path = ls.path_of(uri)
    doc = ls.session.documents.get(path)
    if doc is None:
        return
    typed = params.change.cells.text_content if params.change.cells is not None else None
    if typed:  # told their new version on the next publish, even with nothing to show
        ls.typed_in.setdefault(path, set()).update(change.document.uri for change in typed)
    module = cells(ls, uri, doc.cells)
    if module.module == doc.text:
        doc.cells = module  # the same lines, maybe in other cells
        ls.publish({path})
        return
    ls.session.change(path, params.notebook_document.version, module.module, module)
    ls.schedule_analysis(path, ls.session.options.debounce_ms / 1000)


async def did_save(ls: VmemServer, params: types.DidSaveNotebookDocumentParams) -> None:
    await saved(ls, ls.path_of(params.notebook_document.uri))


def did_close(ls: VmemServer, params: types.DidCloseNotebookDocumentParams) -> None:
    close(ls, ls.path_of(params.notebook_document.uri))
