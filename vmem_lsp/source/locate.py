"""Find every pallas_call of a Python source, and what decides its VMEM use, without running it.

Speed is the design constraint: a language server relocates on every edit, and a
full libcst parse of a long kernel file, with positions, takes far longer than a
keystroke may. So the work is split by what each tool does cheaply, one module a layer:

* statements.py: `ast` (fast, C) splits the module into top-level statements,
  surviving syntax errors statement by statement; after an edit, only the
  lines between the unchanged statements around it are parsed again;
* prepass.py: `ast` tells which statements mention pallas_call (and how this
  module spells it), cached by statement text; a file without any stops there;
* nameflow.py: names are followed by a flow walk over the `ast` skeleton of
  the enclosing function (then module): every assignment, `+=`, `.append` /
  `.extend` and `x[k] = ...` makes a lazy binding, branches join, loops blur
  indices; a binding is parsed and evaluated only when a site asks for it;
* pieces.py: libcst parses only the single statements a kernel site actually
  needs (the call itself, the assignments of the names it uses, the helpers it
  calls), each on its own, cached by text, and gives the nodes, their exact
  spans (PositionProvider on that small module) and the text as written;
* sites.py: the pallas_call's arguments become KernelSite, BlockSpecSite and
  ScratchSite (model.py), plain data.

This module ties them together: `locate` is the one entry point. It keeps the sites of each
top-level statement (`_SiteCache`) with what their computation read (nameflow.File): a keystroke
in one function rebuilds the sites of that function only.
"""

from __future__ import annotations

import ast
import functools
import gc
import re
import threading
import traceback
import weakref
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from . import pieces, prepass, statements
from .model import KernelSite
from .nameflow import Deps, File, SiteStatement, binds, walk_module, walk_sites
from .prepass import make_plan
from .sites import kernel_site as _kernel_site  # a module global: tests/data/faults plants a bug in its place
from .sites import site_calls
from .statements import first_line, last_line, top_level_statements
from .templates import ModuleFunctions

__all__ = ["LocateResult", "clear_cache", "locate"]


@dataclass(frozen=True)
class LocateResult:
    """The kernel sites of one source; its syntax error if it has one (the user's
    to fix); and the traceback of the locator's own failure, which is never the
    user's: the edges log it and count it (server) or exit 2 (CLI)."""

    sites: tuple[KernelSite, ...]
    error: str | None = None
    internal_error: str | None = None


def clear_cache() -> None:
    """Forget what earlier calls parsed (benchmarks measure a cold start with it)."""
    pieces.clear_cache()
    prepass.clear_cache()
    statements.clear_cache()
    _sites_by_statement.clear()


def locate(source: str, path: str) -> LocateResult:
    """Every pallas_call site of `source`, in source order. Never raises: an editor
    buffer can hold anything, and a bug of ours comes back as `internal_error`."""
    try:
        with _collector_paused():
            return _locate(source, path)
    except Exception:
        return LocateResult((), internal_error=traceback.format_exc())


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Parsing allocates tens of thousands of tracked objects, and the collections they trigger
    walk the whole heap, which can more than double a locate. Nothing a call allocates is cyclic
    (see `_Binding` in nameflow.py), so reference counting frees it all without the collector."""
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
    module, error = top_level_statements(text, lines, path)
    plan = make_plan(module, lines)
    if not plan.flagged:
        return LocateResult((), error)
    sites = _sites(path, lines, plan, module, reuse=_sites_by_statement.begin(path))
    if sites is None:  # a recursion was cut short where sites were kept: all afresh, in order
        sites = _sites(path, lines, plan, module, reuse=False)
    assert sites is not None
    sites.sort(key=lambda site: (site.span.start_line, site.span.start_col))
    if error is None:  # VMEM020's suggestion, here where the statements are parsed already, not per keystroke
        functions = ModuleFunctions(module, functools.partial(_words_of, lines))
        sites = [replace(site, example_calls=_name(functions.reaching(site.span.start_line))) for site in sites]
    return LocateResult(tuple(sites), error)


def _name(function: ast.FunctionDef | ast.AsyncFunctionDef | None) -> str | None:
    return function.name if function is not None else None


_WORD = re.compile(r"\w+")
# The words of each top-level function's text, kept as long as its ast node lives (statements.py
# keeps a node only while its lines are unchanged); None where the text is not all ASCII.
_words: weakref.WeakKeyDictionary[ast.AST, frozenset[str] | None] = weakref.WeakKeyDictionary()


def _words_of(lines: list[str], function: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str] | None:
    """The words of `function`'s text: the function a keystroke made new is walked only where one
    of them is a name the search follows. In ASCII text an identifier is a word as written;
    elsewhere the parser's NFKC may have changed it (None: walked)."""
    if function not in _words:
        text = "\n".join(lines[first_line(function) - 1 : last_line(function)])
        _words[function] = frozenset(_WORD.findall(text)) if text.isascii() else None
    return _words[function]


