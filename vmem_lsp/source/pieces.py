"""libcst, a statement at a time: parsing cached by text, the nodes of ast
statements, their spans, and the few facts read off libcst nodes.

A full libcst parse of a 2,600-line kernel file, with positions, costs half a
second, so only the single statements a kernel site needs are parsed (the call
itself, the assignments of the names it uses, the helpers it calls), each on
its own and cached by text; PositionProvider on that small module gives the
exact spans, which `Piece` places back in the file.
"""

from __future__ import annotations

import ast
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import libcst as cst
from libcst.metadata import CodePosition, CodeRange, MetadataWrapper, PositionProvider

from .model import Expr, Span
from .statements import first_line, last_line
from .text import char_column

_CACHE_SIZE = 4096
_T = TypeVar("_T")


@dataclass(frozen=True, eq=False)
class _Parsed:
    """One statement's text parsed by libcst, with positions relative to that text."""

    lines: list[str]
    positions: Mapping[cst.CSTNode, CodeRange]
    statements: Mapping[tuple[int, int], cst.CSTNode]  # (line, column) -> statement starting there
    memo: dict = field(default_factory=dict)  # what was read off these nodes: see Piece.remember


_parsed_by_text: OrderedDict[str, _Parsed | None] = OrderedDict()


def clear_cache() -> None:
    """Forget every parsed statement (benchmarks measure a cold cache with it)."""
    _parsed_by_text.clear()


def _parse_cached(text: str) -> _Parsed | None:
    """LRU by text: after an edit only the statements whose text changed are parsed again."""
    if text in _parsed_by_text:
        _parsed_by_text.move_to_end(text)
        return _parsed_by_text[text]
    parsed = _parse(text)
    _parsed_by_text[text] = parsed
    if len(_parsed_by_text) > _CACHE_SIZE:
        _parsed_by_text.popitem(last=False)
    return parsed


def _parse(text: str) -> _Parsed | None:
    try:
        module = cst.parse_module(text)
    except (cst.ParserSyntaxError, RecursionError):
        return None
    positions = _positions(module)
    statements = {
        (r.start.line, r.start.column): node
        for node, r in positions.items()
        if isinstance(node, (cst.BaseSmallStatement, cst.BaseCompoundStatement))
    }
    return _Parsed(text.split("\n"), positions, statements)


def _positions(module: cst.Module) -> Mapping[cst.CSTNode, CodeRange]:
    """PositionProvider's spans of every node. `MetadataWrapper.resolve` runs
    the provider (one code generation over the tree) and then a visit with no
    visitor at all (its batchable providers: none here), and a libcst visit
    rebuilds every node: that visit was half of the cost. The provider is run
    alone where libcst has the method (it is pinned), else through resolve."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    generate = getattr(PositionProvider(), "_gen", None)
    return generate(wrapper) if generate is not None else wrapper.resolve(PositionProvider)


@dataclass(frozen=True, eq=False)
class Piece:
    """A parsed statement placed in the file: absolute line = relative line + line_offset."""

    parsed: _Parsed
    line_offset: int

    def remember(self, what: str, node: cst.CSTNode, read: Callable[[], _T]) -> _T:
        """What `read` reads off `node` (a node of this piece), kept with the parse: libcst rebuilds
        every node it visits, even for a read-only visit, so reading once per text pays."""
        key = (what, id(node))  # the parse keeps its nodes alive: the id stays theirs
        if key not in self.parsed.memo:
            self.parsed.memo[key] = read()
        return self.parsed.memo[key]

    def span(self, node: cst.CSTNode) -> Span:
        start, end = self._range(node)
        return Span(start.line + self.line_offset, start.column, end.line + self.line_offset, end.column)

    def expr(self, node: cst.CSTNode) -> Expr:
        """The node with its text exactly as written (libcst's code_for_node drops block indentation)."""
        start, end = self._range(node)
        lines = self.parsed.lines[start.line - 1 : end.line]
        lines[-1] = lines[-1][: end.column]
        lines[0] = lines[0][start.column :]
        return Expr(self.span(node), "\n".join(lines))

    def _range(self, node: cst.CSTNode) -> tuple[CodePosition, CodePosition]:
        """From PositionProvider, widened to the node's own parentheses: `(bq, 128)` keeps them."""
        positions = self.parsed.positions
        first, last = getattr(node, "lpar", None), getattr(node, "rpar", None)
        start = positions[first[0] if first else node].start
        end = positions[last[-1] if last else node].end
        return start, end


class Source:
    """The module's lines, and the libcst node of any of its ast statements, parsed on demand."""

    def __init__(self, lines: list[str]):
        self.lines = lines
        self._found: dict[int, tuple[Piece, cst.CSTNode] | None] = {}
        self._pieces: dict[tuple[int, int], Piece | None] = {}

    def statement(self, statement: ast.stmt, ancestors: tuple[ast.stmt, ...]) -> tuple[Piece, cst.CSTNode] | None:
        """The libcst node of an ast statement: parse its lines alone, else its enclosing statements'."""
        key = id(statement)
        if key not in self._found:
            self._found[key] = self._find(statement, ancestors)
        return self._found[key]

    def _find(self, statement: ast.stmt, ancestors: tuple[ast.stmt, ...]) -> tuple[Piece, cst.CSTNode] | None:
        line = statement.lineno
        column = char_column(self.lines[line - 1], statement.col_offset)  # ast's bytes, libcst's code points
        for anchor in (statement, *reversed(ancestors)):
            piece = self._piece(first_line(anchor), last_line(anchor))
            node = piece.parsed.statements.get((line - piece.line_offset, column)) if piece else None
            if piece is not None and node is not None:
                return piece, node
        return None

    def _piece(self, first: int, last: int) -> Piece | None:
        """Whole lines; an indented statement is parsed under `if 1:` so that its columns stay as in the file."""
        if (first, last) not in self._pieces:
            body = "\n".join(self.lines[first - 1 : last]) + "\n"
            indented = body[:1] in (" ", "\t")
            parsed = _parse_cached("if 1:\n" + body if indented else body)
            self._pieces[first, last] = Piece(parsed, first - 2 if indented else first - 1) if parsed else None
        return self._pieces[first, last]


# --- what libcst nodes say ---------------------------------------------------------------------


def int_literal(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = integer(node.expression)
        return None if inner is None else -inner
    return integer(node)


def integer(node: cst.BaseExpression) -> int | None:
    return node.evaluated_value if isinstance(node, cst.Integer) else None


def dotted(node: cst.CSTNode) -> tuple[str, ...]:
    """`a.b.c` -> ("a", "b", "c"); () for anything that is not a dotted name."""
    if isinstance(node, cst.Name):
        return (node.value,)
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return base + (node.attr.value,) if base else ()
    return ()


def name_token(node: cst.CSTNode) -> cst.CSTNode:
    return node.attr if isinstance(node, cst.Attribute) else node


def is_none(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"
