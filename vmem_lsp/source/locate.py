"""Find every pallas_call of a Python source, and what decides its VMEM use, without running it.

Speed is the design constraint: a language server relocates on every edit, and a
full libcst parse of a 2,600-line kernel file, with positions, costs half a
second. So the work is split by what each tool does cheaply:

* `ast` (fast, C) splits the module into top-level statements, survives syntax
  errors statement by statement, tells which statements mention pallas_call,
  and gives the statement skeleton (blocks, branches, loops) that the flow
  walk below follows;
* libcst parses only the single statements a kernel site actually needs (the
  call itself, the assignments of the names it uses, the helpers it calls),
  each on its own, cached by text, and gives the nodes, their exact spans
  (PositionProvider on that small module) and the text as written.

Names are followed by a flow walk over the enclosing function (then module):
every assignment, `+=`, `.append` / `.extend` and `x[k] = ...` makes a lazy
binding, branches join, loops blur indices; a binding is parsed and evaluated
only when a site asks for it.
"""
from __future__ import annotations

import ast
import bisect
import gc
import re
import traceback
import weakref
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Sequence

import libcst as cst
from libcst.metadata import CodePosition, CodeRange, MetadataWrapper, PositionProvider

from vmem_lsp.source.model import BlockSpecSite, Expr, KernelSite, ScratchSite, Span
from vmem_lsp.source.syntax import parse_quietly
from vmem_lsp.source.text import char_column


@dataclass(frozen=True)
class LocateResult:
    """The kernel sites of one source; its syntax error if it has one (the user's
    to fix); and the traceback of the locator's own failure, which is never the
    user's: the edges log it and count it (server) or exit 2 (CLI)."""
    sites: tuple[KernelSite, ...]
    error: str | None = None
    internal_error: str | None = None


def locate(source: str, path: str) -> LocateResult:
    """Every pallas_call site of `source`, in source order. Never raises: an editor
    buffer can hold anything, and a bug of ours comes back as `internal_error`."""
    try:
        with _collector_paused():
            return _locate(source, path)
    except Exception:  # noqa: BLE001 - the last line of defence of a language server
        return LocateResult((), internal_error=traceback.format_exc())


def clear_cache() -> None:
    """Forget every parsed statement (benchmarks measure a cold cache with it)."""
    _parsed_by_text.clear()


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Parsing allocates tens of thousands of tracked objects, and the collections they trigger
    walk the whole heap (100 ms becomes 100-250 ms). Nothing a call allocates is cyclic (see
    `_Binding`), so reference counting frees it all without the collector."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _locate(source: str, path: str) -> LocateResult:
    text = source.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    statements, error = _top_level_statements(text, lines)
    file = _File(path, lines, statements)
    if not file.plan.flagged:
        return LocateResult((), error)
    _walk_module(file, statements)
    sites = [site for record in file.site_statements for site in _kernel_sites(file, record)]
    sites.sort(key=lambda site: (site.span.start_line, site.span.start_col))
    return LocateResult(tuple(sites), error)


# --- splitting the module with ast -------------------------------------------------------------

_CLAUSE = re.compile(r"(else|elif|except|finally)\b")
_DEFINITION = re.compile(r"(async\s+def|def|class)\b")


def _top_level_statements(text: str, lines: list[str]) -> tuple[list[ast.stmt], str | None]:
    """The module's top-level statements; around syntax errors, those that still parse on their own."""
    try:
        return parse_quietly(text).body, None
    except (SyntaxError, ValueError) as exc:
        return _statements_around_errors(lines), _describe_syntax_error(exc, text)
    except (RecursionError, MemoryError):
        return [], "syntax error: the file is nested too deeply to parse"


def _describe_syntax_error(exc: Exception, text: str) -> str:
    message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    return f"syntax error at line {_error_line(exc, text)}: {message}"


def _error_line(exc: Exception, text: str) -> int:
    """The 1-based line of a parse error; ValueError (a null byte) carries none, so find the byte."""
    if isinstance(exc, SyntaxError) and exc.lineno:
        return exc.lineno
    null = text.find("\0")
    return text.count("\n", 0, null) + 1 if null >= 0 else 1


def _statements_around_errors(lines: list[str]) -> list[ast.stmt]:
    """Parse the line ranges around each failing top-level chunk; each failure drops one chunk."""
    starts = _chunk_starts(lines)
    statements: list[ast.stmt] = []
    ranges = [(0, len(lines))]
    while ranges:
        first, end = ranges.pop()
        text = "\n".join(lines[first:end])
        try:
            tree = parse_quietly(text)
        except (SyntaxError, ValueError) as exc:
            bad = min(max(first + _error_line(exc, text) - 1, first), end - 1)
            chunk_first, chunk_end = _chunk_around(starts, bad, first, end)
            ranges += [(a, b) for a, b in ((first, chunk_first), (chunk_end, end)) if a < b]
            continue
        except (RecursionError, MemoryError):
            continue
        ast.increment_lineno(tree, first)
        statements += tree.body
    return sorted(statements, key=lambda statement: statement.lineno)


def _chunk_starts(lines: list[str]) -> list[int]:
    """0-based lines that look like the start of a top-level statement (decorators stay with their def)."""
    starts = []
    awaiting_definition = False
    for number, line in enumerate(lines):
        if not line or line[0] in " \t#)]}" or _CLAUSE.match(line):
            continue
        if awaiting_definition and (line.startswith("@") or _DEFINITION.match(line)):
            awaiting_definition = line.startswith("@")
            continue
        starts.append(number)
        awaiting_definition = line.startswith("@")
    return starts


def _chunk_around(starts: list[int], line: int, first: int, end: int) -> tuple[int, int]:
    before = bisect.bisect_right(starts, line) - 1
    chunk_first = max(starts[before], first) if before >= 0 else first
    after = bisect.bisect_right(starts, line)
    chunk_end = min(starts[after], end) if after < len(starts) else end
    return chunk_first, chunk_end


def _first_line(statement: ast.stmt) -> int:
    decorators = getattr(statement, "decorator_list", None)
    return min([statement.lineno] + [d.lineno for d in decorators or ()])


# --- which statements hold kernel sites (ast prepass) ----------------------------------------------

_BODY_FIELDS = ("body", "orelse", "handlers", "finalbody", "cases")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class _Names:
    """How this module spells what the locator looks for."""
    imported: Mapping[str, str]        # local name -> imported name, from `from m import a as b`
    pallas: frozenset[str]             # names meaning pallas_call
    partials: frozenset[str]           # names bound to functools.partial(pallas_call, ...)


@dataclass(frozen=True)
class _Plan:
    """What the walk must look at: statements holding a site, and the defs around them."""
    names: _Names
    flagged: frozenset[int]            # ids of innermost statements referring to pallas_call
    enclosing: frozenset[int]          # ids of defs / classes containing a flagged statement
    called_partials: frozenset[str]    # partial aliases that are called somewhere: the calls are the sites


