"""initialize: read the editor's initializationOptions into the typed options."""
from lsprotocol import types

from ..options import options_from


def handle(ls, params: types.InitializeParams) -> None:
    options, problems = options_from(params.initialization_options, ls.session.options, initialization=True)
    ls.session.options = options
    for problem in problems:
        ls.log(types.MessageType.Warning, f"vmem-lsp: {problem}")
