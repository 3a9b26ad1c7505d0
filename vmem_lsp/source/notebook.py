"""Jupyter notebooks as Python modules, and back.

The code cells of a notebook, in order, make one module: that is what is
located, checked and run in the worker, so every position inside vmem-lsp is
a (line, column) of that module text. IPython magics and shell lines are
masked the way ruff masks them (the line keeps its place, its text becomes
`pass` or `None`), so they neither break parsing nor shift a line.

Positions go back to the notebook at the edges: `cell_position` for what a
person reads ("cell 3, line 5"), `file_position` for tools that point into
the .ipynb file itself (SARIF regions, GitHub annotations), and `apply_edits`
for --fix: it rewrites only the `source` values of the cells it edits, so the
outputs, metadata, ids, indentation, key order and trailing newline of the
file stay byte for byte.

A notebook open in an editor (LSP notebook sync) makes its module the same
way from the cells' texts as the editor holds them: `open_notebook`, whose
`OpenNotebook` maps module spans to (cell URI, span in the cell) and back.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Generic, Protocol, TypeVar

from .model import Span, TextEdit
from .text import apply_edits, line_and_column

SUFFIX = ".ipynb"


def is_notebook(path: str | None) -> bool:
    return path is not None and path.endswith(SUFFIX)


class NotebookError(ValueError):
    """A notebook vmem-lsp cannot read: the message says why, for the user."""


# ---- where each value sits in the file --------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """A JSON value and the string indices [start, end) of its text in the file."""

    start: int
    end: int
    items: dict[str, Node] | list[Node] | None = None  # an object's, an array's; None for a scalar

    def member(self, key: str) -> Node:
        """The value of an object's key (the caller read the JSON: it is an object that has it)."""
        if not isinstance(self.items, dict) or key not in self.items:
            raise NotebookError(f"not a notebook: no {key!r} at character {self.start}")
        return self.items[key]

    def elements(self) -> list[Node]:
        """An array's values."""
        if not isinstance(self.items, list):
            raise NotebookError(f"not a notebook: no list at character {self.start}")
        return self.items


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null")


def _value(raw: str, at: int) -> Node:
    """The JSON value starting at `at` (whitespace skipped), with its span.
    The text is valid JSON already (json.loads read it): this only finds where."""
    at = _skip(raw, at)
    if raw[at] == "{":
        members: dict[str, Node] = {}
        start, at = at, _skip(raw, at + 1)
        while raw[at] != "}":
            key = _matched(_STRING, raw, at)
            value = _value(raw, _skip(raw, key.end()) + 1)  # past the ':'
            members[json.loads(key.group())] = value
            at = _skip(raw, value.end)
            at = _skip(raw, at + 1) if raw[at] == "," else at
        return Node(start, at + 1, members)
    if raw[at] == "[":
        elements: list[Node] = []
        start, at = at, _skip(raw, at + 1)
        while raw[at] != "]":
            elements.append(_value(raw, at))
            at = _skip(raw, elements[-1].end)
            at = _skip(raw, at + 1) if raw[at] == "," else at
        return Node(start, at + 1, elements)
    return Node(at, _matched(_STRING if raw[at] == '"' else _SCALAR, raw, at).end())


def _skip(raw: str, at: int) -> int:
    """Past the whitespace at `at`."""
    return _matched(_WHITESPACE, raw, at).end()


def _matched(pattern: re.Pattern[str], raw: str, at: int) -> re.Match[str]:
    """The token at `at`, which valid JSON has there."""
    found = pattern.match(raw, at)
    if found is None:
        raise NotebookError(f"not a notebook: unexpected text at character {at}")
    return found


# ---- magics -----------------------------------------------------------------------------------

_LINE_MAGIC = re.compile(r"^(\s*)(?:[%!?]|[\w.\[\]]+\s*=\s*[%!])")
_HELP = re.compile(r"^(\s*)[\w.]+\?\??\s*$")
_ASSIGNED = re.compile(r"^(\s*[\w.\[\]]+\s*=\s*)[%!]")