def _plan(statements: list[ast.stmt], lines: list[str]) -> _Plan:
    texts = ["\n".join(lines[_first_line(s) - 1:s.end_lineno]) for s in statements]
    names = _kernel_names(statements, texts)
    refs = names.pallas | names.partials
    pattern = _words(refs)
    flagged: set[int] = set()
    enclosing: set[int] = set()
    called: set[str] = set()
    for statement, text in zip(statements, texts):
        if pattern.search(text):
            _flag(statement, (), refs, names.partials, flagged, enclosing, called)
    return _Plan(names, frozenset(flagged), frozenset(enclosing), frozenset(called))


def _words(names: Iterable[str]) -> re.Pattern[str]:
    return re.compile(r"\b(?:%s)\b" % "|".join(map(re.escape, sorted(names))))


def _kernel_names(statements: list[ast.stmt], texts: list[str]) -> _Names:
    """Imports and aliases of pallas_call (`pc = pl.pallas_call`, `call = partial(pl.pallas_call, ...)`)."""
    imported = {a.asname or a.name: a.name for s in statements if isinstance(s, ast.ImportFrom) for a in s.names}
    pallas = {"pallas_call"} | {local for local, name in imported.items() if name == "pallas_call"}
    partials: set[str] = set()
    while True:
        known = len(pallas) + len(partials)
        pattern = _words(pallas | partials)
        for statement, text in zip(statements, texts):
            if pattern.search(text):
                for nested in _statements_within(statement):
                    _learn_names(nested, imported, pallas, partials)
        if len(pallas) + len(partials) == known:
            return _Names(imported, frozenset(pallas), frozenset(partials))


def _learn_names(statement: ast.stmt, imported: dict[str, str], pallas: set[str], partials: set[str]) -> None:
    if isinstance(statement, ast.ImportFrom):
        for alias in statement.names:
            imported[alias.asname or alias.name] = alias.name
            if alias.name == "pallas_call":
                pallas.add(alias.asname or alias.name)
    value = getattr(statement, "value", None) if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
    if value is None:
        return
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    bound = {_ast_last_name(t, {}) for t in targets} - {None}
    if _ast_last_name(value, imported) in pallas:
        pallas.update(bound)
    elif _ast_is_partial_of_pallas(value, imported, pallas):
        partials.update(bound)


