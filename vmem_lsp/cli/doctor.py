"""`vmem-lsp doctor [PATH]`: what this machine can do (the checks themselves are vmem_lsp/doctor.py)."""

from __future__ import annotations


def add_parser(commands) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="what this machine can do: versions, the worker, a tiny compile "
        "per chip, the cache, memory, the settings and where each came from",
    )
    doctor.add_argument("path", nargs="?", default=".", metavar="PATH", help="the project (default: this folder)")
    doctor.add_argument("--format", choices=("text", "json"), default="text")
    doctor.add_argument("--worker", help="try this worker command instead of the configured one")
    doctor.add_argument("--python", help="the worker's Python (a venv's interpreter or folder), as check's --python")
    doctor.set_defaults(run=run)


def run(args) -> int:
    from ..doctor import run as diagnose_and_print

    return diagnose_and_print(args)
