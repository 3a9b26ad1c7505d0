"""pygls' language server protocol, with two costs taken off the message
loop: didChange applied by one splice (documents.py) instead of pygls'
rewrite of every line, and Python's full garbage collections moved to quiet
moments (collector.py); the position encoding chosen as ruff chooses it
(convert.py); and no future kept per notification."""

from __future__ import annotations

from functools import partial

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

    def _execute_handler(self, msg_id, handler, callback, args=None, kwargs=None):
        """pygls files the future of every handler it runs under an id: a
        request's, taken out when it is answered, or one it makes up (for a
        notification, and for each handler a generator hands on to: didOpen,
        didChange), which nothing took out: each keystroke left Futures and
        their locks in the server for good. Those go once done."""
        if not (isinstance(callback, partial) and callback.func == self._send_handler_result):
            then = callback

            def callback(future, msg_id=msg_id):
                if not future.cancelled():  # shutdown cancels what is pending while it walks them
                    self._request_futures.pop(msg_id, None)
                then(future)

        return super()._execute_handler(msg_id, handler, callback, args, kwargs)

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
