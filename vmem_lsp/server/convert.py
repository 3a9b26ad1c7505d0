"""Our plain data to LSP types, at the edge. Inside vmem-lsp a column counts
code points; the client counts in the position encoding negotiated at
initialize (UTF-8 or UTF-16 code units, or code points): `negotiate` picks
it as ruff does, and `Positions` converts each column with its line's text."""
from __future__ import annotations

from typing import Callable

from lsprotocol import types
from pygls.uris import from_fs_path
from pygls.workspace.position_codec import PositionCodec

from ..diagnostics import Diagnostic
from ..source.directives import ExampleKey
from ..source.model import Span
from ..source.text import split_lines

SEVERITY = {"error": types.DiagnosticSeverity.Error, "warning": types.DiagnosticSeverity.Warning,
            "information": types.DiagnosticSeverity.Information}

# Best first, as ruff ranks them: UTF-8 is how the file is stored and what
# Python's own columns count, code points are what vmem-lsp counts, UTF-16 is
# every client's fallback and the LSP's default.
PREFERENCE = (types.PositionEncodingKind.Utf8, types.PositionEncodingKind.Utf32, types.PositionEncodingKind.Utf16)


def negotiate(capabilities: types.ClientCapabilities) -> None:
    """Order the client's `general.positionEncodings` by our preference, in
    place: pygls takes the first one it supports, and then counts the
    client's didChange positions and advertises `positionEncoding` in it."""
    general = capabilities.general
    if general is not None and general.position_encodings:
        rank = {kind: i for i, kind in enumerate(PREFERENCE)}
        general.position_encodings = sorted(general.position_encodings, key=lambda k: rank.get(k, len(rank)))


class Positions:
    """Our positions (lines 1-based, columns in code points) in the client's
    encoding. A column is converted with its line's text: an open document's
    buffer, else the file on disk (a library file a diagnostic or a fix points
    into). One per message: it keeps the lines it has read."""

    def __init__(self, codec: PositionCodec, buffer_of: Callable[[str], str | None]):
        self.codec = codec
        self.buffer_of = buffer_of
        self.lines: dict[str, list[str]] = {}

    def position(self, path: str, line: int, col: int) -> types.Position:
        line, col = max(line - 1, 0), max(col, 0)
        if self.codec.encoding == types.PositionEncodingKind.Utf32:
            return types.Position(line, col)
        lines = self._lines(path)
        text = lines[line] if line < len(lines) else ""
        if text.isascii():
            return types.Position(line, col)
        return types.Position(line, self.codec.client_num_units(text[:col]) + max(col - len(text), 0))

    def range(self, path: str, span: Span) -> types.Range:
        start = self.position(path, span.start_line, span.start_col)
        end = self.position(path, span.end_line, span.end_col)
        if (end.line, end.character) < (start.line, start.character):
            end = start
        return types.Range(start, end)

    def _lines(self, path: str) -> list[str]:
        if path not in self.lines:
            text = self.buffer_of(path)
            if text is None:
                try:
                    with open(path, encoding="utf-8", errors="replace", newline="") as f:
                        text = f.read()
                except OSError:
                    text = ""
            self.lines[path] = split_lines(text)
        return self.lines[path]


def to_uri(path: str) -> str:
    return from_fs_path(path) or path


def to_diagnostic(d: Diagnostic, positions: Positions) -> types.Diagnostic:
    tier = "compiler" if d.origin == "compiler" else "estimate"
    return types.Diagnostic(
        range=positions.range(d.path, d.span),
        message=f"{d.message} [compiler]" if tier == "compiler" else d.message,
        severity=SEVERITY[d.severity],
        code=d.code,
        source="vmem-lsp",
        related_information=[types.DiagnosticRelatedInformation(
            types.Location(to_uri(r.path), positions.range(r.path, r.span)), r.message) for r in d.related] or None,
        data={"target": d.target, "tier": tier, **{k: v for k, v in d.facts.items() if _plain(v)},
              **(example_data(d.subject.example) if d.subject is not None else {})},
    )


def example_data(key: ExampleKey) -> dict:
    """The example a diagnostic or an action is about, in its `data`: what a
    code action request brings back to find the example's fixes."""
    return {"example": {"path": key.path, "line": key.line}}


def _plain(value) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))
