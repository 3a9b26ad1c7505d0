"""Shared helpers: run the real CLI as a subprocess, as a user or CI would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
KERNELS = ROOT / "tests" / "data" / "kernels"


def run_cli(
    *args: str, cwd: Path = ROOT, timeout: float = 900, env: dict | None = None, inherit: bool = True
) -> subprocess.CompletedProcess:
    """The CLI as a subprocess; `env` adds to this process's environment, or
    with `inherit=False` is the whole of it."""
    base = {**os.environ} if inherit else {}
    return subprocess.run(
        [sys.executable, "-m", "vmem_lsp", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**base, "PYTHONUNBUFFERED": "1", **(env or {})},
    )


def hide(folder: Path, package: str) -> str:
    """`folder`, for PYTHONPATH, with a `package` that raises ImportError: as if it were not installed."""
    (folder / package).mkdir(parents=True, exist_ok=True)
    (folder / package / "__init__.py").write_text(f"raise ImportError('{package} hidden by the test')\n")
    return str(folder)


def without_libtpu(folder: Path) -> dict:
    """An environment in which libtpu cannot be imported, as on macOS: a
    package of that name on PYTHONPATH that raises ImportError, and none of
    the TPU_* / LIBTPU variables a test that imported libtpu in this process
    left behind (jax would load the library from TPU_LIBRARY_PATH)."""
    hide(folder, "libtpu")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPU_") and "LIBTPU" not in k}
    return {**env, "PYTHONPATH": str(folder)}


def run_json(*args: str, **kw) -> tuple[subprocess.CompletedProcess, dict]:
    done = run_cli(*args, "--format", "json", **kw)
    assert done.stdout, done.stderr
    return done, json.loads(done.stdout)


def line_of(path: Path, needle: str, nth: int = 0) -> int:
    """1-based number of the nth line of `path` that contains `needle`."""
    hits = [i for i, text in enumerate(path.read_text().splitlines(), 1) if needle in text]
    return hits[nth]


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


def fixes_for(path, targets, cache, sources=None, worker=None) -> list:
    """[(example, fixes)] for the overflowing examples under `path`, with a real
    worker: `worker` when given (a module's tests share one: starting one
    imports jax), else one of its own."""
    from vmem_lsp.compile.cache import ResultCache
    from vmem_lsp.compile.client import WorkerClient
    from vmem_lsp.config import Settings
    from vmem_lsp.engine import SourceFiles, cached_runner, check
    from vmem_lsp.fixes.plan import plan

    settings = Settings(targets=targets, cache_dir=str(cache))
    sources = sources or SourceFiles()
    own = worker is None
    worker = worker or WorkerClient()
    try:
        outcome = check([str(path)], settings, worker=worker)
        run = cached_runner(ResultCache(settings.cache_folder()), worker, settings.limits())
        return plan(outcome.results, settings.targets, sources.text, run, sources.sites_of)
    finally:
        if own:
            worker.stop()


def changed_outside(before: str, after: str, edits) -> list:
    """The pieces of `before` outside every edit that `after` lost: [] when the
    two differ only in the edited tokens. The pieces must appear in `after` in
    order, the first at its start and the last at its end, so a character
    gained, lost or moved outside the edits shows (two edits of one span, say).
    No diff is computed: a character diff of a 2,000-line jax module takes
    seconds, and it may align an insertion beside its edit rather than at it."""
    from vmem_lsp.source.text import offset

    regions = sorted(
        (offset(before, e.span.start_line, e.span.start_col), offset(before, e.span.end_line, e.span.end_col))
        for e in edits
    )
    pieces, at = [], 0
    for start, end in regions:
        pieces.append(before[at : max(start, at)])
        at = max(at, end)
    pieces.append(before[at:])
    lost = []
    if not after.startswith(pieces[0]):
        lost.append(pieces[0][-60:])
    found = len(pieces[0])
    for piece in pieces[1:-1]:
        index = after.find(piece, found)
        if index < 0:
            lost.append(piece[:60])
        else:
            found = index + len(piece)
    if len(pieces) > 1 and not (after.endswith(pieces[-1]) and len(after) - len(pieces[-1]) >= found):
        lost.append(pieces[-1][:60])
    if len(pieces) == 1 and after != before:
        lost.append(before[:60])
    return lost


def overlapping(edits) -> list:
    """Pairs of edits whose spans overlap or coincide: an editor applies a
    workspace edit only when its edits are disjoint."""
    spans = sorted(((e.span.start_line, e.span.start_col), (e.span.end_line, e.span.end_col), e) for e in edits)
    return [(a[2], b[2]) for a, b in zip(spans, spans[1:]) if b[0] < a[1] or a[:2] == b[:2]]
