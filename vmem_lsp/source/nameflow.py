"""What a name may hold where a kernel site uses it: a flow walk, without running anything.

The walk follows the `ast` statement skeleton of the enclosing function (then
module), in order: every assignment, `+=`, `.append` / `.extend` / `.insert`
and `x[k] = ...` makes a lazy binding, branches join, loops blur indices, a
helper's value is what its return statements give. A binding is parsed (by
libcst, pieces.py) and evaluated only when a site asks for it, so the cost is
that of the names the sites use, not of the file.
"""

from __future__ import annotations

import ast
import itertools
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import libcst as cst

from .pieces import Piece, Source, dotted, int_literal, is_none
from .prepass import Plan


class File(Source):
    """The module being located: its statements parsed on demand, its plan, and the walk's state.

    It also records what a computation reads beyond the top-level statement it started in
    (`recording`), so that locate.py can keep its sites while none of that changes: the top-level
    statements whose nodes it reads, by index, and each name it looks up at module level, with the
    point of the module's walk it is looked up at (`Scope.point`). A value kept during the locate
    (a binding's, a helper's) keeps what its computation read, and adds it to each later reader's."""

    def __init__(self, path: str, lines: list[str], plan: Plan):
        super().__init__(lines)
        self.path = path
        self.plan = plan
        self.names = plan.names
        self.site_statements: list[SiteStatement] = []
        self.helper_values: dict[int, tuple[Value | None, Deps | None]] = {}  # None: being computed
        self.scopes: list[Scope] = []  # keeps alive the scopes that defs refer to weakly
        self.top_level: dict[int, int] = {}  # id of a top-level statement -> its index (walk_module)
        self.module_envs: list[Env] = []  # the module's names before each top-level statement, and at the end
        self.cut_short = 0  # values asked for while being computed (recursion): what they give depends on the order
        self._recording: list[Deps] = []

    @contextmanager
    def recording(self) -> Iterator[Deps]:
        """What the block reads (see the class), also added to the recording around it, if any."""
        deps: Deps = set()
        self._recording.append(deps)
        try:
            yield deps
        finally:
            self._recording.pop()
            self.depend(deps)

    def depend(self, deps: Deps) -> None:
        if self._recording and deps is not self._recording[-1]:
            self._recording[-1] |= deps

    def looked_up(self, name: str, scope: Scope) -> None:
        if self._recording:
            self._recording[-1].add((name, scope.point))

    def reads(self, statement: ast.stmt, ancestors: tuple[ast.stmt, ...]) -> None:
        if self._recording:
            self._recording[-1].add(self.top_level.get(id(ancestors[0] if ancestors else statement), -1))

    def statement(self, statement: ast.stmt, ancestors: tuple[ast.stmt, ...]) -> tuple[Piece, cst.CSTNode] | None:
        self.reads(statement, ancestors)
        return super().statement(statement, ancestors)


# What a computation read: indices of top-level statements (-1: one not of the module), and
# (name, point) of each module-level lookup (point None: a scope without one).
Deps = set[int | tuple[str, int | None]]


# --- what names may hold ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Leaf:
    """An expression where following stops, with where it is and what its names mean there."""

    node: cst.BaseExpression
    piece: Piece
    scope: Scope

    @property
    def key(self) -> tuple[int, int]:
        return id(self.node), self.piece.line_offset  # a cached piece can sit at several places

    def at(self, node: cst.BaseExpression) -> Leaf:
        return Leaf(node, self.piece, self.scope)


@dataclass(frozen=True)
class Entry:
    leaf: Leaf
    index: int | None  # the leaf's place in jax's flattening of the whole value, when known


@dataclass(frozen=True)
class Value:
    """What an expression may be: one item (alternatives), a sequence of items, and what was not followed."""

    leaves: tuple[Leaf, ...] = ()
    entries: tuple[Entry, ...] | None = None  # None: not known as a sequence
    length: int | None = None  # leaves in jax's flattening (items, when not nested)
    unknown: tuple[str, ...] = ()
    nested: bool = False  # an item is itself a pytree: indices are not positions

    @property
    def items(self) -> tuple[Entry, ...]:
        """The entries of a value used as a sequence (as_sequence's, whose entries are always known)."""
        return self.entries or ()


def unique(items: Iterable, key=lambda item: item) -> tuple:
    seen: dict = {}
    for item in items:
        seen.setdefault(key(item), item)
    return tuple(seen.values())


def _unique_entries(entries: Iterable[Entry]) -> tuple[Entry, ...]:
    return unique(entries, key=lambda e: (e.leaf.key, e.index))


