"""`vmem-lsp merge REPORT.json...`: the JSON reports of `check --shard K/N` jobs
joined into one report and exit code, as one unsharded check gives."""

from __future__ import annotations

import sys

from .common import EXIT_ERROR, emit


def add_parser(commands) -> None:
    merge = commands.add_parser(
        "merge",
        help="join the JSON reports of `check --shard K/N` jobs into one "
        "report and exit code, as one unsharded check gives",
    )
    merge.add_argument("reports", nargs="+", metavar="REPORT.json")
    merge.add_argument(
        "--format",
        choices=("text", "json", "sarif", "github"),
        default="text",
        help="github: GitHub Actions annotations",
    )
    merge.add_argument("--output", "-o", help="write the report to this file instead of stdout")
    merge.add_argument("--show-fits", action="store_true", help="print a line for each kernel that fits (VMEM007)")
    merge.set_defaults(run=run)


def run(args) -> int:
    """The shards' reports as one run's; exit 2 when they are not one whole run
    (overlapping, missing, of other versions)."""
    from ..engine import SourceFiles
    from ..output import render
    from ..output.merge import MergeError, merge, read_shard

    try:
        reports = []
        for name in args.reports:
            with open(name, encoding="utf-8") as f:
                reports.append(read_shard(name, f.read()))
        merged = merge(reports)
    except OSError as error:
        print(f"vmem-lsp merge: cannot read {error.filename}: {error.strerror}", file=sys.stderr)
        return EXIT_ERROR
    except MergeError as error:
        print(f"vmem-lsp merge: {error}", file=sys.stderr)
        return EXIT_ERROR
    except (KeyError, TypeError, ValueError) as error:  # a shard's JSON edited or cut short
        print(f"vmem-lsp merge: a shard report is malformed ({type(error).__name__}: {error})", file=sys.stderr)
        return EXIT_ERROR
    emit(render(args.format, merged.diagnostics, merged.summary, SourceFiles().notebook, args.show_fits), args.output)
    from ..render import display_path

    for path in merged.internal_errors:
        print(
            f"vmem-lsp: internal error locating the kernels of {display_path(path)} "
            f"(its traceback is in the log of the shard that owns it)",
            file=sys.stderr,
        )
    return merged.exit_code()
