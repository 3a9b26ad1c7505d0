"""The command line: `vmem-lsp check PATH...`, `vmem-lsp serve` and the rest,
one module a command (each gives its parser and its `run`)."""

from __future__ import annotations

import argparse
import sys

from . import check, doctor, explain, merge, serve, sweep, trust
from .common import EXIT_ERROR
from .compiler import add_worker_parser, run_worker, version_text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vmem-lsp",
        description="TPU VMEM overflows of JAX Pallas kernels, found by the real compiler and shown on the "
        "BlockSpec lines that cause them",
    )
    parser.add_argument(
        "--version",
        action=VersionAction,
        nargs=0,
        default=argparse.SUPPRESS,
        help="print the versions of vmem-lsp, jax, jaxlib and libtpu, and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    check.add_parser(commands)
    add_worker_parser(commands)
    trust.add_parser(commands)  # and untrust
    explain.add_parser(commands)
    merge.add_parser(commands)
    doctor.add_parser(commands)
    sweep.add_parser(commands)
    serve.add_parser(commands)
    return parser


class VersionAction(argparse.Action):
    """--version: the versions are looked up only when asked for."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


EXIT_PIPE_CLOSED = 128 + 13  # as a shell reports a command ended by SIGPIPE


def main(argv: list[str] | None = None) -> int:
    """The command's exit code. A reader that stops early (`vmem-lsp check . | head`) ends the
    command quietly, as it would a C tool: no traceback about the closed pipe."""
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except BrokenPipeError:
        import os

        # Python flushes stdout again at exit; point it at nothing so that flush cannot raise.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_PIPE_CLOSED


def _main(argv: list[str]) -> int:
    if argv[:1] == ["worker"]:  # its own options: --cache-dir, --max-seconds, ...
        return run_worker(argv[1:])
    args = build_parser().parse_args(argv)
    from ..lifetime import exit_with_children

    exit_with_children()  # a signal to us reaches every worker we started
    try:
        return args.run(args)
    except BrokenPipeError:
        raise
    except Exception as error:  # an internal error: say so, exit 2, never a silent 0 or a 1 that blames the code
        import traceback

        traceback.print_exc()
        print(f"vmem-lsp: internal error: {error}", file=sys.stderr)
        return EXIT_ERROR
