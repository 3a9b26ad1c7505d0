"""Our plain data to LSP types, at the edge. Inside vmem-lsp a column counts
code points; the client counts in the position encoding negotiated at
initialize (UTF-8 or UTF-16 code units, or code points): `negotiate` picks
it as ruff does, and `Positions` converts each column with its line's text.
An open notebook is one module inside: `Positions.location` puts its spans
in the cells they fall in, and `Positions.module_position` brings a cell's
position back into the module."""

from __future__ import annotations

from collections.abc import Callable

from lsprotocol import types
from pygls.uris import from_fs_path
from pygls.workspace.position_codec import PositionCodec

from ..diagnostics import Diagnostic
from ..source.directives import ExampleKey
from ..source.model import Span
from ..source.notebook import OpenNotebook
from ..source.text import split_lines
from .documents import offset_of

SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "information": types.DiagnosticSeverity.Information,
}

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
        rank: dict[str, int] = {kind: i for i, kind in enumerate(PREFERENCE)}
        general.position_encodings = sorted(general.position_encodings, key=lambda k: rank.get(k, len(rank)))


class Positions:
    """Our positions (lines 1-based, columns in code points) in the client's
    encoding. A column is converted with its line's text: an open document's
    buffer, else the file on disk (a library file a diagnostic or a fix points
    into). One per message: it keeps the lines it has read. `cells_of` gives
    an open notebook's cells, whose spans go to the cells' URIs."""

    def __init__(
        self,
        codec: PositionCodec,
        buffer_of: Callable[[str], str | None],
        cells_of: Callable[[str], OpenNotebook | None] = lambda path: None,
    ):
        self.codec = codec
        self.buffer_of = buffer_of
        self.cells_of = cells_of
        self.lines: dict[str, list[str]] = {}
        self.texts: dict[str, str] = {}

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

    def location(self, path: str, span: Span, strict: bool = False) -> tuple[str, types.Range] | None:
        """(URI, range) where a span shows: in its file, or in the cell of an open
        notebook it falls in (None when in none; `strict`: see OpenNotebook.in_cell)."""
        notebook = self.cells_of(path)
        if notebook is None:
            return to_uri(path), self.range(path, span)
        placed = notebook.in_cell(span, strict)
        if placed is None:
            return None
        cell, local = placed
        if cell.uri not in self.lines:
            self.lines[cell.uri] = split_lines(cell.source)
        return cell.uri, self.range(cell.uri, local)

    def shown_in(self, uri: str, path: str, span: Span) -> types.Range | None:
        """The range of a span in the document the client asked about: the file,
        or one cell of a notebook (None when the span shows in another)."""
        if self.cells_of(path) is None:
            return self.range(path, span)
        place = self.location(path, span)
        return place[1] if place is not None and place[0] == uri else None

    def module_position(self, uri: str, path: str, position: types.Position) -> tuple[int, int] | None:
        """A client's position in `uri` (a file, or a cell of the notebook at
        `path`) as ours: (line 1-based, column in code points) of the file or
        the notebook's module; None for a cell outside the module (markdown)."""
        notebook = self.cells_of(path)
        cell = notebook.cell_of(uri) if notebook is not None else None
        if notebook is not None and cell is None:
            return None
        key = uri if cell is not None else path
        if cell is not None:
            self.lines.setdefault(uri, split_lines(cell.source))
        lines = self._lines(key)
        text = lines[position.line] if position.line < len(lines) else ""
        col = offset_of(text, types.Position(0, position.character), self.codec)
        if notebook is not None and cell is not None:
            return notebook.to_module(uri, position.line + 1, col)
        return position.line + 1, col

    def text(self, path: str) -> str:
        """An open document's buffer, else the file on disk (line ends as they
        are), read once per message."""
        if path not in self.texts:
            text = self.buffer_of(path)
            if text is None:
                try:
                    with open(path, encoding="utf-8", errors="replace", newline="") as f:
                        text = f.read()
                except OSError:
                    text = ""
            self.texts[path] = text
        return self.texts[path]

    def _lines(self, path: str) -> list[str]:
        if path not in self.lines:
            self.lines[path] = split_lines(self.text(path))
        return self.lines[path]


def to_uri(path: str) -> str:
    return from_fs_path(path) or path


def to_diagnostics(diagnostics: list[Diagnostic], positions: Positions) -> dict[str, list[types.Diagnostic]]:
    """Our diagnostics by the URI that shows them: a file's, or a notebook cell's."""
    by_uri: dict[str, list[types.Diagnostic]] = {}
    for d in diagnostics:
        if (place := positions.location(d.path, d.span)) is not None:
            by_uri.setdefault(place[0], []).append(to_diagnostic(d, positions, place[1]))
    return by_uri


def to_diagnostic(d: Diagnostic, positions: Positions, where: types.Range | None = None) -> types.Diagnostic:
    tier = "compiler" if d.origin == "compiler" else "estimate"
    related = [(r, place) for r in d.related if (place := positions.location(r.path, r.span)) is not None]
    return types.Diagnostic(
        range=where or positions.range(d.path, d.span),
        message=f"{d.message} [compiler]" if tier == "compiler" else d.message,
        severity=SEVERITY[d.severity],
        code=d.code,
        source="vmem-lsp",
        related_information=[
            types.DiagnosticRelatedInformation(types.Location(*place), r.message) for r, place in related
        ]
        or None,
        data={
            "target": d.target,
            "tier": tier,
            **{k: v for k, v in d.facts.items() if _plain(v)},
            **(example_data(d.subject.example) if d.subject is not None else {}),
        },
    )


def example_data(key: ExampleKey) -> dict:
    """The example a diagnostic or an action is about, in its `data`: what a
    code action request brings back to find the example's fixes."""
    return {"example": {"path": key.path, "line": key.line}}


def _plain(value) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))
