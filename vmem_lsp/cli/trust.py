"""`vmem-lsp trust [PATH]`, `trust --list`, `vmem-lsp untrust [PATH]`: the
user's own list of folders whose code the language server may run."""

from __future__ import annotations

import os
import sys

from .common import EXIT_ERROR, EXIT_FOUND, EXIT_OK


def add_parser(commands) -> None:
    trust = commands.add_parser(
        "trust",
        help="let the language server run the code of a folder (its examples, "
        "the modules they import, the worker command of its pyproject.toml)",
    )
    trust.add_argument("path", nargs="?", default=".", metavar="PATH", help="the folder (default: this one)")
    trust.add_argument("--list", action="store_true", help="print the trusted folders")
    trust.set_defaults(run=run)
    untrust = commands.add_parser("untrust", help="take a folder off the trusted list")
    untrust.add_argument("path", nargs="?", default=".", metavar="PATH")
    untrust.set_defaults(run=run)


def run(args) -> int:
    from .. import trust

    if args.command == "trust" and args.list:
        for entry in trust.entries():
            print(entry)
        return EXIT_OK
    if not os.path.isdir(args.path):
        print(f"vmem-lsp: not a folder: {args.path}", file=sys.stderr)
        return EXIT_ERROR
    if args.command == "trust":
        entry = trust.add(args.path)
        print(f"trusted {entry}: the language server may run the examples and worker command of files below it")
        if os.path.islink(os.path.abspath(args.path).rstrip(os.sep)):
            print(
                f"note: {args.path} is a symlink; files opened through it are not trusted, only through {entry}",
                file=sys.stderr,
            )
        return EXIT_OK
    if trust.remove(args.path):
        print(f"no longer trusted: {os.path.realpath(args.path)}")
        return EXIT_OK
    print(f"vmem-lsp: {os.path.realpath(args.path)} was not trusted", file=sys.stderr)
    return EXIT_FOUND
