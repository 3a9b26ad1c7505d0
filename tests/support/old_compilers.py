"""Old TPU compilers for the tests that need one (doctor on a libtpu jax refuses, on a
libtpu that does not know v7x): a venv per jax[tpu] release, with an older libtpu forced
in after it when asked, made once with the machine's Python 3.11 and kept in
VMEM_OLD_COMPILERS (default ~/.cache/vmem-lsp-ci/old-compilers). The same for a tool a
test runs in its own environment (tokamax, on jax 0.12 and Python 3.12): `packages` beside jax.

    <root>/jax-<jax>[-libtpu<libtpu>]-py3.11/        the venv, whole by construction
    <root>/jax-<jax>[-libtpu<libtpu>]-py3.11.lock    held while it is made (fcntl.flock)
    <root>/jax-<jax>[-libtpu<libtpu>]-py3.11.log     pip's output of the last attempt
    <root>/.making-jax-...-<pid>/                    an attempt in progress

As vmem_lsp/compile/environments.py does for its own environments (whose checks this
reuses): built in a `.making-` folder and renamed into place once pip is done and the
venv's Python answers with those versions, under a lock, so two xdist workers (or two
runs) make it once and nobody ever finds a half-made one under the final name. When pip
fails, the test fails with pip's last lines: a missing compiler is a failure, not a skip."""

from __future__ import annotations

import fcntl
import glob
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.tiers import COMPILER, starts
from vmem_lsp.compile.environments import check_version, made
from vmem_lsp.compile.interpreter import probe

VARIABLE = "VMEM_OLD_COMPILERS"
PYTHON = (3, 11)
# One pip step's limit: a cold jax[tpu] install downloads a few hundred MB.
STEP_TIMEOUT = 1800
TAIL = 20


def root() -> Path:
    """VMEM_OLD_COMPILERS, else ~/.cache/vmem-lsp-ci/old-compilers."""
    configured = os.environ.get(VARIABLE)
    if configured:
        return Path(configured).expanduser().absolute()
    return Path.home() / ".cache" / "vmem-lsp-ci" / "old-compilers"


def base_python(python: tuple[int, int] = PYTHON) -> str:
    """The machine's Python M.m: this interpreter's base when it is that one, else pythonM.m on
    PATH, else pyenv's build (as the range step finds 3.12)."""
    if sys.version_info[:2] == python:
        return getattr(sys, "_base_executable", sys.executable)
    minor = f"{python[0]}.{python[1]}"
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    for found in (shutil.which(f"python{minor}"), *sorted(glob.glob(f"{pyenv}/versions/{minor}.*/bin/python"))):
        if found and tuple((probe(found).python or ())[:2]) == python:
            return found
    pytest.fail(f"no Python {minor} to make a venv from (this Python is not, python{minor} on PATH, pyenv's)")


def name_of(jax: str, libtpu: str | None, python: tuple[int, int] = PYTHON, packages: tuple[str, ...] = ()) -> str:
    """The venv's folder name; `packages` beside jax add their first (the tool's, pinned) and a digest of the rest."""
    extra = ""
    if packages:
        digest = hashlib.sha256("\n".join(packages).encode()).hexdigest()[:8]
        extra = f"-{packages[0].replace('==', '')}-{digest}"
    return f"jax-{jax}" + (f"-libtpu{libtpu}" if libtpu else "") + extra + f"-py{python[0]}.{python[1]}"


def answers(folder: Path, jax: str, libtpu: str | None) -> bool:
    """The venv in `folder` is there and its Python has jax `jax` and libtpu (`libtpu` when forced)."""
    found = made(jax, str(folder))
    return found is not None and libtpu in (None, found.packages.get("libtpu"))


@starts(COMPILER)
def old_compiler(
    jax: str, libtpu: str | None = None, python: tuple[int, int] = PYTHON, packages: tuple[str, ...] = ()
) -> Path:
    """bin/python of the venv of Python `python` with `jax[tpu]==jax` and `packages` (then
    `libtpu==libtpu` when given), made when missing or when what is there does not answer with
    those versions."""
    jax = check_version(jax)
    libtpu = check_version(libtpu) if libtpu else None
    top, name = root(), name_of(jax, libtpu, python, packages)
    folder = top / name
    if not answers(folder, jax, libtpu):
        top.mkdir(parents=True, exist_ok=True)
        with open(top / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another worker making it: wait, then find it made
            if not answers(folder, jax, libtpu):
                for stale in top.glob(f".making-{name}-*"):  # a killed run's: the lock says nobody is on it
                    shutil.rmtree(stale, ignore_errors=True)
                shutil.rmtree(folder, ignore_errors=True)  # there but not answering (its base Python gone?)
                build(jax, libtpu, folder, python, packages)
    return folder / "bin" / "python"


def build(
    jax: str, libtpu: str | None, folder: Path, version: tuple[int, int] = PYTHON, packages: tuple[str, ...] = ()
) -> None:
    """Make the venv in a `.making-` folder beside `folder`, check it, rename it into place."""
    work = folder.with_name(f".making-{folder.name}-{os.getpid()}")
    log = folder.with_name(f"{folder.name}.log")
    python = str(work / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--progress-bar", "off"]
    steps = [[base_python(version), "-m", "venv", str(work)], [*pip, f"jax[tpu]=={jax}", *packages]]
    if libtpu:
        steps.append([*pip, f"libtpu=={libtpu}"])
    try:
        with open(log, "w") as out:
            for command in steps:
                out.write(f"$ {' '.join(command)}\n")
                out.flush()
                try:
                    done = subprocess.run(
                        command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=STEP_TIMEOUT
                    )
                    failed = f"exited {done.returncode}" if done.returncode else None
                except subprocess.TimeoutExpired:
                    failed = f"did not finish in {STEP_TIMEOUT} s"
                if failed:
                    pytest.fail(
                        f"cannot make {folder.name}: `{' '.join(command)}` {failed}; its last lines:\n"
                        f"{last_lines(log)}\n(the whole output: {log})",
                        pytrace=False,
                    )
        if not answers(work, jax, libtpu):
            found = probe(python)
            pytest.fail(
                f"cannot make {folder.name}: after pip its Python answers {found.error or found.packages} "
                f"(pip's output: {log})",
                pytrace=False,
            )
        os.rename(work, folder)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def last_lines(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return "\n".join(lines[-TAIL:])
