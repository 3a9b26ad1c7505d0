"""Where the command line meets the compiler stack, in one module: the
versions `--version` prints, `vmem-lsp worker`, and starting the workers a
command compiles with (local processes or a Ray cluster)."""

from __future__ import annotations

import sys

from .. import __version__


def version_text() -> str:
    """vmem-lsp's version and the installed jax, jaxlib and libtpu (from their metadata: jax is not imported)."""
    from importlib.metadata import PackageNotFoundError, version

    lines = [f"vmem-lsp {__version__}"]
    for name in ("jax", "jaxlib", "libtpu"):
        try:
            lines.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            lines.append(f"{name} not installed")
    return "\n".join(lines)


def add_worker_parser(commands) -> None:
    """`worker` in --help; its own options are parsed by the worker (run_worker)."""
    commands.add_parser(
        "worker",
        help="run a compile worker on stdin/stdout (JSON lines); "
        "options: --cache-dir, --max-request-mb, --max-seconds, --max-memory-mb",
    )


def run_worker(argv: list[str]) -> int:
    """`vmem-lsp worker ...`: the compile worker, with its own options (--cache-dir, --max-seconds, ...)."""
    from ..compile.worker import main as worker_main

    return worker_main(argv)


def start_workers(settings):
    """The workers the settings ask for (engine.make_workers), or None when
    they cannot start (the Ray backend without ray, a cluster not reached):
    said on stderr, the command exits 2."""
    from ..compile.ray_backend import BackendError
    from ..engine import make_workers

    try:
        return make_workers(settings)
    except BackendError as error:
        print(f"vmem-lsp: {error}", file=sys.stderr)
        return None
