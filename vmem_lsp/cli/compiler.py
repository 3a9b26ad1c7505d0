"""Where the command line meets the compiler stack, in one module: the
versions `--version` prints, `vmem-lsp worker`, and starting the workers a
command compiles with (local processes or a Ray cluster)."""

from __future__ import annotations

import sys

from .. import __version__


def version_text(path: str = ".") -> str:
    """vmem-lsp's version and the installed jax, jaxlib and libtpu (from their metadata: jax
    is not imported), then the Python a local worker of `path`'s settings runs in and its
    compiler's versions, against the tested pairs: that compiler is the one that checks."""
    from ..versions import installed

    lines = [f"vmem-lsp {__version__}"]
    for name, found in installed().items():
        lines.append(f"{name} {found}" if found else f"{name} not installed")
    lines.append(worker_version_line(path))
    return "\n".join(lines)


def worker_version_line(path: str) -> str:
    from .. import versions
    from ..compile.backend import local_compiler
    from ..config import ConfigError, load_settings

    try:
        settings = load_settings(path)
    except ConfigError as bad:
        return f"worker: the settings cannot be read: {bad}"
    if settings.worker:
        return f"worker: the command {settings.worker!r} (its versions: vmem-lsp doctor)"
    interpreter, found, why = local_compiler(settings)
    if why or found is None:
        return f"worker's Python: {interpreter.path} ({interpreter.source}): {why}"
    jax, libtpu = found.get("jax"), found.get("libtpu")
    said = f"jax {jax or 'not installed'}, libtpu {libtpu or 'not installed'}"
    if versions.in_tested_range(jax, libtpu):
        verdict = "a tested pair"
    elif versions.supported(jax):
        verdict = f"not a tested pair ({versions.tested_text()})"
    else:
        verdict = f"outside the supported range ({versions.range_text()})"
    return f"worker's Python: {interpreter.path} ({interpreter.source}): {said}, {verdict}"


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