def mask_magics(cell: str) -> str:
    """The cell with IPython's own syntax made plain Python, line for line:
    a `%%` cell magic comments out the cell; `%magic`, `!shell` and `obj?`
    become `pass`, `x = !ls` becomes `x = None`. A cell that parses as
    Python already is left alone (a docstring line may start with `!`)."""
    try:
        compile(cell, "<cell>", "exec", dont_inherit=True, flags=0x400)  # PyCF_ONLY_AST
        return cell
    except (SyntaxError, ValueError):
        pass
    lines = cell.split("\n")
    if cell.lstrip().startswith("%%"):
        return "\n".join("#" + line if line else line for line in lines)
    masked: list[str] = []
    continued = False
    for line in lines:
        indent = line[: len(line) - len(line.lstrip())]
        if continued or _LINE_MAGIC.match(line) or _HELP.match(line):
            assigned = _ASSIGNED.match(line)
            masked.append(assigned.group(1) + "None" if assigned and not continued else indent + "pass")
            continued = line.endswith("\\")
        else:
            masked.append(line)
    return "\n".join(masked)


# ---- the notebook -----------------------------------------------------------------------------


def module_lines(source: str) -> tuple[list[str], frozenset[int]]:
    """A cell's lines in the module (magics masked, a final line end dropped)
    and which of them (1-based) were masked: the one rule for the disk and
    the editor, so that both make the same module of the same cells."""
    lines = mask_magics(source).split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines, frozenset(n for n, (a, b) in enumerate(zip(lines, source.split("\n")), 1) if a != b)


class _Cell(Protocol):
    @property
    def source(self) -> str: ...
    @property
    def first_line(self) -> int: ...
    @property
    def lines(self) -> int: ...
    @property
    def masked(self) -> frozenset[int]: ...


CellT = TypeVar("CellT", bound=_Cell)


class CellModule(Generic[CellT]):
    """Code cells placed in one module, in order: each has `source`,
    `first_line` (1-based), `lines` and `masked` (lines of the cell, 1-based).
    What a notebook read from disk and one open in an editor share."""

    cells: tuple[CellT, ...]

    def cell_at(self, line: int) -> CellT | None:
        at = bisect_right(self._first_lines, line) - 1
        cell = self.cells[at] if at >= 0 else None
        return cell if cell is not None and line < cell.first_line + cell.lines else None

    @cached_property
    def _first_lines(self) -> list[int]:
        return [cell.first_line for cell in self.cells]

    def refusal(self, span: Span) -> str | None:
        """Why an edit of a module span cannot be made in a cell's source (None
        when it can): it must stay inside one cell, off the masked magics."""
        cell = self.cell_at(span.start_line)
        if cell is None or cell is not self.cell_at(span.end_line):
            return f"an edit at line {span.start_line} is not inside one code cell"
        if any(line - cell.first_line + 1 in cell.masked for line in range(span.start_line, span.end_line + 1)):
            return f"an edit at line {span.start_line} falls on an IPython magic"
        return None

    def edits_by_cell(self, edits: Iterable[TextEdit]) -> list[tuple[CellT, list[TextEdit]]]:
        """Module edits grouped by the cell they fall in, in module order."""
        by_cell: dict[int, list[TextEdit]] = {}
        for edit in edits:
            cell = self.cell_at(edit.span.start_line)
            if (why := self.refusal(edit.span)) is not None or cell is None:
                raise NotebookError(why or f"an edit at line {edit.span.start_line} is not inside one code cell")
            by_cell.setdefault(cell.first_line, []).append(edit)
        return [(cell, by_cell[cell.first_line]) for cell in self.cells if cell.first_line in by_cell]

    def in_cell(self, span: Span, strict: bool = False) -> tuple[CellT, Span] | None:
        """The cell a module span starts in, and the span within it. An end
        past that cell is brought back to the cell's end (a diagnostic still
        shows); `strict` (an edit) refuses it, and any span on a masked magic."""
        cell = self.cell_at(span.start_line) or (self.cells[-1] if self.cells and span.start_line > 0 else None)
        if cell is None or (strict and self.refusal(span) is not None):
            return None
        last = cell.source.split("\n")[cell.lines - 1]
        start = min(span.start_line - cell.first_line + 1, cell.lines), span.start_col
        end = (
            (span.end_line - cell.first_line + 1, span.end_col)
            if span.end_line < cell.first_line + cell.lines
            else (cell.lines, len(last))
        )
        return cell, Span(*start, *max(start, end))


