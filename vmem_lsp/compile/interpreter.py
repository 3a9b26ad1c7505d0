"""The Python a local worker runs in: the project's own, with the project's jax and libtpu,
found the way editors find it, while vmem-lsp itself may live in an environment of its
own (pipx, uv tool, a venv), as ruff and pyright do.

Nothing of vmem-lsp is installed in the project's interpreter: the worker is started with
vmem-lsp's package folder loaded by path (BOOTSTRAP), and the worker's modules need only
the standard library beside jax. Never imports jax."""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

# vmem_lsp/, the package folder the worker loads in another interpreter.
PACKAGE_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OLDEST_PYTHON = (3, 11)  # what vmem_lsp's own code needs (tomllib, except*)

# Run as `python -c BOOTSTRAP <package folder> worker [options]`: loads vmem_lsp from that
# folder (ahead of any vmem_lsp the interpreter may have of its own) and runs the worker.
BOOTSTRAP = (
    "import importlib.util, sys\n"
    "folder = sys.argv[1]\n"
    "spec = importlib.util.spec_from_file_location("
    "'vmem_lsp', folder + '/__init__.py', submodule_search_locations=[folder])\n"
    "package = importlib.util.module_from_spec(spec)\n"
    "sys.modules['vmem_lsp'] = package\n"
    "spec.loader.exec_module(package)\n"
    "from vmem_lsp.compile.worker_server import main\n"
    "sys.exit(main(sys.argv[3:]))\n"
)

# Printed by the interpreter asked about: its version and its compiler packages' versions,
# read from their metadata (jax is not imported: this must take milliseconds).
PROBE = (
    "import json, sys\n"
    "from importlib.metadata import PackageNotFoundError, version\n"
    "def v(name):\n"
    "    try:\n"
    "        return version(name)\n"
    "    except PackageNotFoundError:\n"
    "        return None\n"
    "print(json.dumps({'python': list(sys.version_info[:3]), 'executable': sys.executable,"
    " 'packages': {name: v(name) for name in ('jax', 'jaxlib', 'libtpu')}}))\n"
)


@dataclass(frozen=True)
class Interpreter:
    """The worker's Python and where it was found, for messages ("--python",
    "pyproject.toml", "VIRTUAL_ENV", ".venv beside pyproject.toml", "vmem-lsp's own")."""

    path: str
    source: str

    @property
    def own(self) -> bool:
        """vmem-lsp's own interpreter: the worker is `-m vmem_lsp worker`, as it always was."""
        return same_interpreter(self.path, sys.executable)


@dataclass(frozen=True)
class Probe:
    """What an interpreter said of itself; `error` when it could not be run."""

    python: tuple[int, ...] = ()
    packages: dict[str, str | None] | None = None
    error: str | None = None


def same_interpreter(a: str, b: str) -> bool:
    """Whether two interpreter paths are one environment's. Symlinks are not resolved: a
    venv's python links to its base interpreter, which is another environment."""
    return os.path.normpath(os.path.abspath(a)) == os.path.normpath(os.path.abspath(b))


def venv_python(folder: str) -> str | None:
    """The interpreter of the virtual environment at `folder`, if there is one."""
    for name in ("bin/python", "bin/python3", "Scripts/python.exe"):
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


class PythonNotFound(ValueError):
    """The configured interpreter is not there: the message names the path and where it
    was set, since a typo in a setting must not turn into vmem-lsp's own Python silently."""


def find_python(configured: str | None, configured_source: str | None, root: str, environ=None) -> Interpreter:
    """The worker's interpreter: the configured one (setting, --python, the editor's choice),
    else the active virtual environment (VIRTUAL_ENV), else a `.venv` in the project root,
    else vmem-lsp's own Python. A configured folder means the venv in it; a relative path is
    the project root's. PythonNotFound when the configured one does not exist."""
    environ = os.environ if environ is None else environ
    if configured:
        source = configured_source or "the python setting"
        path = os.path.abspath(os.path.join(root, os.path.expanduser(configured)))
        if os.path.isdir(path):
            found = venv_python(path)
            if found is None:
                raise PythonNotFound(
                    f"the worker's Python from {source}, {path}, is a folder without bin/python: "
                    "name a virtual environment's folder or its python"
                )
            path = found
        elif not os.path.exists(path):
            raise PythonNotFound(f"the worker's Python from {source}, {path}, does not exist")
        return Interpreter(path, source)
    active = environ.get("VIRTUAL_ENV")
    if active and (python := venv_python(active)):
        return Interpreter(python, "VIRTUAL_ENV")
    if python := venv_python(os.path.join(root, ".venv")):
        return Interpreter(python, ".venv in the project root")
    return Interpreter(sys.executable, "vmem-lsp's own")


