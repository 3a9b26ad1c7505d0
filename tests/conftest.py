"""Fixtures and hooks only; what the tests share otherwise is in tests/support.

The tiers are chosen here, by what a test uses, not by lists of files: a
test is marked with the kind of every process its fixtures and the functions
it calls start (helpers say which with support.tiers.starts), and with its
module's `pytestmark`. A test with no kind is `fast`, and a guard makes that a
fact: a fast test that starts a process or listens on a socket fails, naming
what it started."""

from __future__ import annotations

import atexit
import multiprocessing.process
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import run_json
from support.tiers import COMPILER, FAST, KINDS, SLOW, SPAWNS, TESTS, kinds_reached, starts, unwrapped

# The tests' own direct compiles (libtpu in pytest's processes and theirs) leave no log files in
# /tmp/tpu_logs either: one folder per test process, removed at its exit (the workers they start
# inherit it); test_a_worker_leaves_no_compiler_log_files_behind holds vmem-lsp's own default.
if "TPU_LOG_DIR" not in os.environ:
    os.environ["TPU_LOG_DIR"] = tempfile.mkdtemp(prefix="vmem-lsp-tests-tpu-logs-")
    atexit.register(shutil.rmtree, os.environ["TPU_LOG_DIR"], True)

# ---- tiers ------------------------------------------------------------------------------------


def _fixture_functions(item: pytest.Item) -> Iterator:
    """The definitions of the fixtures of tests/ that `item` uses, directly or through another fixture."""
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        for definition in info.name2fixturedefs.get(name, ()) if info else ():
            code = getattr(unwrapped(definition.func), "__code__", None)
            if code is not None and Path(code.co_filename).is_relative_to(TESTS):
                yield definition


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        kinds = kinds_reached(getattr(item, "function", None))
        group = None
        for definition in _fixture_functions(item):
            found = kinds_reached(definition.func)
            kinds |= found
            # One process per scope, not per xdist worker: the tests that share a session or module
            # fixture that starts one run on one worker (pytest -n 2 --dist loadgroup).
            if found and definition.scope == "session":
                group = group or definition.argname
            elif found and definition.scope == "module" and group is None:
                group = item.nodeid.split("::")[0]
        marked = {m.name for m in item.iter_markers()}
        if SPAWNS in kinds:
            kinds.discard(SPAWNS)
            if not (kinds | marked) & {*KINDS, FAST}:
                kinds.add(COMPILER)
        for kind in sorted(kinds - marked):
            item.add_marker(kind)
        if not (marked | kinds) & {*KINDS, SLOW}:
            item.add_marker(FAST)
        if group is not None and "xdist_group" not in marked:
            item.add_marker(pytest.mark.xdist_group(group))
        _name_the_group(config, item)


def _name_the_group(config: pytest.Config, item: pytest.Item) -> None:
    """On an xdist worker with --dist loadgroup, `<nodeid>@<group>`, the id the scheduler groups
    by. xdist 3.8 renames the item by its `_nodeid`, which pytest 9.2 no longer reads (a node's id
    is its `_id`): the groups were never formed, each group's tests were spread over both workers,
    and each worker set up the process-starting fixtures of every group again."""
    marks = list(item.iter_markers("xdist_group"))
    if not marks or not getattr(config.option, "loadgroup", False) or "@" in item.nodeid:
        return
    from _pytest.nodeid import NodeId

    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks})
    item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")  # xdist's own spelling of it


# The calls that start a process or a server, each replaced in a fast test by one that fails.
_STARTS = [
    (subprocess.Popen, "_execute_child"),
    (os, "fork"),
    (os, "forkpty"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (os, "system"),
    (multiprocessing.process.BaseProcess, "start"),
    (socket.socket, "listen"),
]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """In a fast test (its setup, call and teardown), starting a process or a server fails."""
    if item.get_closest_marker(FAST) is None:
        return (yield)

    def refuse(what: str):
        def refused(*args, **kwargs):
            raise AssertionError(
                f"{item.nodeid} is marked fast but starts a process or a server ({what}): tag the helper "
                "that does with support.tiers.starts, or mark the test with its kind"
            )

        return refused

    saved = [(owner, name, getattr(owner, name)) for owner, name in _STARTS if hasattr(owner, name)]
    for owner, name, _ in saved:
        setattr(owner, name, refuse(f"{getattr(owner, '__name__', owner)}.{name}"))
    try:
        return (yield)
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


# ---- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def own_config_folder(tmp_path_factory):
    """The tests' own $XDG_CONFIG_HOME, inherited by every process they start:
    the user's list of trusted folders is neither read nor written."""
    previous = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("config"))
    yield
    if previous is None:
        os.environ.pop("XDG_CONFIG_HOME", None)
    else:
        os.environ["XDG_CONFIG_HOME"] = previous


@pytest.fixture(scope="module")
@starts(COMPILER)
def worker():
    """One compile worker for a test module: starting one imports jax and libtpu."""
    from vmem_lsp.compile.client import WorkerClient

    client = WorkerClient()
    yield client
    client.stop()


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def examples_check(cache_dir):
    """One cold run over examples/ on v5e and v6e, shared by the tests that read it."""
    return run_json("check", "examples", "--target", "v5e,v6e", "--cache-dir", str(cache_dir))