def _join(values: Sequence[Value]) -> Value:
    """Either of the values (branches of an if, of a conditional expression)."""
    sequences = [v for v in values if v.entries is not None]
    lengths = {v.length for v in sequences}
    return Value(
        leaves=unique((leaf for v in values for leaf in v.leaves), key=lambda leaf: leaf.key),
        entries=_unique_entries(e for v in sequences for e in v.items) if sequences else None,
        length=lengths.pop() if len(lengths) == 1 and len(sequences) == len(values) else None,
        unknown=unique(u for v in values for u in v.unknown),
        nested=any(v.nested for v in values),
    )


def as_sequence(value: Value) -> Value:
    """The value used as in_specs: a lone BlockSpec is the only item; a lone unknown call may be many."""
    if value.entries is not None:
        extra = tuple(Entry(leaf, None) for leaf in value.leaves)
        return Value(
            entries=_unique_entries(value.entries + extra),
            length=None if extra else value.length,
            unknown=value.unknown,
            nested=value.nested,
        )
    single = bool(value.leaves) and all(_is_single_item(leaf.node) for leaf in value.leaves)
    return Value(
        entries=tuple(Entry(leaf, 0 if single else None) for leaf in value.leaves),
        length=1 if single else None,
        unknown=value.unknown,
    )


def _is_single_item(node: cst.BaseExpression) -> bool:
    """None, or a constructor (a capitalised name: BlockSpec, VMEM, SemaphoreType.DMA), not a list-maker."""
    if is_none(node):
        return True
    return any(part[:1].isupper() for part in dotted(node.func if isinstance(node, cst.Call) else node))


def _as_item(value: Value, index: int | None) -> tuple[Entry, ...]:
    return _child(value, index)[0]


def _child(value: Value, index: int | None) -> tuple[tuple[Entry, ...], int | None]:
    """The value as one child of a pytree (an element of a list, an argument of a NamedTuple) whose
    leaves start at `index`: its entries, and how many leaves it adds (None: not known).

    A nested pytree of known leaves keeps their order, as jax flattens depth first
    (`(Pair(x, y), z)`: x 0, y 1, z 2); one of unknown size keeps its items without an index."""
    if value.entries is None:
        return tuple(Entry(leaf, index) for leaf in value.leaves), 1
    if not value.leaves and value.length is not None and all(e.index is not None for e in value.entries):
        return _shifted(value.entries, index), value.length
    return tuple(Entry(leaf, index) for leaf in value.leaves) + _shifted(value.entries, None), None


def _items_of(children: Iterable[Value], spread: Iterable[bool] = ()) -> Value:
    """A pytree node of these children in order, each child's leaves after the previous child's;
    a child marked spread (`*xs` in a list) gives its items, not itself."""
    entries: list[Entry] = []
    unknown: list[str] = []
    position: int | None = 0
    nested = False
    for value, spread_out in zip(children, itertools.chain(spread, itertools.repeat(False))):
        if spread_out:
            value = as_sequence(value)
            found, count, nested = _shifted(value.items, position), value.length, nested or value.nested
        else:
            (found, count), nested = _child(value, position), nested or value.entries is not None
        entries += found
        position = None if position is None or count is None else position + count
        unknown += value.unknown
    return Value(entries=_unique_entries(entries), length=position, unknown=unique(unknown), nested=nested)


def _concat(first: Value, second: Value) -> Value:
    a, b = as_sequence(first), as_sequence(second)
    return Value(
        entries=_unique_entries(a.items + _shifted(b.items, a.length)),
        length=None if a.length is None or b.length is None else a.length + b.length,
        unknown=a.unknown + b.unknown,
        nested=a.nested or b.nested,
    )


def _shifted(entries: tuple[Entry, ...], offset: int | None) -> tuple[Entry, ...]:
    return tuple(Entry(e.leaf, None if offset is None or e.index is None else e.index + offset) for e in entries)


# --- bindings and scopes ---------------------------------------------------------------------------


class Scope:
    """Names at one point of a body, then the enclosing body's (filled once that body is walked).

    A module-level scope (no parent) has a `point`: the index of the top-level statement it is in
    (its names are those bound before that statement, and within it up to there), or the number of
    statements for the module's names at the end, which functions see."""

    def __init__(self, names: Mapping[str, _Binding], parent: Scope | None, point: int | None = None):
        self.names = names
        self.parent = parent
        self.point = point

    def lookup(self, name: str, file: File | None = None) -> _Binding | None:
        """The binding of `name` here; with `file`, a lookup that reaches the module is recorded there."""
        scope = self
        while scope.parent is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        if file is not None:
            file.looked_up(name, scope)
        return scope.names.get(name)


