"""Managed environments: a virtual environment per jax version with `jax[tpu]==X` and
nothing of vmem-lsp, made once and kept, so that `check --jax X` compiles with that jax and
libtpu without touching the project's own environment. The worker runs there as in any
other interpreter (interpreter.worker_command: vmem-lsp's package folder loaded by path).

    <root>/jax-<version>-py<M.m>/        the environment, complete by construction
    <root>/jax-<version>-py<M.m>.lock    held while it is made (fcntl.flock)
    <root>/jax-<version>-py<M.m>.log     pip's (or uv's) output of the last attempt
    <root>/.making-jax-<version>-py<M.m>-<pid>/   an attempt in progress

An environment is built in its `.making-` folder and renamed into place when pip has
finished and the interpreter answers with that jax: a folder under the final name is whole,
so a run killed half-way leaves only a `.making-` folder, which the next maker (holding the
lock) removes. The root is VMEM_JAX_ENVS when set (CI and tests share one), else the user
cache. Never imports jax."""

from __future__ import annotations

import fcntl
import glob
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..user_folders import user_cache_folder
from .interpreter import probe

ENVS_VARIABLE = "VMEM_JAX_ENVS"
VERSION = re.compile(r"^\d+(\.\d+){1,3}$")
# jax 0.11.0 is the first release without wheels for Python 3.11 (the registry serves
# 0.11+ only to 3.12 and newer).
NEWER_PYTHON_FROM = (0, 11)

Say = Callable[[str], None]


class EnvironmentFailed(Exception):
    """An environment could not be made: the message names the version and what pip said."""


@dataclass(frozen=True)
class Managed:
    """A made environment: its interpreter, and the compiler versions it answered with."""

    version: str
    python: str
    folder: str
    packages: dict[str, str | None]


def check_version(text: str) -> str:
    """`0.12.0.1` as given; ValueError for anything that is not a release number (a
    pyproject's value reaches pip's command line)."""
    text = str(text).strip()
    if not VERSION.match(text):
        raise ValueError(f"not a jax version: {text!r} (write e.g. 0.12.0.1)")
    return text


def parse_versions(value) -> tuple[str, ...]:
    """`--jax 0.12.0.1,0.11.2` (repeatable) or pyproject's list: each version once, in order."""
    items = value.split(",") if isinstance(value, str) else [part for v in value for part in str(v).split(",")]
    return tuple(dict.fromkeys(check_version(v) for v in items if str(v).strip()))


def release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def python_needed(version: str) -> tuple[int, int]:
    """The oldest Python the registry serves this jax to."""
    return (3, 12) if release(version)[:2] >= NEWER_PYTHON_FROM else (3, 11)


def root(environ=None) -> str:
    """Where the environments live: VMEM_JAX_ENVS, else $XDG_CACHE_HOME/vmem-lsp/envs."""
    environ = os.environ if environ is None else environ
    if configured := environ.get(ENVS_VARIABLE):
        return os.path.abspath(os.path.expanduser(configured))
    return os.path.join(user_cache_folder(environ), "envs")


def base_candidates(minimum: tuple[int, int], environ=None) -> list[str]:
    """Interpreters to make the environment from, best first: this one when new enough,
    python3.12 / python3.13 on PATH, pyenv's 3.12 and 3.13 builds."""
    environ = os.environ if environ is None else environ
    found = [sys.executable] if sys.version_info[:2] >= minimum else []
    path = environ.get("PATH", os.defpath)
    for name in ("python3.12", "python3.13"):
        if (where := shutil.which(name, path=path)) is not None:
            found.append(where)
    pyenv = environ.get("PYENV_ROOT") or os.path.join(os.path.expanduser("~"), ".pyenv")
    for minor in ("3.12", "3.13"):
        found.extend(sorted(glob.glob(os.path.join(pyenv, "versions", f"{minor}*", "bin", "python"))))
    return list(dict.fromkeys(found))


def base_python(version: str, environ=None) -> tuple[str, tuple[int, int]]:
    """(interpreter, its major.minor) to make the environment of `version` from;
    EnvironmentFailed when there is none new enough."""
    minimum = python_needed(version)
    for candidate in base_candidates(minimum, environ):
        found = probe(candidate)
        if not found.error and tuple(found.python[:2]) >= minimum:
            return candidate, (found.python[0], found.python[1])
    needed = ".".join(map(str, minimum))
    raise EnvironmentFailed(
        f"jax {version} needs Python {needed} or newer, and none was found (this Python, python3.12 and "
        f"python3.13 on PATH, ~/.pyenv/versions/3.12*): install one, e.g. `pyenv install 3.12`"
    )


