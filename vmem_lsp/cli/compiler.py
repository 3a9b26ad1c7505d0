"""Where the command line meets the compiler stack, in one module: the
versions `--version` prints, `vmem-lsp worker`, and starting the workers a
command compiles with (local processes or a Ray cluster)."""

from __future__ import annotations

import sys

from .. import __version__


def version_text() -> str:
    """vmem-lsp's version and the installed jax, jaxlib and libtpu (from their metadata: jax is not imported)."""
    from ..versions import installed

    lines = [f"vmem-lsp {__version__}"]
    for name, found in installed().items():
        lines.append(f"{name} {found}" if found else f"{name} not installed")
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
    from ..compile.backend import worker_main

    return worker_main(argv)


def start_workers(settings):
    """The workers the settings ask for (compile.backend.runner_for), or None when
    they cannot start (the Ray backend without ray, a cluster not reached):
    said on stderr, the command exits 2."""
    from ..compile.backend import BackendError, runner_for

    try:
        return runner_for(settings)
    except BackendError as error:
        print(f"vmem-lsp: {error}", file=sys.stderr)
        return None