class _Binding:
    """What a name may hold at one point of the flow.

    Bindings get the file as an argument rather than keeping it: the graph of
    bindings and scopes must stay free of cycles, or every statement parsed for
    one call would stay alive until a full garbage collection.
    """

    def __init__(self, description: str):
        self.description = description

    def value(self, file: File) -> Value | None:
        return None

    def expression(self, file: File) -> Leaf | None:
        """The single expression the name holds, when it has exactly one plain assignment."""
        return None


class _Lazy(_Binding):
    """Evaluated on first request only; asked for while computing itself (recursion), it is not followed."""

    def value(self, file: File) -> Value | None:
        if not hasattr(self, "_value"):
            self._value = None
            self._busy = True
            with file.recording() as self._deps:
                self._value = self._compute(file)
            self._busy = False
        else:
            file.cut_short += self._busy
            file.depend(self._deps)
        return self._value

    def _compute(self, file: File) -> Value | None:
        raise NotImplementedError


class _Statement(_Lazy):
    """A binding made by one statement, evaluated in the scope just before it."""

    def __init__(self, name: str, statement: ast.stmt, ancestors: tuple[ast.stmt, ...], scope: Scope):
        super().__init__(f"`{name}` (line {statement.lineno})")
        self.statement = statement
        self.ancestors = ancestors
        self.scope = scope

    def _node(self, file: File) -> tuple[Piece, cst.CSTNode] | None:
        return file.statement(self.statement, self.ancestors)


class _Assigned(_Statement):
    """`name = value`, `name: T = value`, or one name of `a, b = x, y` (element)."""

    def __init__(
        self, name: str, statement: ast.stmt, ancestors: tuple[ast.stmt, ...], scope: Scope, element: int | None = None
    ):
        super().__init__(name, statement, ancestors, scope)
        self.element = element

    def expression(self, file: File) -> Leaf | None:
        found = self._node(file)
        if found is None:
            return None
        piece, node = found
        value = getattr(node, "value", None)
        if value is not None and self.element is not None:
            value = _unpacked(value, self.element)
        return None if value is None else Leaf(value, piece, self.scope)

    def _compute(self, file: File) -> Value | None:
        leaf = self.expression(file)
        return None if leaf is None else evaluate(file, leaf)


def _unpacked(value: cst.BaseExpression, element: int) -> cst.BaseExpression | None:
    if not isinstance(value, (cst.Tuple, cst.List)) or any(isinstance(e, cst.StarredElement) for e in value.elements):
        return None
    return value.elements[element].value if element < len(value.elements) else None


class _Mutated(_Statement):
    """`name += x`, `name.append(x)`, `name.extend(x)`, `name.insert(i, x)` or `name[k] = x`, on what name held."""

    def __init__(
        self,
        name: str,
        statement: ast.stmt,
        ancestors: tuple[ast.stmt, ...],
        scope: Scope,
        previous: _Binding | None,
        how: str,
    ):
        super().__init__(name, statement, ancestors, scope)
        self.previous = previous
        self.how = how

    def _compute(self, file: File) -> Value:
        before = self.previous.value(file) if self.previous else None
        if before is None:
            unknown = (self.previous.description,) if self.previous else ()
            before = Value(entries=(), length=None, unknown=unknown)
        found = self._node(file)
        arguments = _mutation_arguments(found[1]) if found else ()
        if found is None or len(arguments) != (2 if self.how == "insert" else 1):
            return Value(entries=as_sequence(before).items, length=None, unknown=before.unknown)
        added = evaluate(file, Leaf(arguments[-1], found[0], self.scope))
        if self.how == "insert":
            return _inserted(before, int_literal(arguments[0]), added)
        if self.how == "append":
            return _concat(before, _items_of([added]))
        if self.how == "item":
            sequence = as_sequence(before)
            return Value(
                entries=sequence.items + _as_item(added, None),
                length=sequence.length,
                unknown=sequence.unknown + added.unknown,
            )
        return _concat(before, added)


def _mutation_arguments(node: cst.CSTNode) -> tuple[cst.BaseExpression, ...]:
    """`x += a`, `x[k] = a`, `x.append(a)` -> (a,); `x.insert(i, a)` -> (i, a)."""
    if isinstance(node, (cst.AugAssign, cst.Assign)):
        return (node.value,)
    if isinstance(node, cst.Expr) and isinstance(node.value, cst.Call):
        args = node.value.args
        return () if any(a.keyword or a.star for a in args) else tuple(a.value for a in args)
    return ()


