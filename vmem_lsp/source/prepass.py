"""Which statements hold kernel sites, and how this module spells pallas_call: an `ast` prepass.

A file without a kernel stops here, before any libcst parse; in the others,
the flow walk (nameflow.py) records only the flagged statements and walks only
the defs and classes around them.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping

from .statements import first_line

_BODY_FIELDS = ("body", "orelse", "handlers", "finalbody", "cases")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class Names:
    """How this module spells what the locator looks for."""
    imported: Mapping[str, str]        # local name -> imported name, from `from m import a as b`
    pallas: frozenset[str]             # names meaning pallas_call
    partials: frozenset[str]           # names bound to functools.partial(pallas_call, ...)


@dataclass(frozen=True)
class Plan:
    """What the walk must look at: statements holding a site, and the defs around them."""
    names: Names
    flagged: frozenset[int]            # ids of innermost statements referring to pallas_call
    enclosing: frozenset[int]          # ids of defs / classes containing a flagged statement
    called_partials: frozenset[str]    # partial aliases that are called somewhere: the calls are the sites


def make_plan(statements: list[ast.stmt], lines: list[str]) -> Plan:
    texts = ["\n".join(lines[first_line(s) - 1:s.end_lineno]) for s in statements]
    names = _kernel_names(statements, texts)
    refs = names.pallas | names.partials
    pattern = _words(refs)
    flagged: set[int] = set()
    enclosing: set[int] = set()
    called: set[str] = set()
    for statement, text in zip(statements, texts):
        if pattern.search(text):
            _flag(statement, (), refs, names.partials, flagged, enclosing, called)
    return Plan(names, frozenset(flagged), frozenset(enclosing), frozenset(called))


def _words(names: Iterable[str]) -> re.Pattern[str]:
    return re.compile(r"\b(?:%s)\b" % "|".join(map(re.escape, sorted(names))))


def _kernel_names(statements: list[ast.stmt], texts: list[str]) -> Names:
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
            return Names(imported, frozenset(pallas), frozenset(partials))


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
