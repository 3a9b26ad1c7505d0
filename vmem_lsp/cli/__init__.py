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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:  # its own options: --cache-dir, --max-seconds, ...
        return run_worker(argv[1:])
    args = build_parser().parse_args(argv)
    from ..lifetime import exit_with_children

    exit_with_children()  # a signal to us reaches every worker we started
    try:
        return args.run(args)
    except Exception as error:  # an internal error: say so, exit 2, never a silent 0 or a 1 that blames the code
        import traceback

        traceback.print_exc()
        print(f"vmem-lsp: internal error: {error}", file=sys.stderr)
        return EXIT_ERROR
