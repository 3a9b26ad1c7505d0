"""Which statements hold kernel sites, and how this module spells pallas_call: an `ast` prepass.

A file without a kernel stops here, before any libcst parse; in the others,
the flow walk (nameflow.py) records only the flagged statements and walks only
the defs and classes around them.

What a top-level statement contributes depends only on its text (and on the
names looked for), so it is cached by text: after an edit, only the edited
statements are walked again, even when the edit moved the others.
"""

from __future__ import annotations

import ast
import itertools
import re
import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from .statements import first_line, last_line

_BODY_FIELDS = ("body", "orelse", "handlers", "finalbody", "cases")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

_Path = tuple[int, ...]  # a nested statement: child indices (in _child_statements' order) from the top-level one
_TextKey = tuple[str, int, int, int]
_PlacedKey = tuple[int, str, int, int, int]  # the first line, then a _TextKey


@dataclass(frozen=True)
class Names:
    """How this module spells what the locator looks for."""

    imported: Mapping[str, str]  # local name -> imported name, from `from m import a as b`
    pallas: frozenset[str]  # names meaning pallas_call
    partials: frozenset[str]  # names bound to functools.partial(pallas_call, ...)


@dataclass(frozen=True)
class Plan:
    """What the walk must look at: statements holding a site, and the defs around them."""

    names: Names
    flagged: frozenset[int]  # ids of innermost statements referring to pallas_call
    enclosing: frozenset[int]  # ids of defs / classes containing a flagged statement
    called_partials: frozenset[str]  # partial aliases that are called somewhere: the calls are the sites
    # Each top-level statement's text and where it is: (first line, text, line of the statement itself
    # after its decorators, first column, end column). Equal keys, equal ast (locate.py caches by them).
    keys: tuple[_PlacedKey, ...] = ()


@dataclass(frozen=True)
class _Flags:
    """What _flag finds in one top-level statement, by path, so that it applies to any statement of that text."""

    flagged: frozenset[_Path]
    enclosing: frozenset[_Path]
    called: frozenset[str]


class _Recent:
    """What the last few plans used, by key (a statement's text, with where in it the statement starts
    and ends: `a; b` share a line): the file being edited stays in it, and memory stays that of a few
    files however long the editing (a key holds a whole function's text)."""

    def __init__(self, plans: int = 4):
        self.plans: deque[dict] = deque(maxlen=plans)

    def start(self) -> None:
        self.plans.appendleft({})

    def get(self, key, compute):
        current = self.plans[0]
        if key not in current:
            older = next((plan for plan in itertools.islice(self.plans, 1, None) if key in plan), None)
            current[key] = older[key] if older is not None else compute()
        return current[key]


_learners_by_text = _Recent()
_flags_by_text = _Recent()
# A top-level statement's text and key, kept as long as its ast node lives: statements.py keeps a node
# only while its lines are unchanged, so a keystroke joins and hashes the text of the statement it
# edited, not the whole file's again.
_placed: weakref.WeakKeyDictionary[ast.stmt, tuple[str, _TextKey, _PlacedKey]] = weakref.WeakKeyDictionary()


def clear_cache() -> None:
    _learners_by_text.plans.clear()
    _flags_by_text.plans.clear()
    _placed.clear()


def _place(statement: ast.stmt, lines: list[str]) -> tuple[str, _TextKey, _PlacedKey]:
    """The statement's text (its whole lines), its key, and that key with the first line (Plan.keys)."""
    placed = _placed.get(statement)
    if placed is None:
        first = first_line(statement)
        text = "\n".join(lines[first - 1 : last_line(statement)])
        key = (text, statement.lineno - first, statement.col_offset, statement.end_col_offset or 0)
        placed = _placed[statement] = (text, key, (first, *key))
    return placed


def make_plan(statements: list[ast.stmt], lines: list[str]) -> Plan:
    placed = [_place(s, lines) for s in statements]
    texts = [text for text, _, _ in placed]
    keys = [key for _, key, _ in placed]
    _learners_by_text.start()
    _flags_by_text.start()
    names = _kernel_names(statements, texts, keys)
    refs = names.pallas | names.partials
    pattern = _Words(refs)
    flagged: set[int] = set()
    enclosing: set[int] = set()
    called: set[str] = set()
    for statement, text, key in zip(statements, texts, keys):
        if pattern.search(text):
            flags = _flags_by_text.get(
                (key, refs, names.partials), lambda s=statement, t=text: _flags(s, t, refs, names.partials)
            )
            flagged.update(id(_at(statement, path)) for path in flags.flagged)
            enclosing.update(id(_at(statement, path)) for path in flags.enclosing)
            called |= flags.called
    return Plan(names, frozenset(flagged), frozenset(enclosing), frozenset(called), tuple(p[2] for p in placed))


def _flags(statement: ast.stmt, text: str, refs: frozenset[str], partials: frozenset[str]) -> _Flags:
    flagged: set[_Path] = set()
    enclosing: set[_Path] = set()
    called: set[str] = set()
    _flag(statement, (), (), _Mentions(text, first_line(statement), refs), refs, partials, flagged, enclosing, called)
    return _Flags(frozenset(flagged), frozenset(enclosing), frozenset(called))