def _ast_last_name(node: ast.AST, imported: Mapping[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return imported.get(node.id, node.id)
    return node.attr if isinstance(node, ast.Attribute) else None


def _ast_is_partial_of_pallas(node: ast.AST, imported: Mapping[str, str], pallas: set[str]) -> bool:
    return (isinstance(node, ast.Call) and _ast_last_name(node.func, imported) == "partial"
            and bool(node.args) and _ast_last_name(node.args[0], imported) in pallas)


def _statements_within(statement: ast.stmt) -> Iterator[ast.stmt]:
    yield statement
    for child in _child_statements(statement):
        yield from _statements_within(child)


def _child_statements(statement: ast.stmt) -> Iterator[ast.stmt]:
    for name in _BODY_FIELDS:
        for item in getattr(statement, name, None) or ():
            if isinstance(item, ast.stmt):
                yield item
            else:  # except handlers and match cases hold statements
                yield from item.body


def _own_parts(statement: ast.stmt) -> Iterator[ast.AST]:
    """The expressions of a statement outside its nested blocks (a def's decorators, an if's test...)."""
    for name, value in ast.iter_fields(statement):
        if name in _BODY_FIELDS:
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, ast.AST):
                yield from ast.walk(item)


def _flag(statement: ast.stmt, chain: tuple[ast.stmt, ...], refs: frozenset[str], partials: frozenset[str],
          flagged: set[int], enclosing: set[int], called: set[str]) -> None:
    refers = False
    for node in _own_parts(statement):
        if isinstance(node, ast.Name) and node.id in refs or isinstance(node, ast.Attribute) and node.attr in refs:
            refers = True
        elif isinstance(node, ast.Call) and _ast_last_name(node.func, {}) in partials:
            called.add(_ast_last_name(node.func, {}))
    if refers:
        flagged.add(id(statement))
        enclosing.update(id(scope) for scope in chain)
    inner = chain + (statement,) if isinstance(statement, _SCOPES) else chain
    for child in _child_statements(statement):
        _flag(child, inner, refs, partials, flagged, enclosing, called)


# --- statements parsed with libcst ---------------------------------------------------------------

_CACHE_SIZE = 4096


@dataclass(frozen=True, eq=False)
class _Parsed:
    """One statement's text parsed by libcst, with positions relative to that text."""
    lines: list[str]
    positions: Mapping[cst.CSTNode, CodeRange]
    statements: Mapping[tuple[int, int], cst.CSTNode]    # (line, column) -> statement starting there


_parsed_by_text: OrderedDict[str, _Parsed | None] = OrderedDict()


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
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    statements = {(r.start.line, r.start.column): node for node, r in positions.items()
                  if isinstance(node, (cst.BaseSmallStatement, cst.BaseCompoundStatement))}
    return _Parsed(text.split("\n"), positions, statements)


@dataclass(frozen=True, eq=False)
class _Piece:
    """A parsed statement placed in the file: absolute line = relative line + line_offset."""
    parsed: _Parsed
    line_offset: int

    def span(self, node: cst.CSTNode) -> Span:
        start, end = self._range(node)
        return Span(start.line + self.line_offset, start.column, end.line + self.line_offset, end.column)

    def expr(self, node: cst.CSTNode) -> Expr:
        """The node with its text exactly as written (libcst's code_for_node drops block indentation)."""
        start, end = self._range(node)
        lines = self.parsed.lines[start.line - 1:end.line]
        lines[-1] = lines[-1][:end.column]
        lines[0] = lines[0][start.column:]
        return Expr(self.span(node), "\n".join(lines))

    def _range(self, node: cst.CSTNode) -> tuple[CodePosition, CodePosition]:
        """From PositionProvider, widened to the node's own parentheses: `(bq, 128)` keeps them."""
        positions = self.parsed.positions
        first, last = getattr(node, "lpar", None), getattr(node, "rpar", None)
        start = positions[first[0] if first else node].start
        end = positions[last[-1] if last else node].end
        return start, end


class _File:
    """The module being located: its lines, its plan, and its statements parsed on demand."""

    def __init__(self, path: str, lines: list[str], statements: list[ast.stmt]):
        self.path = path
        self.lines = lines
        self.plan = _plan(statements, lines)
        self.names = self.plan.names
        self.site_statements: list[_SiteStatement] = []
        self.helper_values: dict[int, _Value | None] = {}
        self.scopes: list[_Scope] = []     # keeps alive the scopes that defs refer to weakly
        self._found: dict[int, tuple[_Piece, cst.CSTNode] | None] = {}
        self._pieces: dict[tuple[int, int], _Piece | None] = {}

    def statement(self, statement: ast.stmt, ancestors: tuple[ast.stmt, ...]) -> tuple[_Piece, cst.CSTNode] | None:
        """The libcst node of an ast statement: parse its lines alone, else its enclosing statements'."""
        key = id(statement)
        if key not in self._found:
            self._found[key] = self._find(statement, ancestors)
        return self._found[key]

    def _find(self, statement: ast.stmt, ancestors: tuple[ast.stmt, ...]) -> tuple[_Piece, cst.CSTNode] | None:
        line = statement.lineno
        column = char_column(self.lines[line - 1], statement.col_offset)     # ast's bytes, libcst's code points
        for anchor in (statement, *reversed(ancestors)):
            piece = self._piece(_first_line(anchor), anchor.end_lineno)
            node = piece and piece.parsed.statements.get((line - piece.line_offset, column))
            if node is not None:
                return piece, node
        return None

    def _piece(self, first: int, last: int) -> _Piece | None:
        """Whole lines; an indented statement is parsed under `if 1:` so that its columns stay as in the file."""
        if (first, last) not in self._pieces:
            body = "\n".join(self.lines[first - 1:last]) + "\n"
            indented = body[:1] in (" ", "\t")
            parsed = _parse_cached("if 1:\n" + body if indented else body)
            self._pieces[first, last] = parsed and _Piece(parsed, first - 2 if indented else first - 1)
        return self._pieces[first, last]


# --- what names may hold ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class _Leaf:
    """An expression where following stops, with where it is and what its names mean there."""
    node: cst.BaseExpression
    piece: _Piece
    scope: _Scope

    @property
    def key(self) -> tuple[int, int]:
        return id(self.node), self.piece.line_offset    # a cached piece can sit at several places

    def at(self, node: cst.BaseExpression) -> _Leaf:
        return _Leaf(node, self.piece, self.scope)


@dataclass(frozen=True)
class _Entry:
    leaf: _Leaf
    index: int | None


@dataclass(frozen=True)
class _Value:
    """What an expression may be: one item (alternatives), a sequence of items, and what was not followed."""
    leaves: tuple[_Leaf, ...] = ()
    entries: tuple[_Entry, ...] | None = None    # None: not known as a sequence
    length: int | None = None
    unknown: tuple[str, ...] = ()


def _unique(items: Iterable, key=lambda item: item) -> tuple:
    seen: dict = {}
    for item in items:
        seen.setdefault(key(item), item)
    return tuple(seen.values())


def _unique_entries(entries: Iterable[_Entry]) -> tuple[_Entry, ...]:
    return _unique(entries, key=lambda e: (e.leaf.key, e.index))


def _join(values: Sequence[_Value]) -> _Value:
    """Either of the values (branches of an if, of a conditional expression)."""
    sequences = [v for v in values if v.entries is not None]
    lengths = {v.length for v in sequences}
    return _Value(
        leaves=_unique((leaf for v in values for leaf in v.leaves), key=lambda leaf: leaf.key),
        entries=_unique_entries(e for v in sequences for e in v.entries) if sequences else None,
        length=lengths.pop() if len(lengths) == 1 and len(sequences) == len(values) else None,
        unknown=_unique(u for v in values for u in v.unknown))


def _as_sequence(value: _Value) -> _Value:
    """The value used as in_specs: a lone BlockSpec is the only item; a lone unknown call may be many."""
    if value.entries is not None:
        extra = tuple(_Entry(leaf, None) for leaf in value.leaves)
        return _Value(entries=_unique_entries(value.entries + extra),
                      length=None if extra else value.length, unknown=value.unknown)
    single = bool(value.leaves) and all(_is_single_item(leaf.node) for leaf in value.leaves)
    return _Value(entries=tuple(_Entry(leaf, 0 if single else None) for leaf in value.leaves),
                  length=1 if single else None, unknown=value.unknown)


def _is_single_item(node: cst.BaseExpression) -> bool:
    """None, or a constructor (a capitalised name: BlockSpec, VMEM, SemaphoreType.DMA), not a list-maker."""
    if _is_none(node):
        return True
    dotted = _dotted(node.func if isinstance(node, cst.Call) else node)
    return any(part[:1].isupper() for part in dotted)


def _as_item(value: _Value, index: int | None) -> tuple[_Entry, ...]:
    """The value as one element of a list; a nested sequence keeps its items, without an index."""
    nested = tuple(_Entry(e.leaf, None) for e in value.entries or ())
    return tuple(_Entry(leaf, index) for leaf in value.leaves) + nested


def _concat(first: _Value, second: _Value) -> _Value:
    a, b = _as_sequence(first), _as_sequence(second)
    return _Value(entries=_unique_entries(a.entries + _shifted(b.entries, a.length)),
                  length=None if a.length is None or b.length is None else a.length + b.length,
                  unknown=a.unknown + b.unknown)


def _shifted(entries: tuple[_Entry, ...], offset: int | None) -> tuple[_Entry, ...]:
    return tuple(_Entry(e.leaf, None if offset is None or e.index is None else e.index + offset) for e in entries)



# --- bindings and scopes ---------------------------------------------------------------------------

class _Scope:
    """Names at one point of a body, then the enclosing body's (filled once that body is walked)."""

    def __init__(self, names: Mapping[str, _Binding], parent: _Scope | None):
        self.names = names
        self.parent = parent

    def lookup(self, name: str) -> _Binding | None:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        return None


class _Binding:
    """What a name may hold at one point of the flow.

    Bindings get the file as an argument rather than keeping it: the graph of
    bindings and scopes must stay free of cycles, or every statement parsed for
    one call would stay alive until a full garbage collection.
    """

    def __init__(self, description: str):
        self.description = description

    def value(self, file: _File) -> _Value | None:
        return None

    def expression(self, file: _File) -> _Leaf | None:
        """The single expression the name holds, when it has exactly one plain assignment."""
        return None


class _Lazy(_Binding):
    """Evaluated on first request only; asked for while computing itself (recursion), it is not followed."""

    def value(self, file: _File) -> _Value | None:
        if not hasattr(self, "_value"):
            self._value = None
            self._value = self._compute(file)
        return self._value

    def _compute(self, file: _File) -> _Value | None:
        raise NotImplementedError


class _Statement(_Lazy):
    """A binding made by one statement, evaluated in the scope just before it."""

    def __init__(self, name: str, statement: ast.stmt, ancestors: tuple[ast.stmt, ...], scope: _Scope):
        super().__init__(f"`{name}` (line {statement.lineno})")
        self.statement = statement
        self.ancestors = ancestors
        self.scope = scope

    def _node(self, file: _File) -> tuple[_Piece, cst.CSTNode] | None:
        return file.statement(self.statement, self.ancestors)


class _Assigned(_Statement):
    """`name = value`, `name: T = value`, or one name of `a, b = x, y` (element)."""

    def __init__(self, name: str, statement: ast.stmt, ancestors: tuple[ast.stmt, ...], scope: _Scope,
                 element: int | None = None):
        super().__init__(name, statement, ancestors, scope)
        self.element = element

    def expression(self, file: _File) -> _Leaf | None:
        found = self._node(file)
        value = getattr(found[1], "value", None) if found else None
        if value is not None and self.element is not None:
            value = _unpacked(value, self.element)
        return None if value is None else _Leaf(value, found[0], self.scope)

    def _compute(self, file: _File) -> _Value | None:
        leaf = self.expression(file)
        return None if leaf is None else _evaluate(file, leaf)


def _unpacked(value: cst.BaseExpression, element: int) -> cst.BaseExpression | None:
    if not isinstance(value, (cst.Tuple, cst.List)) or any(isinstance(e, cst.StarredElement) for e in value.elements):
        return None
    return value.elements[element].value if element < len(value.elements) else None


class _Mutated(_Statement):
    """`name += x`, `name.append(x)`, `name.extend(x)`, `name.insert(i, x)` or `name[k] = x`, on what name held."""

    def __init__(self, name: str, statement: ast.stmt, ancestors: tuple[ast.stmt, ...], scope: _Scope,
                 previous: _Binding | None, how: str):
        super().__init__(name, statement, ancestors, scope)
        self.previous = previous
        self.how = how

    def _compute(self, file: _File) -> _Value:
        before = self.previous.value(file) if self.previous else None
        if before is None:
            unknown = (self.previous.description,) if self.previous else ()
            before = _Value(entries=(), length=None, unknown=unknown)
        found = self._node(file)
        arguments = _mutation_arguments(found[1]) if found else ()
        if len(arguments) != (2 if self.how == "insert" else 1):
            return _Value(entries=_as_sequence(before).entries, length=None, unknown=before.unknown)
        added = _evaluate(file, _Leaf(arguments[-1], found[0], self.scope))
        if self.how == "insert":
            return _inserted(before, _int_literal(arguments[0]), added)
        if self.how == "append":
            return _concat(before, _Value(entries=_as_item(added, 0), length=1, unknown=added.unknown))
        if self.how == "item":
            sequence = _as_sequence(before)
            return _Value(entries=sequence.entries + _as_item(added, None), length=sequence.length,
                          unknown=sequence.unknown + added.unknown)
        return _concat(before, added)


def _mutation_arguments(node: cst.CSTNode) -> tuple[cst.BaseExpression, ...]:
    """`x += a`, `x[k] = a`, `x.append(a)` -> (a,); `x.insert(i, a)` -> (i, a)."""
    if isinstance(node, (cst.AugAssign, cst.Assign)):
        return (node.value,)
    if isinstance(node, cst.Expr) and isinstance(node.value, cst.Call):
        args = node.value.args
        return () if any(a.keyword or a.star for a in args) else tuple(a.value for a in args)
    return ()


def _inserted(before: _Value, position: int | None, item: _Value) -> _Value:
    """list.insert: the items from `position` on move one place right; an unknown position blurs them all."""
    sequence = _as_sequence(before)
    length = sequence.length
    if position is not None and position < 0 and length is not None:
        position = max(length + position, 0)
    if position is None or position < 0:
        moved, at = _shifted(sequence.entries, None), None
    else:
        moved = tuple(e if e.index is None or e.index < position else _Entry(e.leaf, e.index + 1)
                      for e in sequence.entries)
        at = position if length is None else min(position, length)
    return _Value(entries=_unique_entries(moved + _as_item(item, at)), length=None if length is None else length + 1,
                  unknown=sequence.unknown + item.unknown)


class _Joined(_Lazy):
    """A name bound differently on different paths (if / else, try / except)."""

    def __init__(self, name: str, alternatives: tuple[_Binding, ...]):
        super().__init__(f"`{name}`")
        self.alternatives = alternatives

    def _compute(self, file: _File) -> _Value:
        values = [(b.value(file), b.description) for b in self.alternatives]
        return _join([v if v is not None else _Value(unknown=(d,)) for v, d in values])


class _Looped(_Lazy):
    """A name changed in a loop body: items the loop adds have no known index."""

    def __init__(self, name: str, before: _Binding | None, after: _Binding):
        super().__init__(f"`{name}`")
        self.before = before
        self.after = after

    def _compute(self, file: _File) -> _Value:
        before = (self.before.value(file) if self.before else None) or _Value()
        after = self.after.value(file) or _Value(unknown=(self.after.description,))
        kept = {(e.leaf.key, e.index) for e in before.entries or ()}
        added = tuple(e if (e.leaf.key, e.index) in kept else _Entry(e.leaf, None) for e in after.entries or ())
        entries = None if before.entries is None and after.entries is None else (before.entries or ()) + added
        return _join([before, _Value(leaves=after.leaves, entries=entries, unknown=after.unknown)])


class _Function(_Binding):
    """A def: calling it gives what its return statements give.

    It refers weakly to the scope it is defined in, which names it (a cycle
    otherwise); `_File.scopes` keeps that scope alive while locating.
    """

    def __init__(self, statement: ast.FunctionDef | ast.AsyncFunctionDef, ancestors: tuple[ast.stmt, ...],
                 enclosing: _Scope):
        super().__init__(f"`{statement.name}`, a function")
        self.statement = statement
        self.ancestors = ancestors
        self._enclosing = weakref.ref(enclosing)

    @property
    def enclosing(self) -> _Scope:
        return self._enclosing()


# --- the flow walk (ast skeleton) ------------------------------------------------------------------

@dataclass(frozen=True)
class _SiteStatement:
    """A statement holding kernel site(s), with the names as they are just before it."""
    statement: ast.stmt
    ancestors: tuple[ast.stmt, ...]
    scope: _Scope
    function: str | None


Env = Mapping[str, _Binding]


class _Walk:
    """One pass over a body, in order: every binding statement makes a new (never mutated) env."""

    def __init__(self, file: _File, parent: _Scope | None, defining: _Scope, function: str | None,
                 record_sites: bool):
        self.file = file
        self.parent = parent            # scope seen by names not bound in this body
        self.defining = defining        # scope that nested defs will see (this body, once walked)
        self.function = function
        self.record_sites = record_sites
        self.returns: list[tuple[ast.Return, tuple[ast.stmt, ...], _Scope]] = []
        self.nested: list[tuple[ast.stmt, tuple[ast.stmt, ...]]] = []

    def body(self, statements: Sequence[ast.stmt], env: Env, ancestors: tuple[ast.stmt, ...]) -> Env:
        for statement in statements:
            env = self.statement(statement, env, ancestors)
        return env

    def statement(self, statement: ast.stmt, env: Env, ancestors: tuple[ast.stmt, ...]) -> Env:
        scope = _Scope(env, self.parent)
        if self.record_sites and id(statement) in self.file.plan.flagged:
            self.file.site_statements.append(_SiteStatement(statement, ancestors, scope, self.function))
        inner = ancestors + (statement,)
        if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr)):
            return self._simple(statement, env, ancestors, scope)
        if isinstance(statement, ast.If):
            return _merge(self.body(statement.body, env, inner), self.body(statement.orelse, env, inner))
        if isinstance(statement, (ast.For, ast.AsyncFor, ast.While)):
            start = _opaque(env, _targets(getattr(statement, "target", None)), "a loop variable")
            return self.body(statement.orelse, _looped(env, self.body(statement.body, start, inner)), inner)
        if isinstance(statement, (ast.With, ast.AsyncWith)):
            names = [n for item in statement.items for n in _targets(item.optional_vars)]
            return self.body(statement.body, _opaque(env, names, "a with target"), inner)
        if isinstance(statement, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            done = self.body(statement.orelse, self.body(statement.body, env, inner), inner)
            raised = _merge(env, done)
            handled = [self.body(h.body, _opaque(raised, [h.name] if h.name else [], "an exception"), inner)
                       for h in statement.handlers]
            return self.body(statement.finalbody, _merge(done, *handled), inner)
        if isinstance(statement, getattr(ast, "Match", ())):
            cases = [self.body(case.body, _opaque(env, _targets(case.pattern), "a match capture"), inner)
                     for case in statement.cases]
            return _merge(env, *cases)
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._keep_if_nested_sites(statement, ancestors)
            return {**env, statement.name: _Function(statement, ancestors, self.defining)}
        if isinstance(statement, ast.ClassDef):
            self._keep_if_nested_sites(statement, ancestors)
            return _opaque(env, [statement.name], "a class")
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            return _opaque(env, [(a.asname or a.name).split(".")[0] for a in statement.names], "an import")
        if isinstance(statement, ast.Return) and statement.value is not None:
            self.returns.append((statement, ancestors, scope))
        return env

    def _keep_if_nested_sites(self, statement: ast.stmt, ancestors: tuple[ast.stmt, ...]) -> None:
        if self.record_sites and id(statement) in self.file.plan.enclosing:
            self.nested.append((statement, ancestors))

    def _simple(self, statement: ast.stmt, env: Env, ancestors: tuple[ast.stmt, ...], scope: _Scope) -> Env:
        if isinstance(statement, ast.Assign) or isinstance(statement, ast.AnnAssign) and statement.value is not None:
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                env = self._assign(target, statement, env, ancestors, scope)
            return env
        if isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name):
            name = statement.target.id
            if not isinstance(statement.op, ast.Add):
                return _opaque(env, [name], "changed by an operator other than +=")
            return {**env, name: _Mutated(name, statement, ancestors, scope, env.get(name), "+=")}
        call = statement.value if isinstance(statement, ast.Expr) else None
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr in ("append", "extend", "insert") and isinstance(call.func.value, ast.Name)):
            name = call.func.value.id
            return {**env, name: _Mutated(name, statement, ancestors, scope, env.get(name), call.func.attr)}
        return env

    def _assign(self, target: ast.expr, statement: ast.stmt, env: Env, ancestors: tuple[ast.stmt, ...],
                scope: _Scope) -> Env:
        if isinstance(target, ast.Name):
            return {**env, target.id: _Assigned(target.id, statement, ancestors, scope)}
        if isinstance(target, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in target.elts):
            for element, item in enumerate(target.elts):
                if isinstance(item, ast.Name):
                    env = {**env, item.id: _Assigned(item.id, statement, ancestors, scope, element)}
                else:
                    env = _opaque(env, _targets(item), "unpacked")
            return env
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            name = target.value.id
            return {**env, name: _Mutated(name, statement, ancestors, scope, env.get(name), "item")}
        return _opaque(env, _targets(target), "unpacked")