def _sites(
    path: str, lines: list[str], plan: prepass.Plan, module: list[ast.stmt], reuse: bool
) -> list[KernelSite] | None:
    """The sites of each top-level statement that holds some: kept ones where what they read is
    unchanged, the others built; the built ones kept for the next text.

    A value asked for while being computed (a recursion: `a = f()` where f returns `a`) is not
    followed, so what it gives depends on which site asked first: where that happens nothing is
    kept, and the path locates afresh (`reuse` False) until a text of it has no such recursion; None
    where it happens and some sites were kept (the caller locates afresh)."""
    file = File(path, lines, plan)
    scope, holding = walk_module(file, module)
    facts = _Facts(file, plan)
    found: list[KernelSite] = []
    built: list[tuple[tuple, _Reads | None, list[KernelSite]]] = []
    kept = False
    for top in holding:
        key = (path, plan.keys[top.index], facts.names)
        sites = _sites_by_statement.get(key, facts) if reuse else None
        if sites is not None:
            kept = True
        else:
            with file.recording() as deps:
                sites = [site for record in walk_sites(file, scope, top) for site in _kernel_sites(file, record)]
            built.append((key, facts.reads(top.index, deps), sites))
        found += sites
    _sites_by_statement.done(path, built, cut_short=file.cut_short > 0)
    return None if file.cut_short and kept else found


_Key = tuple[int, str, int, int, int]  # a top-level statement: prepass.Plan.keys
_Lookup = tuple[str, _Key | None, tuple[_Key, ...]]  # a name, where, the statements binding it before there


@dataclass(frozen=True)
class _Reads:
    """What building the sites of a top-level statement read beyond it: other top-level statements,
    and names looked up at module level: each with the point it was looked up at (None: at the end)
    and the statements that bound it before there, in order."""

    statements: frozenset[_Key]
    lookups: tuple[_Lookup, ...]


class _Facts:
    """The module as the sites' caches see it: its statements by key, who binds a name where, the
    names the locator looks for (equal for every site kept: a site's text depends on them)."""

    def __init__(self, file: File, plan: prepass.Plan):
        self.file = file
        self.keys = plan.keys
        self.index = {key: index for index, key in enumerate(plan.keys)}
        names = plan.names
        self.names = (tuple(sorted(names.imported.items())), names.pallas, names.partials, plan.called_partials)
        self._binders: dict[str, list[int]] = {}

    def bound_before(self, name: str, point: int) -> tuple[_Key, ...]:
        if name not in self._binders:
            self._binders[name] = [i for i in range(len(self.keys)) if binds(self.file, i, name)]
        return tuple(self.keys[i] for i in self._binders[name] if i < point)

    def reads(self, index: int, deps: Deps) -> _Reads | None:
        """`deps` (nameflow.File's indices) as keys, which the next texts can be checked against."""
        statements, lookups = set(), []
        for dep in deps:
            if isinstance(dep, int):
                if dep < 0:
                    return None
                statements.add(self.keys[dep])
                continue
            name, point = dep
            if point is None:
                return None
            at = self.keys[point] if point < len(self.keys) else None
            lookups.append((name, at, self.bound_before(name, point)))
        statements.discard(self.keys[index])
        return _Reads(frozenset(statements), tuple(lookups))

    def unchanged(self, reads: _Reads) -> bool:
        if not all(key in self.index for key in reads.statements):
            return False
        for name, at, bound in reads.lookups:
            point = len(self.keys) if at is None else self.index.get(at)
            if point is None or self.bound_before(name, point) != bound:
                return False
        return True


class _SiteCache:
    """The sites of top-level statements, by (path, the statement's key, the names looked for), each
    with what it read (`_Reads`). Only what the last few locates used is kept: the file being edited
    stays in it, and memory stays that of a few files however long the editing."""

    def __init__(self, locates: int = 4, per_key: int = 4):
        self.generations: deque[dict[tuple, list[tuple[_Reads, list[KernelSite]]]]] = deque(maxlen=locates)
        self.per_key = per_key
        self.cut_short: set[str] = set()  # paths whose last text had a recursion cut short: located afresh
        self.lock = threading.Lock()  # the CLI's engine and the server's fallback may locate from two threads

    def clear(self) -> None:
        with self.lock:
            self.generations.clear()
            self.cut_short.clear()

    def begin(self, path: str) -> bool:
        """A locate of `path` starts: whether it may reuse kept sites."""
        with self.lock:
            self.generations.appendleft({})  # what this locate uses or builds
            return path not in self.cut_short

    def get(self, key: tuple, facts: _Facts) -> list[KernelSite] | None:
        with self.lock:
            for generation in self.generations:
                for reads, sites in generation.get(key, ()):
                    if facts.unchanged(reads):
                        self._put(key, reads, sites)
                        return sites
        return None

    def done(self, path: str, built: list[tuple[tuple, _Reads | None, list[KernelSite]]], cut_short: bool) -> None:
        """Keep what a locate built, unless a recursion was cut short in it."""
        with self.lock:
            if cut_short:
                self.cut_short.add(path)
                return
            self.cut_short.discard(path)
            for key, reads, sites in built:
                if reads is not None:
                    self._put(key, reads, sites)

    def _put(self, key: tuple, reads: _Reads, sites: list[KernelSite]) -> None:
        if not self.generations:
            self.generations.appendleft({})
        entries = self.generations[0].setdefault(key, [])
        if not any(kept is reads for kept, _ in entries):
            entries.insert(0, (reads, sites))
            del entries[self.per_key :]


_sites_by_statement = _SiteCache()


def _kernel_sites(file: File, record: SiteStatement) -> list[KernelSite]:
    found = file.statement(record.statement, record.ancestors)
    if found is None:
        return []
    piece, statement = found
    return [
        _kernel_site(file, call, piece, record.function) for call in site_calls(file, statement, piece, record.scope)
    ]
