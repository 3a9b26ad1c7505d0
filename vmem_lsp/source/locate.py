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

This module ties them together: `locate` is the one entry point.
"""

from __future__ import annotations

import ast
import functools
import gc
import re
import traceback
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from . import pieces, prepass, statements
from .model import KernelSite
from .nameflow import File, SiteStatement, walk_module
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
    file = File(path, lines, plan)
    walk_module(file, module)
    sites = [site for record in file.site_statements for site in _kernel_sites(file, record)]
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


def _kernel_sites(file: File, record: SiteStatement) -> list[KernelSite]:
    found = file.statement(record.statement, record.ancestors)
    if found is None:
        return []
    piece, statement = found
    return [
        _kernel_site(file, call, piece, record.function) for call in site_calls(file, statement, piece, record.scope)
    ]