def _targets(node: ast.AST | None) -> list[str]:
    """Names bound by an assignment target or a match pattern (not `self` of `self.x = ...`)."""
    if node is None:
        return []
    return [n.id if isinstance(n, ast.Name) else n.name for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            or isinstance(n, ast.pattern) and getattr(n, "name", None)]


def _opaque(env: Env, names: Iterable[str], why: str) -> Env:
    names = list(names)
    return {**env, **{name: _Binding(f"`{name}`, {why}") for name in names}} if names else env


def _merge(*envs: Env) -> Env:
    """The names after paths that may each have run: a name bound differently on two paths joins."""
    if all(env is envs[0] for env in envs):
        return envs[0]
    merged = {}
    for name in {name for env in envs for name in env}:
        bindings = _unique((env[name] for env in envs if name in env), key=id)
        merged[name] = bindings[0] if len(bindings) == 1 else _Joined(name, bindings)
    return merged


def _looped(before: Env, after: Env) -> Env:
    """A loop body runs any number of times: what it changes joins with what was there, indices blurred."""
    if after is before:
        return before
    return {**before, **{name: _Looped(name, before.get(name), binding)
                         for name, binding in after.items() if before.get(name) is not binding}}


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Env:
    a = function.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, a.vararg, *a.kwonlyargs, a.kwarg) if p is not None]
    return _opaque({}, names, "a parameter")