@dataclass(frozen=True)
class CodeCell:
    index: int  # among all the notebook's cells, 0-based (markdown counts)
    source: str  # as written, joined
    first_line: int  # 1-based line of the module where the cell starts
    lines: int  # how many module lines it takes
    node: Node  # the "source" value in the file: a string or a list of strings
    masked: frozenset[int] = frozenset()  # lines of the cell (1-based) whose IPython syntax was masked


@dataclass(frozen=True)
class CellPosition:
    cell: int  # among all cells, 0-based
    line: int  # 1-based, within the cell
    col: int  # 0-based code points


@dataclass(frozen=True)
class Notebook(CellModule[CodeCell]):
    path: str
    raw: str  # the file's text
    cells: tuple[CodeCell, ...]
    module: str  # the code cells as one module, magics masked

    def cell_position(self, line: int, col: int) -> CellPosition | None:
        """Where a module position is, as a person finds it: the cell and the line in it."""
        cell = self.cell_at(line)
        return CellPosition(cell.index, line - cell.first_line + 1, col) if cell else None

    def file_position(self, line: int, col: int) -> tuple[int, int]:
        """The (line, col) in the .ipynb file's own text of a module position:
        inside the JSON string that holds that character."""
        cell = self.cell_at(line)
        if cell is None:
            return 1, 0
        within = line - cell.first_line
        if isinstance(cell.node.items, list):
            if not cell.node.items:
                return line_and_column(self.raw, cell.node.start)
            token = cell.node.items[min(within, len(cell.node.items) - 1)]
            offset = _raw_offset(self.raw, token, col)
        else:
            before = sum(len(text) + 1 for text in cell.source.split("\n")[:within])
            offset = _raw_offset(self.raw, cell.node, before + col)
        return line_and_column(self.raw, offset)

    def edited_cells(self, edits: Iterable[TextEdit]) -> list[tuple[str, str, str]]:
        """(":cell N", source before, source after) of each cell the edits change: what --diff shows."""
        return [
            (f":cell {cell.index + 1}", cell.source, _edited(cell, local)) for cell, local in self.edits_by_cell(edits)
        ]

    def apply_edits(self, edits: Iterable[TextEdit]) -> str:
        """The file's text with module edits made in their cells' sources; every
        other byte as it was."""
        raw, ascii_only = self.raw, self.raw.isascii()
        for cell, local in reversed(self.edits_by_cell(edits)):
            source = _edited(cell, local)
            raw = raw[: cell.node.start] + _source_json(self.raw, cell.node, source, ascii_only) + raw[cell.node.end :]
        return raw


def _edited(cell: CodeCell, edits) -> str:
    shift = cell.first_line - 1
    local = [
        TextEdit(
            e.path,
            Span(e.span.start_line - shift, e.span.start_col, e.span.end_line - shift, e.span.end_col),
            e.new_text,
        )
        for e in edits
    ]
    return apply_edits(cell.source, local)


def _raw_offset(raw: str, token: Node, chars: int) -> int:
    """The index in `raw` of the `chars`-th character that the JSON string `token` decodes to."""
    at, end, seen = token.start + 1, token.end - 1, 0
    while at < end and seen < chars:
        if raw[at] != "\\":
            at += 1
        elif raw[at + 1] == "u":
            high = int(raw[at + 2 : at + 6], 16)
            at += 12 if 0xD800 <= high < 0xDC00 and raw.startswith("\\u", at + 6) else 6
        else:
            at += 2
        seen += 1
    return at


def _source_json(raw: str, node: Node, source: str, ascii_only: bool) -> str:
    """A cell's new source written as the file wrote the old: one string, or a
    list of lines with the same separators; unchanged lines keep their text."""
    if not isinstance(node.items, list):
        return json.dumps(source, ensure_ascii=ascii_only)
    old = {json.loads(raw[t.start : t.end]): raw[t.start : t.end] for t in node.items}
    lines = re.findall(r"[^\n]*\n|[^\n]+$", source)
    tokens = [old.get(line) or json.dumps(line, ensure_ascii=ascii_only) for line in lines]
    if not node.items:
        return json.dumps(lines, ensure_ascii=ascii_only)
    first, last = node.items[0], node.items[-1]
    opening, closing = raw[node.start : first.start], raw[last.end : node.end]
    separator = raw[first.end : node.items[1].start] if len(node.items) > 1 else "," + opening[1:]
    return opening + separator.join(tokens) + closing if tokens else "[]"


