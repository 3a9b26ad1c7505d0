"""`vmem-lsp sweep`: which configs of a kernel fit on which chip, and
`vmem-lsp sweep --table FILE.json`: check a team's tuned-block-size table."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any

from .common import EXIT_ERROR, EXIT_FOUND, EXIT_OK, emit, progress_bar
from .compiler import start_workers

# Configs per chip the compiler estimates for --rank speed, the roofline's best: on jax's
# matmul (18 configs, v5e and v6e) the compiler's fastest was within the roofline's best 3.
RANK_TOP = 5


def add_parser(commands) -> None:
    sweep = commands.add_parser(
        "sweep",
        help="which configs of a kernel fit on which chip: a bracketed list in an example is an axis",
        description="SPEC is 'path.py:function(bf16[8192, 8192], bm=[256, 512, 1024])', "
        "'package.module:function(...)', or a file whose # vmem: lines hold lists; "
        "with none, the pyproject examples that hold lists.",
    )
    sweep.add_argument("specs", nargs="*", metavar="SPEC")
    sweep.add_argument("--target", help="chips, comma-separated (v4, v5e, v5p, v6e, v7x)")
    sweep.add_argument("--format", choices=("text", "json", "csv"), default="text")
    sweep.add_argument("--plot", metavar="FILE", help="a picture of the fit frontier (.png, .svg); needs matplotlib")
    sweep.add_argument(
        "--budget-compiles",
        type=int,
        metavar="N",
        help="compile at most N configs x chips; the rest are reported undecided, never guessed",
    )
    sweep.add_argument(
        "--table",
        metavar="FILE.json",
        help="check a table: a JSON list of {target, example} entries, each on its own chip",
    )
    sweep.add_argument(
        "--rank",
        choices=("speed",),
        help="speed: rank the configs that fit on each chip by the compiler's static cycle estimate "
        "(several compiles' time each; cycles compare within one chip only)",
    )
    sweep.add_argument(
        "--rank-top",
        type=int,
        metavar="N",
        default=RANK_TOP,
        help=f"estimate only the N best configs of each chip by a roofline (default {RANK_TOP}; 0: every config "
        "that fits)",
    )
    sweep.add_argument("--jobs", "-j", type=int, help="compiles at once (default: cores minus one)")
    sweep.add_argument("--cache-dir", help="where compile results are kept")
    sweep.add_argument("--no-cache", action="store_true", help="compile everything again")
    sweep.add_argument("--output", "-o", help="write the report to this file instead of stdout")
    sweep.set_defaults(run=run)


def settings_for(args):
    """pyproject's settings for this folder, overridden by the command line."""
    from ..config import cache_dir_change, load_settings, parse_targets

    settings = load_settings(os.getcwd())
    changes: dict[str, Any] = {}
    if args.target:
        changes["targets"] = parse_targets(args.target)
    if cache_dir := cache_dir_change(args.cache_dir, args.no_cache, os.getcwd()):
        changes["cache_dir"] = cache_dir
    if args.jobs:
        changes["jobs"] = max(1, args.jobs)
    return dataclasses.replace(settings, **changes)


def sweeps_for(args, settings) -> list:
    """The sweeps the arguments name, or SweepError."""
    from ..source.directives import sweep_axes
    from ..sweep.spec import SweepError, parse_spec, sweeps_in

    found = []
    for spec in args.specs:
        if os.path.isfile(spec):
            with open(spec, encoding="utf-8") as f:
                in_file = sweeps_in(f.read(), os.path.abspath(spec))
            if not in_file:
                raise SweepError(f"{spec} has no # vmem: line with a list to sweep")
            found += in_file
        else:
            found.append(parse_spec(spec))
    if not args.specs:
        root = os.path.dirname(settings.config_path or os.path.abspath("pyproject.toml"))
        found += [parse_spec(entry, root) for entry in settings.examples if sweep_axes(entry.partition(":")[2])]
        if not found:
            raise SweepError(
                "nothing to sweep: give a SPEC such as "
                "'examples/matmul.py:matmul(bf16[8192, 8192], bf16[8192, 8192], bm=[256, 512])'"
            )
    return found


