"""didOpen: estimate at once, and compile in the background."""
from lsprotocol import types


async def handle(ls, params: types.DidOpenTextDocumentParams) -> None:
    document = params.text_document
    path = ls.path_of(document.uri)
    ls.session.open(path, document.version, document.text)
    await ls.analyse_now(path)
    if ls.session.options.compile_on_open:
        ls.compile(path)
