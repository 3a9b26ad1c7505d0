"""didClose: forget the buffer; what compiles of other files say about it stays."""
from lsprotocol import types


def handle(ls, params: types.DidCloseTextDocumentParams) -> None:
    path = ls.path_of(params.text_document.uri)
    task = ls.debounced.pop(path, None)
    if task is not None:
        task.cancel()
    ls.session.close(path)
    ls.publish({path})