_last_read: dict[str, Notebook] = {}


def cell_line(path: str, line: int) -> str | None:
    """ "cell N:L" for a line of a notebook's module, as the latest reading of that
    notebook in this process has it: messages that name a place ("pallas_call f
    at nb.ipynb:cell 3:4") are written where no notebook is passed around."""
    notebook = _last_read.get(path)
    place = notebook.cell_position(line, 0) if notebook else None
    return f"cell {place.cell + 1}:{place.line}" if place else None


def read_notebook(raw: str, path: str) -> Notebook:
    """The notebook in `raw`, or NotebookError saying why it cannot be read."""
    try:
        document = json.loads(raw)
    except ValueError as error:
        raise NotebookError(f"not a notebook: the file is not valid JSON ({error})") from None
    if not isinstance(document, dict):
        raise NotebookError("not a notebook: the JSON is not an object")
    if document.get("nbformat", 4) < 4 or "worksheets" in document:
        raise NotebookError(
            f"nbformat {document.get('nbformat')} notebooks are not supported; convert it "
            f"with `jupyter nbconvert --to notebook --nbformat 4`"
        )
    if not isinstance(document.get("cells"), list):
        raise NotebookError("not a notebook: it has no list of cells")
    nodes = _value(raw, 0).member("cells").elements()
    cells: list[CodeCell] = []
    module: list[str] = []
    for index, (cell, node) in enumerate(zip(document["cells"], nodes)):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code" or "source" not in cell:
            continue
        source = cell["source"]
        source = "".join(source) if isinstance(source, list) else str(source)
        lines, masked = module_lines(source)
        cells.append(CodeCell(index, source, len(module) + 1, len(lines), node.member("source"), masked))
        module.extend(lines)
    _last_read[path] = Notebook(path, raw, tuple(cells), "\n".join(module) + "\n")
    return _last_read[path]


# ---- a notebook open in an editor -------------------------------------------------------------


@dataclass(frozen=True)
class OpenCell:
    """A code cell as an editor holds it (LSP notebook sync): its text document's URI and text."""

    uri: str
    source: str
    first_line: int  # 1-based line of the module where the cell starts
    lines: int  # how many module lines it takes
    masked: frozenset[int]  # lines of the cell (1-based) whose IPython syntax was masked
    text: str  # its lines in the module, joined


@dataclass(frozen=True)
class OpenNotebook(CellModule[OpenCell]):
    """The module an open notebook's code cells make, and the way between its
    positions (lines 1-based, columns in code points) and the cells'."""

    cells: tuple[OpenCell, ...]
    module: str

    def cell_of(self, uri: str) -> OpenCell | None:
        return next((cell for cell in self.cells if cell.uri == uri), None)

    def to_module(self, uri: str, line: int, col: int) -> tuple[int, int] | None:
        """The module position of (line 1-based, col) in the cell `uri`; a line
        past the cell's end is its last line. None for a cell not in the module."""
        cell = self.cell_of(uri)
        if cell is None:
            return None
        return cell.first_line + min(max(line, 1), cell.lines) - 1, col


def open_notebook(cells: Sequence[tuple[str, str]], previous: OpenNotebook | None = None) -> OpenNotebook:
    """The module of an editor's code cells, (uri, text) in order. A cell whose
    text is as in `previous` is not masked again: typing in one cell of a
    200-cell notebook costs one cell's masking and one join."""
    known = {cell.uri: cell for cell in previous.cells} if previous is not None else {}
    placed: list[OpenCell] = []
    line = 1
    for uri, source in cells:
        cell = known.get(uri)
        if cell is None or cell.source != source:
            lines, masked = module_lines(source)
            cell = OpenCell(uri, source, line, len(lines), masked, "\n".join(lines))
        elif cell.first_line != line:
            cell = replace(cell, first_line=line)
        placed.append(cell)
        line += cell.lines
    return OpenNotebook(tuple(placed), "".join(cell.text + "\n" for cell in placed))