def _inserted(before: Value, position: int | None, item: Value) -> Value:
    """list.insert: the items from `position` on move one place right; an unknown position (or
    positions that are not places in the list, when it nests) blurs them all."""
    sequence = as_sequence(before)
    length = sequence.length
    if position is not None and position < 0 and length is not None:
        position = max(length + position, 0)
    if position is None or position < 0 or sequence.nested or item.entries is not None:
        moved, at = _shifted(sequence.items, None), None
    else:
        moved = tuple(
            e if e.index is None or e.index < position else Entry(e.leaf, e.index + 1) for e in sequence.items
        )
        at = position if length is None else min(position, length)
    added, count = _child(item, at)
    return Value(
        entries=_unique_entries(moved + added),
        length=None if length is None or count is None else length + count,
        unknown=sequence.unknown + item.unknown,
        nested=sequence.nested or item.entries is not None,
    )


class _Joined(_Lazy):
    """A name bound differently on different paths (if / else, try / except)."""

    def __init__(self, name: str, alternatives: tuple[_Binding, ...]):
        super().__init__(f"`{name}`")
        self.alternatives = alternatives

    def _compute(self, file: File) -> Value:
        values = [(b.value(file), b.description) for b in self.alternatives]
        return _join([v if v is not None else Value(unknown=(d,)) for v, d in values])


class _Looped(_Lazy):
    """A name changed in a loop body: items the loop adds have no known index."""

    def __init__(self, name: str, before: _Binding | None, after: _Binding):
        super().__init__(f"`{name}`")
        self.before = before
        self.after = after

    def _compute(self, file: File) -> Value:
        before = (self.before.value(file) if self.before else None) or Value()
        after = self.after.value(file) or Value(unknown=(self.after.description,))
        kept = {(e.leaf.key, e.index) for e in before.entries or ()}
        added = tuple(e if (e.leaf.key, e.index) in kept else Entry(e.leaf, None) for e in after.entries or ())
        entries = None if before.entries is None and after.entries is None else (before.entries or ()) + added
        return _join([before, Value(leaves=after.leaves, entries=entries, unknown=after.unknown)])


class _Function(_Binding):
    """A def: calling it gives what its return statements give.

    It refers weakly to the scope it is defined in, which names it (a cycle
    otherwise); `File.scopes` keeps that scope alive while locating.
    """

    def __init__(
        self, statement: ast.FunctionDef | ast.AsyncFunctionDef, ancestors: tuple[ast.stmt, ...], enclosing: Scope
    ):
        super().__init__(f"`{statement.name}`, a function")
        self.statement = statement
        self.ancestors = ancestors
        self._enclosing = weakref.ref(enclosing)

    @property
    def enclosing(self) -> Scope:
        scope = self._enclosing()
        if scope is None:
            raise ReferenceError(f"the scope of {self.description} was dropped: File.scopes keeps it while locating")
        return scope


@dataclass(frozen=True)
class _Fields:
    """How a class of the module is built and flattened: its constructor's parameters in order,
    and the fields jax flattens, in jax's order."""

    init: tuple[str, ...]
    leaves: tuple[str, ...]


class _Class(_Binding):
    """A class statement of the module: called, a pytree node (`out_specs=Outputs(a=..., b=...)`)."""

    def __init__(self, statement: ast.ClassDef):
        super().__init__(f"`{statement.name}`, a class")
        self.fields = _pytree_fields(statement)


def _pytree_fields(statement: ast.ClassDef) -> _Fields | None:
    """The fields of a NamedTuple (flattened as a tuple, in field order) or of a dataclass registered
    by jax.tree_util.register_dataclass (in field order, or in the order of its data_fields=);
    None for any other class, or a field the locator cannot read (`field(metadata=...)`, may be static)."""
    declared = [
        s
        for s in statement.body
        if isinstance(s, ast.AnnAssign)
        and isinstance(s.target, ast.Name)
        and _ast_last(s.annotation.value if isinstance(s.annotation, ast.Subscript) else s.annotation)
        not in ("ClassVar", "InitVar", "KW_ONLY")
    ]
    names = tuple(s.target.id for s in declared if isinstance(s.target, ast.Name))
    if any(_ast_last(base) == "NamedTuple" for base in statement.bases):
        return _Fields(names, names)
    plain = not any(
        isinstance(s.value, ast.Call)
        and _ast_last(s.value.func) == "field"
        and any(k.arg not in ("default", "default_factory") for k in s.value.keywords)
        for s in declared
    )
    for decorator in statement.decorator_list:
        if _ast_last(decorator) == "register_dataclass":
            return _Fields(names, names) if plain else None
        if (
            isinstance(decorator, ast.Call)
            and _ast_last(decorator.func) == "partial"
            and decorator.args
            and _ast_last(decorator.args[0]) == "register_dataclass"
        ):
            data = next((k.value for k in decorator.keywords if k.arg == "data_fields"), None)
            fields = _strings(data)
            if fields is not None:
                return _Fields(names, fields) if plain else None
    return None