def worker_command(interpreter: Interpreter) -> list[str]:
    """The command of a local worker in `interpreter`."""
    if interpreter.own:
        return [sys.executable, "-m", "vmem_lsp", "worker"]
    return [interpreter.path, "-c", BOOTSTRAP, PACKAGE_FOLDER, "worker"]


def command_text(command: list[str]) -> str:
    """A worker command as a shell line, with the bootstrap script (nine lines) named, not printed."""
    if command[1:3] == ["-c", BOOTSTRAP]:
        return f"{shlex.join(command[:2])} <vmem-lsp's worker bootstrap> {shlex.join(command[3:])}"
    return shlex.join(command)


def is_local_command(command: list[str]) -> bool:
    """Whether `command` is a local worker this module made (same machine: no source shipping)."""
    own = command[1:4] == ["-m", "vmem_lsp", "worker"]
    return own or command[1:3] == ["-c", BOOTSTRAP]


def worker_environment(command: list[str], environ: dict[str, str]) -> dict[str, str]:
    """The environment a worker of `command` starts with. A worker in another interpreter
    must load that interpreter's libtpu: importing libtpu here (the tuner API, doctor)
    sets TPU_LIBRARY_PATH to this environment's libtpu.so, which the child would inherit and
    load under a jax it does not match (the compile fails on fields that libtpu does not know)."""
    library = environ.get("TPU_LIBRARY_PATH", "")
    if command[1:3] == ["-c", BOOTSTRAP] and library.startswith(os.path.join(sys.prefix, "")):
        return {k: v for k, v in environ.items() if k != "TPU_LIBRARY_PATH"}
    return environ


def probe(path: str) -> Probe:
    """Ask the interpreter at `path` for its version and its jax, jaxlib and libtpu; kept
    until the interpreter's file or its site-packages change (a pip install)."""
    try:
        stamp = tuple(os.stat(p).st_mtime_ns for p in (path, *_site_folders(path)))
    except OSError as error:
        return Probe(error=f"{path}: {error.strerror or error}")
    return _probe(path, stamp)


def _site_folders(path: str) -> list[str]:
    lib = os.path.join(os.path.dirname(os.path.dirname(path)), "lib")
    try:
        return [os.path.join(lib, name, "site-packages") for name in sorted(os.listdir(lib)) if name.startswith("py")]
    except OSError:
        return []


@functools.lru_cache(maxsize=16)
def _probe(path: str, stamp: tuple) -> Probe:
    try:
        done = subprocess.run([path, "-c", PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return Probe(error=f"{path} could not be run: {error}")
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Probe(error=f"{path} exited {done.returncode}: {tail}")
    try:
        said = json.loads(done.stdout.strip().splitlines()[-1])
        return Probe(python=tuple(said["python"]), packages=dict(said["packages"]))
    except (ValueError, KeyError, IndexError):
        return Probe(error=f"{path} did not answer as a Python interpreter: {done.stdout[-200:]!r}")


def unusable(interpreter: Interpreter, found: Probe, packages: Sequence[str] = ("libtpu",)) -> str | None:
    """Why the worker cannot run in `interpreter` (for the user, with the line that fixes
    it), or None when it can. `packages`: the compilers its targets' families need there
    (libtpu for a TPU chip; none for a GPU, whose missing plugin the worker says itself)."""
    where = f"{interpreter.path} (the worker's Python, from {interpreter.source})"
    if found.error:
        return f"cannot run {where}: {found.error}"
    if found.python[:2] < OLDEST_PYTHON:
        version = ".".join(map(str, found.python))
        oldest = ".".join(map(str, OLDEST_PYTHON))
        return f"{where} is Python {version}; the worker needs Python {oldest} or newer"
    missing = [name for name in ("jax", *packages) if not (found.packages or {}).get(name)]
    if missing:
        return (
            f"{where} has no {' and no '.join(missing)}: install the TPU compiler there with "
            f"`{interpreter.path} -m pip install 'jax[tpu]'`, or point the python setting at the "
            "interpreter that has it"
        )
    return None
