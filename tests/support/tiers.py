"""The test tiers, and the tag that puts a test in one by what it calls.

A helper that starts a process says which kind with `@starts(kind)`;
conftest.py's collection hook follows the names a test (and its fixtures, and
the test module's own functions they call) reach, and marks the test with
every kind it finds. A test that reaches none is `fast`, and a guard holds it
to that: in a fast test, starting a process or listening on a socket fails."""

from __future__ import annotations

import dis
import functools
import importlib
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

# The markers, as pyproject.toml declares them.
COMPILER, EDITOR, CLUSTER, SLOW, FAST = "compiler", "editor", "cluster", "slow", "fast"
KINDS = (COMPILER, EDITOR, CLUSTER)

# What other packages' names start, by name: vmem_lsp's worker client (tests make one
# themselves to hold a worker across requests) and pytest-lsp's client, which a test
# starts itself when it must see the server's answer to `initialize`.
STARTERS = {"WorkerClient": COMPILER, "make_test_lsp_client": EDITOR}

# Starts a process of no tagged kind (subprocess, multiprocessing): COMPILER, unless a mark says which.
SPAWNS = "spawns"
TESTS = Path(__file__).resolve().parent.parent

T = TypeVar("T")


def starts(kind: str) -> Callable[[T], T]:
    """Tag a helper (function or class) that starts a process of `kind`."""
    assert kind in KINDS, kind

    def tag(helper: T) -> T:
        helper.tier = kind  # type: ignore[attr-defined]
        return helper

    return tag


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    """A function's code and that of the lambdas, closures and comprehensions in it."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def unwrapped(function):
    """The test's own function under hypothesis' @given or a functools.wraps decorator."""
    function = getattr(function, "__func__", function)
    inner = getattr(getattr(function, "hypothesis", None), "inner_test", None)
    if inner is not None:
        function = inner
    while hasattr(function, "__wrapped__"):
        function = function.__wrapped__
    return function


IMPORT_NAME = dis.opmap["IMPORT_NAME"]


@functools.cache
def _import_names(code: types.CodeType) -> tuple[str, ...]:
    """The names of the modules `code` imports. Disassembling is most of the cost of marking
    the tests (1,700 of them, each with its fixtures and helpers, which many share): once per
    code object."""
    if IMPORT_NAME not in code.co_code[::2]:  # the opcodes (2 bytes a unit): most functions import nothing
        return ()
    return tuple(i.argval for i in dis.get_instructions(code) if i.opname == "IMPORT_NAME")


def _imported(code: types.CodeType) -> list[types.ModuleType]:
    """The modules a function imports in its body (`from support.lsp_client
    import running_server` inside a test): tests/support is imported to look,
    anything else is looked at only if loaded already."""
    found = []
    for name in _import_names(code):
        module = sys.modules.get(name)
        if module is None and name.split(".")[0] == "support":
            module = importlib.import_module(name)
        if module is not None:
            found.append(module)
    return found


def _spawns(module: types.ModuleType) -> bool:
    return module.__name__.split(".")[0] in ("subprocess", "multiprocessing")


def kinds_reached(function, seen: set | None = None) -> set[str]:
    """The kinds of process `function` starts: its own tag and those of the
    helpers it names (support.tiers.starts; STARTERS for other packages'),
    followed through the functions of tests/ it calls (a test module's own
    helper that calls run_cli starts the CLI too); and SPAWNS when it names
    subprocess or multiprocessing itself."""
    seen = set() if seen is None else seen
    function = unwrapped(function)
    code, names = getattr(function, "__code__", None), getattr(function, "__globals__", None)
    if code is None or names is None or code in seen:
        return set()
    seen.add(code)
    kinds: set[str] = {kind for kind in KINDS if getattr(function, "tier", None) == kind}
    for each in _code_objects(code):
        modules = _imported(each)
        if any(_spawns(m) for m in modules):
            kinds.add(SPAWNS)
        for name in each.co_names:
            if name in STARTERS:
                kinds.add(STARTERS[name])
            target = names.get(name)
            if target is None:
                target = next((getattr(m, name) for m in modules if hasattr(m, name)), None)
            if isinstance(target, types.ModuleType):
                if _spawns(target):
                    kinds.add(SPAWNS)
            elif isinstance(target, (types.FunctionType, type)):
                tier = getattr(target, "tier", None)
                if tier in KINDS:
                    kinds.add(tier)
                elif isinstance(target, types.FunctionType) and Path(target.__code__.co_filename).is_relative_to(TESTS):
                    kinds |= kinds_reached(target, seen)
    return kinds