def _strings(node: ast.expr | None) -> tuple[str, ...] | None:
    """The items of a list or tuple of string literals (`data_fields=["a", "b"]`), else None."""
    if not isinstance(node, (ast.List, ast.Tuple)):
        return None
    strings = tuple(e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return strings if len(strings) == len(node.elts) else None


def _ast_last(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


# --- the flow walk (ast skeleton) ------------------------------------------------------------------


@dataclass(frozen=True)
class SiteStatement:
    """A statement holding kernel site(s), with the names as they are just before it."""

    statement: ast.stmt
    ancestors: tuple[ast.stmt, ...]
    scope: Scope
    function: str | None


Env = Mapping[str, _Binding]
_Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef  # a body walked for the sites it holds


class _Walk:
    """One pass over a body, in order: every binding statement makes a new (never mutated) env."""

    def __init__(self, file: File, parent: Scope | None, defining: Scope, function: str | None, record_sites: bool):
        self.file = file
        self.parent = parent  # scope seen by names not bound in this body
        self.defining = defining  # scope that nested defs will see (this body, once walked)
        self.function = function
        self.record_sites = record_sites
        self.returns: list[tuple[ast.Return, tuple[ast.stmt, ...], Scope]] = []
        self.nested: list[tuple[_Def, tuple[ast.stmt, ...]]] = []
        self.point: int | None = None  # in the module's walk, the top-level statement it is in

    def body(self, statements: Sequence[ast.stmt], env: Env, ancestors: tuple[ast.stmt, ...]) -> Env:
        for statement in statements:
            env = self.statement(statement, env, ancestors)
        return env

    def statement(self, statement: ast.stmt, env: Env, ancestors: tuple[ast.stmt, ...]) -> Env:
        scope = Scope(env, self.parent, self.point)
        if self.record_sites and id(statement) in self.file.plan.flagged:
            self.file.site_statements.append(SiteStatement(statement, ancestors, scope, self.function))
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
        if isinstance(statement, (ast.Try, ast.TryStar)):
            done = self.body(statement.orelse, self.body(statement.body, env, inner), inner)
            raised = _merge(env, done)
            handled = [
                self.body(h.body, _opaque(raised, [h.name] if h.name else [], "an exception"), inner)
                for h in statement.handlers
            ]
            return self.body(statement.finalbody, _merge(done, *handled), inner)
        if isinstance(statement, ast.Match):
            cases = [
                self.body(case.body, _opaque(env, _targets(case.pattern), "a match capture"), inner)
                for case in statement.cases
            ]
            return _merge(env, *cases)
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._keep_if_nested_sites(statement, ancestors)
            return {**env, statement.name: _Function(statement, ancestors, self.defining)}
        if isinstance(statement, ast.ClassDef):
            self._keep_if_nested_sites(statement, ancestors)
            return {**env, statement.name: _Class(statement)}
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            return _opaque(env, [(a.asname or a.name).split(".")[0] for a in statement.names], "an import")
        if isinstance(statement, ast.Return) and statement.value is not None:
            self.returns.append((statement, ancestors, scope))
        return env

    def _keep_if_nested_sites(self, statement: _Def, ancestors: tuple[ast.stmt, ...]) -> None:
        if self.record_sites and id(statement) in self.file.plan.enclosing:
            self.nested.append((statement, ancestors))

    def _simple(self, statement: ast.stmt, env: Env, ancestors: tuple[ast.stmt, ...], scope: Scope) -> Env:
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
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr in ("append", "extend", "insert")
            and isinstance(call.func.value, ast.Name)
        ):
            name = call.func.value.id
            return {**env, name: _Mutated(name, statement, ancestors, scope, env.get(name), call.func.attr)}
        return env

    def _assign(
        self, target: ast.expr, statement: ast.stmt, env: Env, ancestors: tuple[ast.stmt, ...], scope: Scope
    ) -> Env:
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
    names: list[str] = []
    for n in ast.walk(node) if node is not None else ():
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.append(n.id)
        elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
            names.append(n.name)
        elif isinstance(n, ast.MatchMapping) and n.rest:  # `case {"k": v, **rest}`
            names.append(n.rest)
    return names


def _opaque(env: Env, names: Iterable[str], why: str) -> Env:
    names = list(names)
    return {**env, **{name: _Binding(f"`{name}`, {why}") for name in names}} if names else env


def _merge(*envs: Env) -> Env:
    """The names after paths that may each have run: a name bound differently on two paths joins."""
    if all(env is envs[0] for env in envs):
        return envs[0]
    merged = {}
    for name in {name for env in envs for name in env}:
        found = [env[name] for env in envs if name in env]
        first = found[0]
        # Most names are bound alike on every path (set before the branch): no join to build.
        same = all(binding is first for binding in found)
        merged[name] = first if same else _Joined(name, unique(found, key=id))
    return merged


def _looped(before: Env, after: Env) -> Env:
    """A loop body runs any number of times: what it changes joins with what was there, indices blurred."""
    if after is before:
        return before
    return {
        **before,
        **{
            name: _Looped(name, before.get(name), binding)
            for name, binding in after.items()
            if before.get(name) is not binding
        },
    }


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Env:
    a = function.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, a.vararg, *a.kwonlyargs, a.kwarg) if p is not None]
    return _opaque({}, names, "a parameter")


