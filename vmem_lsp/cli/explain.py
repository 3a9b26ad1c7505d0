"""`vmem-lsp explain [LOG|-]`: the VMEM reports in a TPU job's log and the
compile errors in a GPU job's, explained (no compiler needed), and with --source
put on the lines that made them."""

from __future__ import annotations

import sys

from .common import EXIT_ERROR, EXIT_FOUND, EXIT_OK


def add_parser(commands) -> None:
    explain = commands.add_parser(
        "explain",
        help="find the VMEM reports in a TPU job's log (shared memory and other compile errors in a GPU job's) "
        "and explain them (no compiler needed)",
    )
    explain.add_argument("log", nargs="?", default="-", metavar="LOG", help="the log file (default: stdin, or -)")
    explain.add_argument(
        "--target", help="the chip or GPU the job ran on (v4, v5e, v5p, v6e, v7x, h100, ...), for limits and ways out"
    )
    explain.add_argument("--format", choices=("text", "json", "sarif", "github"), default="text")
    explain.add_argument(
        "--source",
        nargs="+",
        metavar="PATH",
        help="put each report on the pallas_call and BlockSpecs of these files that made it",
    )
    explain.set_defaults(run=run)


def run(args) -> int:
    """`vmem-lsp explain [LOG|-]`: every report in the log, explained; exit 0
    (a log is evidence, not a check), 2 when it cannot be read."""
    import json

    from ..config import ConfigError, parse_targets
    from ..explain import explain_json, explain_text, find_reports, placing, source_sites

    try:
        target = parse_targets(args.target)[0] if args.target else None
    except ConfigError as error:
        print(f"vmem-lsp: {error}", file=sys.stderr)
        return EXIT_ERROR
    name = "stdin" if args.log == "-" else args.log
    try:
        stream = (
            open(sys.stdin.fileno(), encoding="utf-8", errors="replace", closefd=False)
            if args.log == "-"
            else open(args.log, encoding="utf-8", errors="replace")
        )
    except OSError as error:
        print(f"vmem-lsp: cannot read {name}: {error.strerror}", file=sys.stderr)
        return EXIT_ERROR
    count, diagnostics = 0, []
    candidates = source_sites(args.source) if args.source else None
    with stream:
        found = find_reports(line.replace("\0", "") for line in stream)
        reports = []
        for f in found:
            count += 1
            placement = None
            if candidates is not None:
                found_here, placement = placing(f, target, name, candidates)
                diagnostics += found_here
                if not found_here:
                    why = placement.why if placement else "nothing in it names or shapes a pallas_call of the sources"
                    print(f"{name}, line {f.line}: the report is not placed: {why}", file=sys.stderr)
            if args.format == "json":
                reports.append(explain_json(f, target))
            elif args.format == "text":
                sys.stdout.write(("\n" if count > 1 else "") + explain_text(f, target, name, placement))
    if args.format == "json":
        from ..output.formats import as_dict

        sys.stdout.write(
            json.dumps({"log": name, "reports": reports, "diagnostics": [as_dict(d) for d in diagnostics]}, indent=2)
            + "\n"
        )
    elif args.format == "text" and diagnostics:
        from ..output import render

        sys.stdout.write("\n" + render("text", diagnostics, f"{len(diagnostics)} diagnostics from {name}"))
    elif args.format in ("sarif", "github"):
        from ..output import render

        sys.stdout.write(render(args.format, diagnostics, f"{count} reports in {name}"))
    if not count:
        print(f"no VMEM report in {name}", file=sys.stderr if args.format == "json" else sys.stdout)
    # As check: errors placed on the sources' lines fail the run (a CI step), the report alone does not.
    return EXIT_FOUND if any(d.severity == "error" for d in diagnostics) else EXIT_OK