def _walk_module(file: _File, statements: list[ast.stmt]) -> None:
    module = _Scope({}, None)
    file.scopes.append(module)
    walk = _Walk(file, parent=None, defining=module, function=None, record_sites=True)
    module.names = walk.body(statements, {}, ())
    _walk_nested(file, walk.nested, module, None)


def _walk_nested(file: _File, nested: list[tuple[ast.stmt, tuple[ast.stmt, ...]]], enclosing: _Scope,
                 function: str | None) -> None:
    """Walk the defs and classes holding sites; a method sees the class's enclosing scope, not the class."""
    for statement, ancestors in nested:
        name = statement.name if function is None else f"{function}.{statement.name}"
        inner = ancestors + (statement,)
        if isinstance(statement, ast.ClassDef):
            walk = _Walk(file, parent=enclosing, defining=enclosing, function=name, record_sites=True)
            walk.body(statement.body, {}, inner)
            _walk_nested(file, walk.nested, enclosing, name)
            continue
        body = _Scope({}, enclosing)
        file.scopes.append(body)
        walk = _Walk(file, parent=enclosing, defining=body, function=name, record_sites=True)
        body.names = walk.body(statement.body, _parameters(statement), inner)
        _walk_nested(file, walk.nested, body, name)


def _helper_value(file: _File, function: _Function) -> _Value | None:
    """What a module or local helper returns, joined over its return statements (walked once per def)."""
    key = id(function.statement)
    if key not in file.helper_values:
        file.helper_values[key] = None                 # a recursive helper is not followed
        body = _Scope({}, function.enclosing)
        file.scopes.append(body)
        walk = _Walk(file, parent=function.enclosing, defining=body, function=None, record_sites=False)
        body.names = walk.body(function.statement.body, _parameters(function.statement),
                               function.ancestors + (function.statement,))
        values = [_return_value(file, *returned) for returned in walk.returns]
        file.helper_values[key] = _join(values) if values else None
    return file.helper_values[key]