@dataclass(frozen=True)
class TopLevel:
    """What the module's walk found in one top-level statement: its site statements at module level,
    and the defs and classes within it that hold sites (`walk_sites` walks them)."""

    index: int
    records: list[SiteStatement]
    nested: list[tuple[_Def, tuple[ast.stmt, ...]]]


def walk_module(file: File, statements: list[ast.stmt]) -> tuple[Scope, list[TopLevel]]:
    """The module's names, statement by statement (nothing is evaluated yet), and the top-level
    statements that hold sites."""
    module = Scope({}, None, len(statements))
    file.scopes.append(module)
    file.top_level = {id(statement): index for index, statement in enumerate(statements)}
    walk = _Walk(file, parent=None, defining=module, function=None, record_sites=True)
    env: Env = {}
    file.module_envs = [env]
    holding: list[TopLevel] = []
    for index, statement in enumerate(statements):
        walk.point = index
        records, nested = len(file.site_statements), len(walk.nested)
        env = walk.statement(statement, env, ())
        file.module_envs.append(env)
        if len(file.site_statements) > records or len(walk.nested) > nested:
            holding.append(TopLevel(index, file.site_statements[records:], walk.nested[nested:]))
    module.names = env
    return module, holding


def walk_sites(file: File, module: Scope, top: TopLevel) -> list[SiteStatement]:
    """The site statements of one top-level statement: the module-level ones the module's walk found,
    then those of the defs and classes in it, walked now."""
    before = len(file.site_statements)
    _walk_nested(file, top.nested, module, None)
    return top.records + file.site_statements[before:]


def binds(file: File, index: int, name: str) -> bool:
    """Whether top-level statement `index` binds `name` anew in the module's walk."""
    return file.module_envs[index + 1].get(name) is not file.module_envs[index].get(name)


def _walk_nested(
    file: File, nested: list[tuple[_Def, tuple[ast.stmt, ...]]], enclosing: Scope, function: str | None
) -> None:
    """Walk the defs and classes holding sites; a method sees the class's enclosing scope, not the class."""
    for statement, ancestors in nested:
        name = statement.name if function is None else f"{function}.{statement.name}"
        inner = ancestors + (statement,)
        if isinstance(statement, ast.ClassDef):
            walk = _Walk(file, parent=enclosing, defining=enclosing, function=name, record_sites=True)
            walk.body(statement.body, {}, inner)
            _walk_nested(file, walk.nested, enclosing, name)
            continue
        body = Scope({}, enclosing)
        file.scopes.append(body)
        walk = _Walk(file, parent=enclosing, defining=body, function=name, record_sites=True)
        body.names = walk.body(statement.body, _parameters(statement), inner)
        _walk_nested(file, walk.nested, body, name)


def _helper_value(file: File, function: _Function) -> Value | None:
    """What a module or local helper returns, joined over its return statements (walked once per def)."""
    key = id(function.statement)
    if key in file.helper_values:
        value, deps = file.helper_values[key]
        if deps is None:  # a recursive helper is not followed
            file.cut_short += 1
        else:
            file.depend(deps)
        return value
    file.helper_values[key] = (None, None)
    with file.recording() as deps:
        file.reads(function.statement, function.ancestors)  # its body's statements, walked here
        body = Scope({}, function.enclosing)
        file.scopes.append(body)
        walk = _Walk(file, parent=function.enclosing, defining=body, function=None, record_sites=False)
        body.names = walk.body(
            function.statement.body, _parameters(function.statement), function.ancestors + (function.statement,)
        )
        values = [_return_value(file, *returned) for returned in walk.returns]
        value = _join(values) if values else None
    file.helper_values[key] = (value, deps)
    return value


