"""A real LSP client (pytest-lsp's, on pygls) driving `vmem-lsp serve` in a
subprocess over stdio, as an editor would."""

from __future__ import annotations

import asyncio
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

from lsprotocol import types
from pytest_lsp import make_test_lsp_client

from support.tiers import EDITOR, starts

PUSH_CAPABILITIES = types.ClientCapabilities(
    text_document=types.TextDocumentClientCapabilities(
        publish_diagnostics=types.PublishDiagnosticsClientCapabilities(related_information=True),
        hover=types.HoverClientCapabilities(content_format=[types.MarkupKind.Markdown]),
        inlay_hint=types.InlayHintClientCapabilities(),
        synchronization=types.TextDocumentSyncClientCapabilities(did_save=True),
    ),
    window=types.WindowClientCapabilities(work_done_progress=True),
    workspace=types.WorkspaceClientCapabilities(configuration=True),
)

PULL_CAPABILITIES = types.ClientCapabilities(
    text_document=types.TextDocumentClientCapabilities(
        diagnostic=types.DiagnosticClientCapabilities(related_document_support=True),
        synchronization=types.TextDocumentSyncClientCapabilities(did_save=True),
    ),
    workspace=types.WorkspaceClientCapabilities(
        diagnostics=types.DiagnosticWorkspaceClientCapabilities(refresh_support=True)
    ),
)

BARE_CAPABILITIES = types.ClientCapabilities()  # no progress, no resolve, no pull: the least a client says

RESOLVE_CAPABILITIES = types.ClientCapabilities(
    text_document=types.TextDocumentClientCapabilities(
        code_action=types.CodeActionClientCapabilities(
            resolve_support=types.ClientCodeActionResolveOptions(properties=["edit"])
        )
    )
)


def ask_on_verdict(client, uri: str, version: int | None = None) -> asyncio.Future:
    """(seconds, actions): a codeAction on the first compiler squiggle of `uri`
    (of `version`, if given), sent from inside the publishDiagnostics that
    brings it, as soon as a client can ask; the seconds from that publish to
    the answer."""
    answer = asyncio.get_running_loop().create_future()
    original = client.protocol.fm.features.get(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

    async def ask(window, arrived):
        actions = await client.text_document_code_action_async(
            types.CodeActionParams(
                types.TextDocumentIdentifier(uri), window.range, types.CodeActionContext(diagnostics=[window])
            )
        )
        answer.set_result((time.monotonic() - arrived, actions or []))

    def on_publish(params: types.PublishDiagnosticsParams):
        if original:
            original(params)
        verdict = any(d.data and d.data.get("tier") == "compiler" for d in params.diagnostics)
        # The squiggle on a BlockSpec (its split may be the model's, of the compiler's total), else on the call.
        window = min(
            (d for d in params.diagnostics if d.data and "example" in d.data),
            key=lambda d: d.code != "VMEM001",
            default=None,
        )
        if params.uri == uri and verdict and window is not None and version in (None, params.version):
            client.protocol.fm.features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = original
            asyncio.ensure_future(ask(window, time.monotonic()))

    client.protocol.fm.features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = on_publish
    return answer


@starts(EDITOR)
@asynccontextmanager
async def running_server(
    workdir: Path,
    options: dict | None = None,
    capabilities=PUSH_CAPABILITIES,
    settings: dict | None = None,
    trusted: bool = True,
):
    """The server, started as an editor starts it. `trusted`: the editor's
    user-level settings trust `workdir` (trustedFolders), so its examples run."""
    client = make_test_lsp_client()
    if settings is not None:
        client.set_configuration(settings, section="vmemLsp")
    await client.start_io(sys.executable, "-m", "vmem_lsp", "serve", cwd=str(workdir))
    options = {**({"trustedFolders": [str(workdir)]} if trusted else {}), **(options or {})}
    await client.initialize_session(
        types.InitializeParams(capabilities=capabilities, root_uri=workdir.as_uri(), initialization_options=options)
    )
    try:
        yield client
    finally:
        await client.shutdown_session()


class Editor:
    """Open, edit and save one document through a client; the file on disk
    follows the saves, as in a real editor."""

    def __init__(self, client, path: Path):
        self.client, self.path, self.uri, self.version = client, path, path.as_uri(), 1
        self.text = path.read_text()

    def open(self) -> None:
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(self.uri, "python", self.version, self.text))
        )

    def change(self, text: str) -> None:
        self.version += 1
        self.text = text
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                types.VersionedTextDocumentIdentifier(version=self.version, uri=self.uri),
                [types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )

    def save(self) -> None:
        self.path.write_text(self.text)
        self.client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(self.uri)))

    def diagnostics(self, uri: str | None = None) -> list[types.Diagnostic]:
        return list(self.client.diagnostics.get(uri or self.uri, []))


def lsp_lines(text: str) -> list[str]:
    """The lines of a text as the LSP counts them: split at \\n, \\r\\n and \\r only."""
    import re

    return re.split(r"\r\n|\r|\n", text)


def utf16_columns(line: str) -> list[int]:
    """Every valid LSP column of a line: its character boundaries in UTF-16 units."""
    columns = [0]
    for char in line:
        columns.append(columns[-1] + (2 if ord(char) > 0xFFFF else 1))
    return columns


async def wait_for(predicate, timeout: float = 240, what: str = "condition"):
    """Poll until predicate() is truthy; return its value, or fail with `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def compiler_tier(diagnostics):
    return [d for d in diagnostics if d.data and d.data.get("tier") == "compiler"]


def estimate_tier(diagnostics):
    return [d for d in diagnostics if d.data and d.data.get("tier") == "estimate"]


def apply_text_edits(text: str, edits: list[types.TextEdit]) -> str:
    """What an editor does with a WorkspaceEdit's text edits."""
    lines = text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    at = lambda p: starts[p.line] + p.character
    for edit in sorted(edits, key=lambda e: at(e.range.start), reverse=True):
        text = text[: at(edit.range.start)] + edit.new_text + text[at(edit.range.end) :]
    return text