def name_of(version: str, python: tuple[int, int]) -> str:
    return f"jax-{version}-py{python[0]}.{python[1]}"


def ensure(version: str, say: Say = lambda text: None, environ=None) -> Managed:
    """The environment of jax `version`, made when it is missing (once, under its lock:
    a second process waits, then finds it made). EnvironmentFailed, with nothing
    half-made left, when it cannot be made."""
    version = check_version(version)
    base, python = base_python(version, environ)
    top = root(environ)
    name = name_of(version, python)
    folder = os.path.join(top, name)
    if (ready := made(version, folder)) is not None:
        return ready
    os.makedirs(top, exist_ok=True)
    with open(os.path.join(top, name + ".lock"), "w") as lock:
        if not try_lock(lock):
            say(f"waiting for another vmem-lsp making the jax {version} environment ({folder})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if (ready := made(version, folder)) is not None:
            return ready
        for stale in glob.glob(os.path.join(top, f".making-{name}-*")):
            shutil.rmtree(stale, ignore_errors=True)  # a killed run's: the lock says nobody is on it
        if os.path.exists(folder):
            raise EnvironmentFailed(
                f"{folder} is there but is no environment of jax {version} (its Python does not answer with "
                "that jax): remove it and run again"
            )
        return build(version, base, folder, top, name, say, environ)


def try_lock(lock) -> bool:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def made(version: str, folder: str) -> Managed | None:
    """The environment in `folder` when it is there and answers with jax `version`."""
    python = os.path.join(folder, "bin", "python")
    if not os.path.isfile(python):
        return None
    found = probe(python)
    if found.error or (found.packages or {}).get("jax") != version or not (found.packages or {}).get("libtpu"):
        return None
    return Managed(version, python, folder, dict(found.packages or {}))


def build(version: str, base: str, folder: str, top: str, name: str, say: Say, environ=None) -> Managed:
    """Make the environment in a `.making-` folder, check it, rename it into place."""
    work = os.path.join(top, f".making-{name}-{os.getpid()}")
    log_path = os.path.join(top, name + ".log")
    started = time.monotonic()
    tool = shutil.which("uv", path=(os.environ if environ is None else environ).get("PATH", os.defpath))
    say(
        f"making an environment for jax {version} (once; kept in {folder}) with {'uv' if tool else 'pip'} "
        f"from {base}; output in {log_path}"
    )
    python = os.path.join(work, "bin", "python")
    requirement = f"jax[tpu]=={version}"
    steps = (
        [("creating the virtual environment", [tool, "venv", "--python", base, work])]
        + [(f"installing {requirement}", [tool, "pip", "install", "--python", python, requirement])]
        if tool
        else [("creating the virtual environment", [base, "-m", "venv", work])]
        + [
            (
                f"installing {requirement}",
                [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", requirement],
            )
        ]
    )
    try:
        with open(log_path, "w") as log:
            for what, command in steps:
                say(f"jax {version}: {what}")
                log.write(f"$ {' '.join(command)}\n")
                log.flush()
                done = subprocess.run(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=None if environ is None else dict(environ),
                )
                if done.returncode != 0:
                    raise EnvironmentFailed(
                        f"cannot make the environment for jax {version}: {what} failed: "
                        f"{error_line(log_path)} (the whole output: {log_path})"
                    )
        ready = made(version, work)
        if ready is None:
            found = probe(python)
            raise EnvironmentFailed(
                f"cannot make the environment for jax {version}: after the install its Python answers "
                f"{found.error or found.packages} (the whole output: {log_path})"
            )
        os.rename(work, folder)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    say(f"jax {version}: ready in {time.monotonic() - started:.0f} s (libtpu {ready.packages.get('libtpu')})")
    # A venv's interpreter path is its folder's, which the rename changed: ask again.
    return made(version, folder) or ready


def error_line(log_path: str) -> str:
    """The line of pip's (or uv's) output that says what went wrong: its last `ERROR:` /
    `error:` line, else its last line."""
    try:
        with open(log_path, errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return "no output"
    errors = [line for line in lines if line.lower().startswith("error")]
    return (errors or lines or ["no output"])[-1]