def _return_value(file: File, statement: ast.Return, ancestors: tuple[ast.stmt, ...], scope: Scope) -> Value:
    found = file.statement(statement, ancestors)
    value = getattr(found[1], "value", None) if found else None
    if found is None or value is None:
        return Value(unknown=(f"the return at line {statement.lineno}",))
    return evaluate(file, Leaf(value, found[0], scope))


# --- evaluating libcst expressions -----------------------------------------------------------------


def evaluate(file: File, leaf: Leaf) -> Value:
    """Follow an expression to the items it may hold; what cannot be followed is a leaf or unknown."""
    node = leaf.node
    if isinstance(node, cst.Name):
        return _evaluate_name(file, leaf, node)
    if isinstance(node, (cst.List, cst.Tuple, cst.Set)):
        return _elements(file, leaf, node.elements)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Multiply)):
        left, right = evaluate(file, leaf.at(node.left)), evaluate(file, leaf.at(node.right))
        if isinstance(node.operator, cst.Add):
            return _concat(left, right)
        repeated = [v for v in (left, right) if v.entries is not None]
        if repeated:
            return Value(entries=_shifted(repeated[0].items, None), length=None, unknown=repeated[0].unknown)
    if isinstance(node, cst.IfExp):
        return _join([evaluate(file, leaf.at(node.body)), evaluate(file, leaf.at(node.orelse))])
    if isinstance(node, cst.BooleanOperation):
        return _join([evaluate(file, leaf.at(node.left)), evaluate(file, leaf.at(node.right))])
    if isinstance(node, cst.NamedExpr):
        return evaluate(file, leaf.at(node.value))
    if isinstance(node, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
        return _comprehension(file, leaf, node)
    if isinstance(node, cst.Dict):
        return _dict_items(file, leaf, [(e.value, isinstance(e, cst.StarredDictElement)) for e in node.elements])
    if isinstance(node, cst.Subscript):
        return _subscript(file, leaf, node)
    if isinstance(node, cst.Call):
        return _evaluate_call(file, leaf, node)
    return Value(leaves=(leaf,))


def _evaluate_name(file: File, leaf: Leaf, node: cst.Name) -> Value:
    name = node.value
    if name in ("None", "True", "False"):
        return Value(leaves=(leaf,))
    binding = leaf.scope.lookup(name, file)
    if binding is None:
        return Value(unknown=(f"`{name}`",))
    value = binding.value(file)
    return value if value is not None else Value(unknown=(binding.description,))


def _elements(file: File, leaf: Leaf, elements: Sequence[cst.BaseElement]) -> Value:
    return _items_of(
        [evaluate(file, leaf.at(element.value)) for element in elements],
        [isinstance(element, cst.StarredElement) for element in elements],
    )


def _dict_items(file: File, leaf: Leaf, items: Sequence[tuple[cst.BaseExpression, bool]]) -> Value:
    """A dict of specs is a pytree whose leaf order is the sorted keys': items get no index."""
    entries: list[Entry] = []
    unknown: list[str] = []
    for node, spread_out in items:
        value = evaluate(file, leaf.at(node))
        spread = as_sequence(value).items if spread_out else _as_item(value, None)
        entries += _shifted(spread, None)
        unknown += value.unknown
    return Value(entries=_unique_entries(entries), length=None, unknown=unique(unknown))


def _comprehension(file: File, leaf: Leaf, node: cst.BaseSimpleComp | cst.DictComp) -> Value:
    names: list[str] = []
    loop: cst.CompFor | None = node.for_in
    while loop is not None:
        names += _cst_names(loop.target)
        loop = loop.inner_for_in
    shadowed = Scope(_opaque({}, names, "a comprehension variable"), leaf.scope)
    element = node.value if isinstance(node, cst.DictComp) else node.elt
    value = evaluate(file, Leaf(element, leaf.piece, shadowed))
    return Value(entries=_as_item(value, None), length=None, unknown=value.unknown)


def _cst_names(target: cst.CSTNode) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in _cst_names(element.value)]
    return []


def _subscript(file: File, leaf: Leaf, node: cst.Subscript) -> Value:
    base = evaluate(file, leaf.at(node.value))
    if base.entries is None:
        return Value(leaves=(leaf,))
    if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Slice):
        return Value(entries=_shifted(base.entries, None), length=None, unknown=base.unknown)
    index = _literal_index(node.slice) if not base.nested else None  # indices of leaves, not of items
    if index is not None and index < 0 and base.length is not None:
        index += base.length
    picked = tuple(e.leaf for e in base.entries if index is None or e.index in (index, None))
    return Value(leaves=picked or (leaf,), unknown=base.unknown)


