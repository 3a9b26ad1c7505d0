"""The real CLI as a subprocess, as a user or CI runs it, and the
environments that hide a package from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support import ROOT
from support.tiers import COMPILER, starts


@starts(COMPILER)
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


@starts(COMPILER)
def run_json(*args: str, **kw) -> tuple[subprocess.CompletedProcess, dict]:
    done = run_cli(*args, "--format", "json", **kw)
    assert done.stdout, done.stderr
    return done, json.loads(done.stdout)


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
    return {**own_libtpu(), "PYTHONPATH": str(folder)}


def own_libtpu() -> dict:
    """This environment without the TPU_* / LIBTPU variables a test that imported libtpu in this
    process left behind: another Python's jax then loads its own libtpu, not this one's (a jax 0.12
    on libtpu 0.0.42.1 cannot read its own kernels' configs)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TPU_") and "LIBTPU" not in k}
