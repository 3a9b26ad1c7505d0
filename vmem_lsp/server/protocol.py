"""pygls' language server protocol, with two costs taken off the message
loop: didChange applied by one splice (documents.py) instead of pygls'
rewrite of every line, and Python's full garbage collections moved to quiet
moments (collector.py); and the position encoding chosen as ruff chooses it
(convert.py)."""

from __future__ import annotations

from lsprotocol import types
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from .collector import QuietCollector
from .convert import negotiate
from .documents import apply_change


class VmemProtocol(LanguageServerProtocol):
    def __init__(self, server, converter):
        super().__init__(server, converter)
        self.collector = QuietCollector()

    def handle_message(self, message):
        self.collector.message_arrived()
        return super().handle_message(message)

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        negotiate(params.capabilities)
        return (yield from super().lsp_initialize(params))

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        document = self.workspace.get_text_document(params.text_document.uri)
        text = document.source
        for change in params.content_changes:
            text = apply_change(text, change, document.position_codec)
        document.apply_change(types.TextDocumentContentChangeWholeDocument(text=text))
        document.version = params.text_document.version
        if (user_handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield user_handler, (params,), None
