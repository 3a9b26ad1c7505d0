"""`vmem-lsp serve`: the language server on stdin/stdout (vmem_lsp/server/)."""

from __future__ import annotations

from .common import log_to_stderr


def add_parser(commands) -> None:
    serve = commands.add_parser("serve", help="run the language server on stdin/stdout")
    serve.add_argument("--stdio", action="store_true", help="accepted for clients that pass it; stdio is the transport")
    serve.set_defaults(run=run)


def run(args) -> int:
    from ..server.app import serve

    log_to_stderr()  # the editor's log of the server
    return serve()