class _Mentions:
    """Whether a statement's lines may mention one of the names, to skip walking those that cannot:
    a name is written within one line, literally (unless not ASCII: `ｘ` is read as `x`)."""

    def __init__(self, text: str, first: int, names: frozenset[str]):
        self.first = first
        self.counts = [0]  # lines that mention a name, before each line
        for line in text.split("\n"):
            mentions = not line.isascii() or any(name in line for name in names)
            self.counts.append(self.counts[-1] + mentions)

    def any(self, statement: ast.stmt) -> bool:
        first, end = first_line(statement) - self.first, last_line(statement) - self.first + 1
        return self.counts[min(end, len(self.counts) - 1)] > self.counts[max(first, 0)]


def _at(statement: ast.stmt, path: _Path) -> ast.stmt:
    for index in path:
        statement = list(_child_statements(statement))[index]
    return statement


class _Words:
    """Whether a text holds one of the names as a word."""

    def __init__(self, names: Iterable[str]):
        self.names = sorted(names)
        self.pattern = re.compile(r"\b(?:{})\b".format("|".join(map(re.escape, self.names))))

    def search(self, text: str) -> bool:
        """As `pattern.search(text)`, which can only match where one of the names starts: try it there
        alone (`\\b` looks at the real neighbours), not at every character of a long statement."""
        for name in self.names:
            at = text.find(name)
            while at >= 0:
                if self.pattern.match(text, at):
                    return True
                at = text.find(name, at + 1)
        return False


def _kernel_names(statements: list[ast.stmt], texts: list[str], keys: list[_TextKey]) -> Names:
    """Imports and aliases of pallas_call (`pc = pl.pallas_call`, `call = partial(pl.pallas_call, ...)`)."""
    imported = {a.asname or a.name: a.name for s in statements if isinstance(s, ast.ImportFrom) for a in s.names}
    pallas = {"pallas_call"} | {local for local, name in imported.items() if name == "pallas_call"}
    partials: set[str] = set()
    while True:
        known = len(pallas) + len(partials)
        pattern = _Words(pallas | partials)
        for statement, text, key in zip(statements, texts, keys):
            if pattern.search(text):
                for nested in _learners_by_text.get(key, lambda statement=statement: _learners(statement)):
                    _learn_names(nested, imported, pallas, partials)
        if len(pallas) + len(partials) == known:
            return Names(imported, frozenset(pallas), frozenset(partials))


def _learners(statement: ast.stmt) -> tuple[ast.stmt, ...]:
    """The statements within that _learn_names may learn from, in order (it reads names, never positions):
    imports, and assignments of a name (`pc = pl.pallas_call`) or of a call whose first argument is one
    (`call = partial(pl.pallas_call, ...)`); it learns nothing from other assignments, which are most."""
    return tuple(
        nested
        for nested in _statements_within(statement)
        if isinstance(nested, ast.ImportFrom)
        or isinstance(nested, (ast.Assign, ast.AnnAssign))
        and _may_alias(nested.value)
    )


def _may_alias(value: ast.expr | None) -> bool:
    """Whether _learn_names may learn from an assignment of `value`: a name, or a call of one with a name first."""
    if isinstance(value, ast.Call):
        return isinstance(value.func, (ast.Name, ast.Attribute)) and bool(value.args) and _is_name(value.args[0])
    return _is_name(value)


def _is_name(node: ast.expr | None) -> bool:
    return isinstance(node, (ast.Name, ast.Attribute))


def _learn_names(statement: ast.stmt, imported: dict[str, str], pallas: set[str], partials: set[str]) -> None:
    if isinstance(statement, ast.ImportFrom):
        for alias in statement.names:
            imported[alias.asname or alias.name] = alias.name
            if alias.name == "pallas_call":
                pallas.add(alias.asname or alias.name)
    if not isinstance(statement, (ast.Assign, ast.AnnAssign)) or statement.value is None:
        return
    value = statement.value
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    bound = {name for t in targets if (name := _ast_last_name(t, {})) is not None}
    if _ast_last_name(value, imported) in pallas:
        pallas.update(bound)
    elif _ast_is_partial_of_pallas(value, imported, pallas):
        partials.update(bound)


def _ast_last_name(node: ast.AST, imported: Mapping[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return imported.get(node.id, node.id)
    return node.attr if isinstance(node, ast.Attribute) else None


def _ast_is_partial_of_pallas(node: ast.AST, imported: Mapping[str, str], pallas: set[str]) -> bool:
    return (
        isinstance(node, ast.Call)
        and _ast_last_name(node.func, imported) == "partial"
        and bool(node.args)
        and _ast_last_name(node.args[0], imported) in pallas
    )


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


def _flag(
    statement: ast.stmt,
    path: _Path,
    chain: tuple[_Path, ...],
    mentions: _Mentions,
    refs: frozenset[str],
    partials: frozenset[str],
    flagged: set[_Path],
    enclosing: set[_Path],
    called: set[str],
) -> None:
    if not mentions.any(statement):  # no name of refs (partials are among them) within
        return
    refers = False
    for node in _own_parts(statement):
        if isinstance(node, ast.Name) and node.id in refs or isinstance(node, ast.Attribute) and node.attr in refs:
            refers = True
        elif isinstance(node, ast.Call) and (name := _ast_last_name(node.func, {})) in partials and name is not None:
            called.add(name)
    if refers:
        flagged.add(path)
        enclosing.update(chain)
    inner = chain + (path,) if isinstance(statement, _SCOPES) else chain
    for index, child in enumerate(_child_statements(statement)):
        _flag(child, path + (index,), inner, mentions, refs, partials, flagged, enclosing, called)
