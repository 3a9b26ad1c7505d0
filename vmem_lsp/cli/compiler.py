"""Where the command line meets the compiler stack, in one module: the
versions `--version` prints, `vmem-lsp worker`, and starting the workers a
command compiles with (local processes or a Ray cluster)."""

from __future__ import annotations

import sys

from .. import __version__


def version_text(path: str = ".") -> str:
    """vmem-lsp's version, then the compiler that checks: the jax, jaxlib and libtpu of the Python a
    local worker of `path`'s settings runs in, against the tested pairs; vmem-lsp's own environment's
    only where it is not that one and holds other versions (from metadata: jax is not imported)."""
    from ..versions import installed

    own = installed()
    compiler, theirs = worker_version_line(path)
    lines = [f"vmem-lsp {__version__}", compiler]
    if theirs != own:
        said = ", ".join(f"{name} {found or 'not installed'}" for name, found in own.items())
        lines.append(f"vmem-lsp's own Python ({sys.executable}): {said}; not the one that checks")
    return "\n".join(lines)


def worker_version_line(path: str) -> tuple[str, dict[str, str | None] | None]:
    """The line on the compiler a local worker of `path` checks with, and its versions (None: not known)."""
    from .. import versions
    from ..compile.backend import local_compiler
    from ..config import ConfigError, load_settings

    try:
        settings = load_settings(path)
    except ConfigError as bad:
        return f"compiler: unknown, the settings cannot be read: {bad}", None
    if settings.worker:
        return f"compiler: the worker command {settings.worker!r}'s (its versions: vmem-lsp doctor)", None
    interpreter, found, why = local_compiler(settings)
    where = f"{interpreter.path} ({interpreter.source})"
    if why or found is None:
        return f"compiler: none in {where}: {why}", None
    jax, libtpu = found.get("jax"), found.get("libtpu")
    said = ", ".join(f"{name} {found.get(name) or 'not installed'}" for name in versions.COMPILER_PACKAGES)
    if versions.in_tested_range(jax, libtpu):
        verdict = "a tested pair"
    elif versions.supported(jax):
        verdict = f"not a tested pair ({versions.tested_text()})"
    else:
        verdict = f"outside the supported range ({versions.range_text()})"
    return f"compiler: {said} in {where}, {verdict}", found


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