def _return_value(file: _File, statement: ast.Return, ancestors: tuple[ast.stmt, ...], scope: _Scope) -> _Value:
    found = file.statement(statement, ancestors)
    value = getattr(found[1], "value", None) if found else None
    if value is None:
        return _Value(unknown=(f"the return at line {statement.lineno}",))
    return _evaluate(file, _Leaf(value, found[0], scope))


# --- evaluating libcst expressions -----------------------------------------------------------------

def _evaluate(file: _File, leaf: _Leaf) -> _Value:
    """Follow an expression to the items it may hold; what cannot be followed is a leaf or unknown."""
    node = leaf.node
    if isinstance(node, cst.Name):
        return _evaluate_name(file, leaf)
    if isinstance(node, (cst.List, cst.Tuple, cst.Set)):
        return _elements(file, leaf, node.elements)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Multiply)):
        left, right = _evaluate(file, leaf.at(node.left)), _evaluate(file, leaf.at(node.right))
        if isinstance(node.operator, cst.Add):
            return _concat(left, right)
        repeated = [v for v in (left, right) if v.entries is not None]
        if repeated:
            return _Value(entries=_shifted(repeated[0].entries, None), length=None, unknown=repeated[0].unknown)
    if isinstance(node, cst.IfExp):
        return _join([_evaluate(file, leaf.at(node.body)), _evaluate(file, leaf.at(node.orelse))])
    if isinstance(node, cst.BooleanOperation):
        return _join([_evaluate(file, leaf.at(node.left)), _evaluate(file, leaf.at(node.right))])
    if isinstance(node, cst.NamedExpr):
        return _evaluate(file, leaf.at(node.value))
    if isinstance(node, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
        return _comprehension(file, leaf)
    if isinstance(node, cst.Dict):
        return _dict_items(file, leaf, [(e.value, isinstance(e, cst.StarredDictElement)) for e in node.elements])
    if isinstance(node, cst.Subscript):
        return _subscript(file, leaf)
    if isinstance(node, cst.Call):
        return _evaluate_call(file, leaf)
    return _Value(leaves=(leaf,))


def _evaluate_name(file: _File, leaf: _Leaf) -> _Value:
    name = leaf.node.value
    if name in ("None", "True", "False"):
        return _Value(leaves=(leaf,))
    binding = leaf.scope.lookup(name)
    if binding is None:
        return _Value(unknown=(f"`{name}`",))
    value = binding.value(file)
    return value if value is not None else _Value(unknown=(binding.description,))


def _elements(file: _File, leaf: _Leaf, elements: Sequence[cst.BaseElement]) -> _Value:
    entries: list[_Entry] = []
    unknown: list[str] = []
    position: int | None = 0
    for element in elements:
        value = _evaluate(file, leaf.at(element.value))
        if isinstance(element, cst.StarredElement):
            spread = _as_sequence(value)
            entries += _shifted(spread.entries, position)
            position = None if position is None or spread.length is None else position + spread.length
        else:
            entries += _as_item(value, position)
            position = None if position is None else position + 1
        unknown += value.unknown
    return _Value(entries=_unique_entries(entries), length=position, unknown=_unique(unknown))


def _dict_items(file: _File, leaf: _Leaf, items: Sequence[tuple[cst.BaseExpression, bool]]) -> _Value:
    """A dict of specs is a pytree whose leaf order is the sorted keys': items get no index."""
    entries: list[_Entry] = []
    unknown: list[str] = []
    for node, spread_out in items:
        value = _evaluate(file, leaf.at(node))
        spread = _as_sequence(value).entries if spread_out else _as_item(value, None)
        entries += _shifted(spread, None)
        unknown += value.unknown
    return _Value(entries=_unique_entries(entries), length=None, unknown=_unique(unknown))


def _comprehension(file: _File, leaf: _Leaf) -> _Value:
    node = leaf.node
    names = []
    loop = node.for_in
    while loop is not None:
        names += _cst_names(loop.target)
        loop = loop.inner_for_in
    shadowed = _Scope(_opaque({}, names, "a comprehension variable"), leaf.scope)
    element = node.value if isinstance(node, cst.DictComp) else node.elt
    value = _evaluate(file, _Leaf(element, leaf.piece, shadowed))
    return _Value(entries=_as_item(value, None), length=None, unknown=value.unknown)


def _cst_names(target: cst.CSTNode) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in _cst_names(element.value)]
    return []


def _subscript(file: _File, leaf: _Leaf) -> _Value:
    node = leaf.node
    base = _evaluate(file, leaf.at(node.value))
    if base.entries is None:
        return _Value(leaves=(leaf,))
    if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Slice):
        return _Value(entries=_shifted(base.entries, None), length=None, unknown=base.unknown)
    index = _literal_index(node.slice)
    if index is not None and index < 0 and base.length is not None:
        index += base.length
    picked = tuple(e.leaf for e in base.entries if index is None or e.index in (index, None))
    return _Value(leaves=picked or (leaf,), unknown=base.unknown)


def _literal_index(elements: Sequence[cst.SubscriptElement]) -> int | None:
    if len(elements) != 1 or not isinstance(elements[0].slice, cst.Index):
        return None
    return _int_literal(elements[0].slice.value)


