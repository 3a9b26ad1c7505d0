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


def run_cli(*args: str, cwd: Path = ROOT, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vmem_lsp", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def run_json(*args: str, **kw) -> tuple[subprocess.CompletedProcess, dict]:
    done = run_cli(*args, "--format", "json", **kw)
    assert done.stdout, done.stderr
    return done, json.loads(done.stdout)


def line_of(path: Path, needle: str, nth: int = 0) -> int:
    """1-based number of the nth line of `path` that contains `needle`."""
    hits = [i for i, text in enumerate(path.read_text().splitlines(), 1) if needle in text]
    return hits[nth]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def examples_check(cache_dir):
    """One cold run over examples/ on v5e and v6e, shared by the tests that read it."""
    return run_json("check", "examples", "--target", "v5e,v6e", "--cache-dir", str(cache_dir))