def _literal_index(elements: Sequence[cst.SubscriptElement]) -> int | None:
    if len(elements) != 1 or not isinstance(elements[0].slice, cst.Index):
        return None
    return int_literal(elements[0].slice.value)


def _evaluate_call(file: File, leaf: Leaf, node: cst.Call) -> Value:
    binding = None
    if isinstance(node.func, cst.Name):
        name = node.func.value
        binding = leaf.scope.lookup(name, file)
        if isinstance(binding, _Function):
            value = _helper_value(file, binding)
            return value if value is not None else Value(unknown=(f"what `{name}()` returns",))
        positional = [a for a in node.args if not a.keyword and not a.star]
        if binding is None and name in ("list", "tuple") and len(node.args) == 1 == len(positional):
            return as_sequence(evaluate(file, leaf.at(positional[0].value)))
        if binding is None and name == "dict":
            return _dict_items(file, leaf, [(a.value, a.star == "**") for a in node.args if a.keyword or a.star])
    if isinstance(binding, _Class) or _is_class_name(node.func, file):
        arguments = [(arg, evaluate(file, leaf.at(arg.value))) for arg in node.args]
        if isinstance(binding, _Class) or any(_holds_block_spec(value, file) for _, value in arguments):
            return _constructed(arguments, binding.fields if isinstance(binding, _Class) else None)
    return Value(leaves=(leaf,))


_NOT_CONTAINERS = frozenset({"BlockSpec", "Buffered", "GridSpec", "PrefetchScalarGridSpec"})
_CONSTANTS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


def _is_class_name(func: cst.BaseExpression, file: File) -> bool:
    """`Outputs`, `types.Outputs`: a capitalised callee that is not one of Pallas's own classes."""
    parts = dotted(func)
    last = file.names.imported.get(parts[-1], parts[-1]) if parts else ""
    return last[:1].isupper() and last not in _NOT_CONTAINERS and not last.endswith("GridSpec")


def _holds_block_spec(value: Value, file: File) -> bool:
    leaves = value.leaves + tuple(e.leaf for e in value.entries or ())
    return any(
        isinstance(leaf.node, cst.Call) and (dotted(leaf.node.func) or ("",))[-1] in _block_spec_names(file)
        for leaf in leaves
    )


def _block_spec_names(file: File) -> frozenset[str]:
    return frozenset({"BlockSpec"} | {local for local, name in file.names.imported.items() if name == "BlockSpec"})


def _constructed(arguments: list[tuple[cst.Arg, Value]], fields: _Fields | None) -> Value:
    """A pytree node made by calling its class, `Outputs(a=spec_a, b=spec_b)`: the arguments are its
    children. Where the class says how jax flattens it (`fields`), each argument takes its field's
    place in that order and arguments outside it (static fields) are left out; else the arguments
    are items without an index, and constants among them are not items at all."""
    if fields is not None and any(arg.star for arg, _ in arguments):
        fields = None
    given: dict[str, Value] = {}
    loose: list[Value] = []
    positional = [value for arg, value in arguments if arg.keyword is None]
    named = [(arg.keyword.value, value) for arg, value in arguments if arg.keyword is not None]
    for name, value in [*zip(fields.init if fields else (), positional), *named]:
        if fields is not None and name in fields.init:
            given[name] = value
        else:
            loose.append(value)
    loose += positional[len(fields.init) if fields else 0 :]
    if fields is None or loose or any(name not in given for name in fields.leaves):
        children = [v for v in (*given.values(), *loose) if not _is_constant(v)]
        return Value(
            entries=_shifted(_items_of(children).items, None),
            length=None,
            unknown=unique(u for v in children for u in v.unknown),
            nested=True,
        )
    return _items_of(given[name] for name in fields.leaves)


def _is_constant(value: Value) -> bool:
    return value.entries is None and bool(value.leaves) and all(isinstance(l.node, _CONSTANTS) for l in value.leaves)


def follow(file: File, leaf: Leaf | None) -> Leaf | None:
    """Through names with one plain assignment, to the expression that defines them."""
    for _ in range(16):
        if leaf is None or not isinstance(leaf.node, cst.Name):
            return leaf
        binding = leaf.scope.lookup(leaf.node.value, file)
        expression = binding.expression(file) if binding is not None else None
        if expression is None:
            return leaf
        leaf = expression
    return leaf