def _int_literal(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = _integer(node.expression)
        return None if inner is None else -inner
    return _integer(node)


def _integer(node: cst.BaseExpression) -> int | None:
    return node.evaluated_value if isinstance(node, cst.Integer) else None


def _evaluate_call(file: _File, leaf: _Leaf) -> _Value:
    node = leaf.node
    if isinstance(node.func, cst.Name):
        name = node.func.value
        binding = leaf.scope.lookup(name)
        if isinstance(binding, _Function):
            value = _helper_value(file, binding)
            return value if value is not None else _Value(unknown=(f"what `{name}()` returns",))
        positional = [a for a in node.args if not a.keyword and not a.star]
        if binding is None and name in ("list", "tuple") and len(node.args) == 1 == len(positional):
            return _as_sequence(_evaluate(file, leaf.at(positional[0].value)))
        if binding is None and name == "dict":
            return _dict_items(file, leaf, [(a.value, a.star == "**") for a in node.args if a.keyword or a.star])
    return _Value(leaves=(leaf,))


def _follow(file: _File, leaf: _Leaf | None) -> _Leaf | None:
    """Through names with one plain assignment, to the expression that defines them."""
    for _ in range(16):
        if leaf is None or not isinstance(leaf.node, cst.Name):
            return leaf
        binding = leaf.scope.lookup(leaf.node.value)
        expression = binding.expression(file) if binding is not None else None
        if expression is None:
            return leaf
        leaf = expression
    return leaf


# --- building the sites ----------------------------------------------------------------------------

_KERNEL_PARAMETERS = ("kernel", "out_shape")
_BLOCK_SPEC_PARAMETERS = ("block_shape", "index_map", "pipeline_mode")
_SCRATCH_PARAMETERS = ("shape", "dtype")
_GRID_SPEC_PARAMETERS = {
    "GridSpec": ("grid", "in_specs", "out_specs", "scratch_shapes"),
    "PrefetchScalarGridSpec": ("num_scalar_prefetch", "grid", "in_specs", "out_specs", "scratch_shapes"),
}
_NOT_OWN = (cst.BaseSuite, cst.BaseCompoundStatement, cst.Else, cst.ExceptHandler, cst.ExceptStarHandler,
            cst.Finally, cst.MatchCase)


@dataclass(frozen=True)
class _Call:
    """One kernel site before building: the span node, the name token, and where its arguments come from."""
    span_node: cst.Call
    name_node: cst.CSTNode
    sources: tuple[tuple[_Leaf, int], ...]     # (call, positional arguments to skip), earliest first
    notes: tuple[str, ...] = ()


class _OwnCalls(cst.CSTVisitor):
    """The calls of a statement outside its nested blocks (those are statements of their own)."""

    def __init__(self, root: cst.CSTNode):
        super().__init__()
        self.root = root
        self.calls: list[cst.Call] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if node is not self.root and isinstance(node, _NOT_OWN):
            return False
        if isinstance(node, cst.Call):
            self.calls.append(node)
        return True


def _kernel_sites(file: _File, record: _SiteStatement) -> list[KernelSite]:
    found = file.statement(record.statement, record.ancestors)
    if found is None:
        return []
    piece, statement = found
    visitor = _OwnCalls(statement)
    statement.visit(visitor)
    return [_kernel_site(file, call, piece, record.function)
            for call in _site_calls(file, statement, visitor.calls, piece, record.scope)]


def _site_calls(file: _File, statement: cst.CSTNode, calls: list[cst.Call], piece: _Piece,
                scope: _Scope) -> Iterator[_Call]:
    """pallas_call(...); partial(pallas_call, ...) unless it is called later (then that call is the site)."""
    names = file.names
    partials = {id(c) for c in calls if _is_partial_of_pallas(c, names)}
    called = {id(c.func) for c in calls if id(c.func) in partials}
    for call in calls:
        leaf = _Leaf(call, piece, scope)
        name = _last_name(call.func, names)
        partial = _follow(file, leaf.at(call.func)) if name in names.partials else None
        if id(call.func) in partials:
            yield _Call(call, _name_token(call.func.args[0].value), ((leaf.at(call.func), 1), (leaf, 0)))
        elif id(call) in partials:
            if id(call) not in called and not _bound_to_called_alias(statement, call, file):
                yield _Call(call, _name_token(call.args[0].value), ((leaf, 1),))
        elif partial is not None and isinstance(partial.node, cst.Call) and _is_partial_of_pallas(partial.node, names):
            yield _Call(call, _name_token(call.func), ((partial, 1), (leaf, 0)))
        elif name in names.pallas:
            yield _Call(call, _name_token(call.func), ((leaf, 0),))
        elif name in names.partials:
            note = f"the arguments bound by partial `{_short(piece.expr(call.func).text)}` were not followed"
            yield _Call(call, _name_token(call.func), ((leaf, 0),), (note,))


def _is_partial_of_pallas(call: cst.Call, names: _Names) -> bool:
    return (_last_name(call.func, names) == "partial" and bool(call.args) and not call.args[0].keyword
            and _last_name(call.args[0].value, names) in names.pallas)


def _bound_to_called_alias(statement: cst.CSTNode, call: cst.Call, file: _File) -> bool:
    if not isinstance(statement, (cst.Assign, cst.AnnAssign)) or statement.value is not call:
        return False
    targets = [t.target for t in statement.targets] if isinstance(statement, cst.Assign) else [statement.target]
    return any((_dotted(t) or ("",))[-1] in file.plan.called_partials for t in targets)


def _kernel_site(file: _File, call: _Call, piece: _Piece, function: str | None) -> KernelSite:
    args, notes = _arguments(call.sources, _KERNEL_PARAMETERS)
    notes = list(call.notes) + notes
    grid_spec = _follow(file, args.get("grid_spec"))
    spec_args: dict[str, _Leaf] = {}
    if grid_spec is not None:
        parameters = _grid_spec_parameters(grid_spec.node, file.names)
        if parameters is None:
            notes.append(f"grid_spec `{_short(grid_spec.piece.expr(grid_spec.node).text)}` is not a GridSpec "
                         "the locator can follow")
        else:
            spec_args, more = _arguments(((grid_spec, 0),), parameters)
            notes += more
    given = {**args, **spec_args}
    in_specs, in_notes = _block_specs(file, given.get("in_specs"), "in")
    out_specs, out_notes = _block_specs(file, given.get("out_specs"), "out")
    scratch, scratch_notes = _scratch(file, given.get("scratch_shapes"))
    compiler_params = _follow(file, args.get("compiler_params"))
    vmem_limit = compiler_params and _vmem_limit(file, compiler_params, depth=3)
    return KernelSite(
        path=file.path,
        span=piece.span(call.span_node),
        name_span=piece.span(call.name_node),
        function=function,
        grid=_defined(file, given.get("grid")),
        grid_spec=_written(grid_spec),
        num_scalar_prefetch=_defined(file, spec_args.get("num_scalar_prefetch")),
        in_specs=in_specs,
        out_specs=out_specs,
        scratch=scratch,
        compiler_params=_written(compiler_params),
        vmem_limit_bytes=_defined(file, vmem_limit),
        notes=tuple(_unique(notes + in_notes + out_notes + scratch_notes)),
    )


def _grid_spec_parameters(node: cst.BaseExpression, names: _Names) -> tuple[str, ...] | None:
    if not isinstance(node, cst.Call):
        return None
    name = _last_name(node.func, names) or ""
    if name in _GRID_SPEC_PARAMETERS:
        return _GRID_SPEC_PARAMETERS[name]
    return () if name.endswith("GridSpec") else None


def _arguments(sources: Sequence[tuple[_Leaf, int]], parameters: Sequence[str]) -> tuple[dict[str, _Leaf], list[str]]:
    """Arguments by parameter name; positional ones continue across a partial and the call of its result."""
    found: dict[str, _Leaf] = {}
    notes: list[str] = []
    position = 0
    for leaf, skip in sources:
        positional = 0
        for arg in leaf.node.args:
            if arg.star:
                notes.append(f"`{arg.star}{_short(leaf.piece.expr(arg.value).text)}` is not followed")
            elif arg.keyword is not None:
                found[arg.keyword.value] = leaf.at(arg.value)
            else:
                positional += 1
                if positional > skip:
                    if position < len(parameters):
                        found[parameters[position]] = leaf.at(arg.value)
                    position += 1
    return found, notes


def _block_specs(file: _File, leaf: _Leaf | None, role: str) -> tuple[tuple[BlockSpecSite, ...], list[str]]:
    if leaf is None:
        return (), []
    value = _as_sequence(_evaluate(file, leaf))
    notes = [f"{role}_specs: could not follow {what}" for what in value.unknown]
    sites = []
    for entry in value.entries:
        node = entry.leaf.node
        if _is_none(node):
            continue
        if isinstance(node, cst.Call) and _last_name(node.func, file.names) == "BlockSpec":
            sites.append(_block_spec_site(file, entry, role))
        else:
            notes.append(f"{role}_specs{_at(entry.index)}: `{_short(entry.leaf.piece.expr(node).text)}` "
                         "is not a BlockSpec the locator can follow")
    return tuple(sorted(sites, key=_site_order)), notes


def _block_spec_site(file: _File, entry: _Entry, role: str) -> BlockSpecSite:
    leaf = entry.leaf
    args, _ = _arguments(((leaf, 0),), _BLOCK_SPEC_PARAMETERS)
    pipeline_mode = args.get("pipeline_mode")
    return BlockSpecSite(
        span=leaf.piece.span(leaf.node),
        role=role,
        index=entry.index,
        block_shape=_written(args.get("block_shape")),
        index_map=_written(args.get("index_map")),
        memory_space=_written(args.get("memory_space")),
        pipeline_mode=_written(pipeline_mode),
        buffer_count=_buffer_count(_follow(file, pipeline_mode), file.names),
    )


def _buffer_count(leaf: _Leaf | None, names: _Names) -> int | None:
    if leaf is None or not isinstance(leaf.node, cst.Call) or _last_name(leaf.node.func, names) != "Buffered":
        return None
    count = _arguments(((leaf, 0),), ("buffer_count",))[0].get("buffer_count")
    return _integer(count.node) if count is not None else None


def _scratch(file: _File, leaf: _Leaf | None) -> tuple[tuple[ScratchSite, ...], list[str]]:
    if leaf is None:
        return (), []
    value = _as_sequence(_evaluate(file, leaf))
    notes = [f"scratch_shapes: could not follow {what}" for what in value.unknown]
    sites = []
    for entry in value.entries:
        node = entry.leaf.node
        if _is_none(node):
            continue
        kind = _kind(node.func if isinstance(node, cst.Call) else node, file.names)
        if kind is None:
            notes.append(f"scratch_shapes{_at(entry.index)}: `{_short(entry.leaf.piece.expr(node).text)}` "
                         "is not a scratch shape the locator can follow")
            continue
        args = _arguments(((entry.leaf, 0),), _SCRATCH_PARAMETERS)[0] if isinstance(node, cst.Call) else {}
        sites.append(ScratchSite(span=entry.leaf.piece.span(node), index=entry.index, kind=kind,
                                 shape=_written(args.get("shape")), dtype=_written(args.get("dtype"))))
    return tuple(sorted(sites, key=_site_order)), notes


def _kind(node: cst.BaseExpression, names: _Names) -> str | None:
    """`pltpu.VMEM` -> "VMEM", `pltpu.SemaphoreType.DMA` -> "SemaphoreType.DMA": from the first class-like name."""
    dotted = _dotted(node)
    if len(dotted) == 1:
        dotted = (names.imported.get(dotted[0], dotted[0]),)
    for i, part in enumerate(dotted):
        if part[:1].isupper():
            return ".".join(dotted[i:])
    return None


def _vmem_limit(file: _File, leaf: _Leaf, depth: int) -> _Leaf | None:
    """vmem_limit_bytes of CompilerParams(...), dict(mosaic=dict(...)) or {"mosaic": {...}}."""
    node = leaf.node
    if isinstance(node, cst.Call):
        found = _arguments(((leaf, 0),), ())[0]
        inner = list(found.values())
    elif isinstance(node, cst.Dict):
        pairs = [e for e in node.elements if isinstance(e, cst.DictElement)]
        found = {_string(e.key): leaf.at(e.value) for e in pairs}
        inner = list(found.values())
    else:
        return None
    if "vmem_limit_bytes" in found:
        return found["vmem_limit_bytes"]
    for value in inner if depth > 0 else ():
        followed = _follow(file, value)
        limit = followed and _vmem_limit(file, followed, depth - 1)
        if limit is not None:
            return limit
    return None


def _string(node: cst.BaseExpression) -> str | None:
    return node.evaluated_value if isinstance(node, cst.SimpleString) else None


def _written(leaf: _Leaf | None) -> Expr | None:
    return leaf.piece.expr(leaf.node) if leaf is not None else None


def _defined(file: _File, leaf: _Leaf | None) -> Expr | None:
    """The expression where the value is written: through a name to its single definition."""
    return _written(_follow(file, leaf))


def _site_order(site: BlockSpecSite | ScratchSite) -> tuple:
    return (site.index is None, site.index or 0, site.span.start_line, site.span.start_col)


def _at(index: int | None) -> str:
    return f"[{index}]" if index is not None else ""


def _short(text: str) -> str:
    line = text.strip().split("\n")[0]
    return line if len(line) <= 60 and "\n" not in text.strip() else line[:57] + "..."


# --- names of libcst nodes -------------------------------------------------------------------------

def _dotted(node: cst.CSTNode) -> tuple[str, ...]:
    """`a.b.c` -> ("a", "b", "c"); () for anything that is not a dotted name."""
    if isinstance(node, cst.Name):
        return (node.value,)
    if isinstance(node, cst.Attribute):
        base = _dotted(node.value)
        return base + (node.attr.value,) if base else ()
    return ()


def _last_name(node: cst.CSTNode, names: _Names) -> str | None:
    """The name a callee is known by: `pl.BlockSpec` -> BlockSpec, `BS` imported as BlockSpec -> BlockSpec."""
    if isinstance(node, cst.Name):
        return names.imported.get(node.value, node.value)
    return node.attr.value if isinstance(node, cst.Attribute) else None


def _name_token(node: cst.CSTNode) -> cst.CSTNode:
    return node.attr if isinstance(node, cst.Attribute) else node


def _is_none(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"