def run(args) -> int:
    from ..config import ConfigError
    from ..sweep.spec import SweepError, check_size

    try:
        settings = settings_for(args)
    except ConfigError as error:
        print(f"vmem-lsp sweep: {error}", file=sys.stderr)
        return EXIT_ERROR
    if args.table:
        return run_table(args, settings)
    if args.rank_top < 0:
        print("vmem-lsp sweep: --rank-top N needs N of 0 (every config) or more", file=sys.stderr)
        return EXIT_ERROR
    try:
        sweeps = sweeps_for(args, settings)
        check_size(sweeps, args.budget_compiles)
    except (SweepError, OSError) as error:
        print(f"vmem-lsp sweep: {error}", file=sys.stderr)
        return EXIT_ERROR
    from ..sweep.output import FORMATS, plot
    from ..sweep.run import run_sweep

    budget = args.budget_compiles
    rendered, code = [], EXIT_OK
    for sweep in sweeps:
        bar = progress_bar("config")
        try:
            outcome = run_sweep(
                sweep,
                settings,
                budget=budget,
                use_cache=not args.no_cache,
                progress=bar,
                rank=args.rank == "speed",
                rank_top=args.rank_top or None,
            )
        except SweepError as error:
            print(f"vmem-lsp sweep: {error}", file=sys.stderr)
            return EXIT_ERROR
        finally:
            if bar is not None:
                bar.close()
        if budget is not None:
            budget = max(budget - outcome.compiles, 0)
        rendered.append(FORMATS[args.format](outcome))
        for chip, why in outcome.no_compiler.items():  # its configs were not checked: never a pass
            print(f"vmem-lsp sweep: {chip}: not checked: {why}", file=sys.stderr)
            code = EXIT_FOUND if code == EXIT_OK else code
        if args.plot:
            stem, suffix = os.path.splitext(args.plot)
            target = args.plot if len(sweeps) == 1 else f"{stem}-{len(rendered)}{suffix}"
            try:
                plot(outcome, target)
            except RuntimeError as error:
                print(f"vmem-lsp sweep: {error}", file=sys.stderr)
                code = EXIT_ERROR
    emit("\n".join(rendered), args.output)
    return code


def run_table(args, settings) -> int:
    """Each {target, example} entry compiled on its own chip; 1 if any overflows or cannot be checked."""
    from ..compile.backend import cache_for
    from ..engine import run_example
    from ..sweep.decide import Config, compiled_verdict
    from ..sweep.spec import SweepError, one_config

    try:
        with open(args.table, encoding="utf-8") as f:
            entries = json.load(f)
        if not isinstance(entries, list) or not all(
            isinstance(e, dict) and {"target", "example"} <= set(e) for e in entries
        ):
            raise SweepError('the table must be a JSON list of {"target": ..., "example": ...} objects')
    except (OSError, ValueError) as error:
        print(f"vmem-lsp sweep: {args.table}: {error}", file=sys.stderr)
        return EXIT_ERROR
    from ..config import parse_targets
    from ..families import family_of

    cache = cache_for(settings, enabled=not args.no_cache)
    worker = start_workers(settings)
    if worker is None:
        return EXIT_ERROR
    rows, code = [], EXIT_OK
    try:
        for entry in entries:
            try:
                (target,) = parse_targets(entry["target"])
                example = one_config(entry["example"])
            except (ValueError, SweepError) as error:
                rows.append({**entry, "fits": None, "error": str(error)})
                code = EXIT_FOUND
                continue
            result, _ = run_example(example, target, settings, cache, worker)
            verdict = compiled_verdict(Config(0, {}, target, result), result, family_of(target))
            rows.append(
                {**entry, "fits": verdict.fits, "used": verdict.used, "limit": verdict.limit, "error": verdict.error}
            )
            if verdict.fits is not True:
                code = EXIT_FOUND
    finally:
        worker.stop()
    emit(json.dumps(rows, indent=2) + "\n" if args.format == "json" else table_text(rows), args.output)
    return code


def table_text(rows: list[dict]) -> str:
    from ..render import size

    lines = []
    for r in rows:
        word = "fits" if r.get("fits") else "error" if r.get("fits") is None else "OVER"
        figures = f" {size(r['used'])} of {size(r['limit'])}" if r.get("used") and r.get("limit") else ""
        lines.append(
            f"{r['target']:4s} {word:5s}{figures}  {r['example']}" + (f"  ({r['error']})" if r.get("error") else "")
        )
    bad = sum(r.get("fits") is not True for r in rows)
    lines.append(f"{len(rows) - bad} of {len(rows)} entries fit")
    return "\n".join(lines) + "\n"
