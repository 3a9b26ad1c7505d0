"""`vmem-lsp check PATH...`: compile the examples, report the overflows; with
--fix or --diff, the compiler-verified fixes (fix.py)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any

from .common import EXIT_ERROR, EXIT_FOUND, EXIT_OK, emit, log_to_stderr, progress_bar
from .compiler import start_workers


def add_parser(commands) -> None:
    check = commands.add_parser("check", help="compile the examples in PATH... and report VMEM overflows")
    check.add_argument("paths", nargs="+", metavar="PATH")
    check.add_argument("--target", help="chips to check, comma-separated (v4, v5e, v5p, v6e, v7x)")
    check.add_argument(
        "--format",
        choices=("text", "json", "sarif", "github"),
        default="text",
        help="github: GitHub Actions annotations",
    )
    check.add_argument(
        "--no-cache", action="store_true", help="compile everything again; do not read or write the cache"
    )
    check.add_argument(
        "--no-compile",
        action="store_true",
        help="the layout model's verdict alone: trace the examples, compile nothing (works without libtpu)",
    )
    check.add_argument(
        "--cache-dir", help="where compile results are cached (default: .vmem_lsp_cache in the project root)"
    )
    check.add_argument("--timeout", type=float, help="seconds to lower and compile one kernel (default 300)")
    check.add_argument(
        "--trace-timeout",
        type=float,
        help="seconds for the example's Python: importing its module and running it (default 60)",
    )
    check.add_argument(
        "--scoped-vmem-limit",
        metavar="CHIP=SIZE,...",
        help="the compiler's scoped VMEM limit per chip, e.g. v5e=64MiB (as "
        "--xla_tpu_scoped_vmem_limit_kib in LIBTPU_INIT_ARGS)",
    )
    check.add_argument(
        "--worker",
        help="the worker command (default: this Python, -m vmem_lsp worker), e.g. 'ssh tpu-vm vmem-lsp worker'",
    )
    check.add_argument(
        "--no-pyproject-worker",
        action="store_true",
        help="never run a worker command that pyproject.toml names; compile locally",
    )
    check.add_argument(
        "--worker-fallback",
        action="store_true",
        help="when the configured worker dies (a lost SSH connection), compile locally",
    )
    check.add_argument(
        "--python",
        metavar="PATH",
        help="the Python the worker compiles in, with its jax and libtpu (default: VIRTUAL_ENV, "
        "else .venv in the project root, else vmem-lsp's own)",
    )
    check.add_argument(
        "--jax",
        action="append",
        metavar="VERSION",
        help="check with this jax (and the libtpu its [tpu] extra picks) too, in an environment vmem-lsp "
        "makes once and keeps; repeatable or comma-separated; reports what changes from the project's own",
    )
    check.add_argument("--jobs", "-j", type=int, help="workers at once (default: cores minus one)")
    check.add_argument(
        "--backend",
        choices=("local", "ray"),
        help="where compiles run: local worker processes (the default), or tasks on a Ray cluster "
        "(needs the ray extra: pip install 'vmem-lsp[ray]')",
    )
    check.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="the Ray cluster for --backend ray (default: RAY_ADDRESS, else a local cluster for this run)",
    )
    check.add_argument(
        "--add-examples",
        action="store_true",
        help="write a `# vmem:` template above the function of every pallas_call no example reaches "
        "(shapes from the project's tests where they call it with literal shapes); idempotent",
    )
    check.add_argument(
        "--faster-fixes",
        action="store_true",
        help="with --fix/--diff: of the compiler-verified fixes, take the fastest by the compiler's cycle "
        "estimate (a few more compiles per fix; the estimate needs v5e or newer)",
    )
    check.add_argument(
        "--spills",
        action="store_true",
        help="GPU targets: warn of each kernel that spills registers to local memory (VMEM054), as ptxas -v "
        "reports it (a ptxas run per Triton kernel: about as long again as its compile)",
    )
    check.add_argument(
        "--require-examples",
        action="store_true",
        help="a pallas_call that no example reaches is an error (VMEM020), not a warning: for CI",
    )
    check.add_argument("--output", "-o", help="write the report to this file instead of stdout")
    check.add_argument(
        "--shard",
        type=shard_arg,
        metavar="K/N",
        help="check only the K-th of N parts of the (example, chip) pairs, for a CI matrix of N jobs; "
        "join their --format json reports with `vmem-lsp merge`",
    )
    check.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="log to stderr what the workers did, with the last output of one that died; implies --show-fits",
    )
    check.add_argument(
        "--show-fits",
        action="store_true",
        help="print a line (VMEM007) for each kernel that fits, with its grid, blocks and the VMEM they need "
        "(JSON always has them)",
    )
    fixing = check.add_mutually_exclusive_group()
    fixing.add_argument(
        "--fix",
        action="store_true",
        help="apply the best compiler-verified fix for each overflowing example, then check again",
    )
    fixing.add_argument(
        "--diff", action="store_true", help="print the fixes --fix would apply as a unified diff; change nothing"
    )
    check.set_defaults(run=run)


def shard_arg(text: str):
    """`--shard K/N` for argparse."""
    from ..shard import ShardError, parse_shard

    try:
        return parse_shard(text)
    except ShardError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def settings_for(args):
    """pyproject's settings for the first PATH, overridden by the command line."""
    from ..config import cache_dir_change, load_settings, parse_jax, parse_scoped_limits, parse_targets

    settings = load_settings(args.paths[0])
    changes: dict[str, Any] = {}
    if args.target:
        changes["targets"] = parse_targets(args.target)
    if args.timeout:
        changes["timeout"] = args.timeout
    if args.trace_timeout:
        changes["trace_timeout"] = args.trace_timeout
    if args.scoped_vmem_limit:
        changes["scoped_vmem_limit"] = parse_scoped_limits(args.scoped_vmem_limit)
        changes["scoped_vmem_limit_source"] = "--scoped-vmem-limit"
    if args.worker:
        changes.update(worker=args.worker, worker_source="--worker")
    elif settings.worker and settings.worker_source == "pyproject.toml":
        # A repository's pyproject can name any command: say so before it runs, or refuse it.
        if args.no_pyproject_worker:
            print(
                f"vmem-lsp: not running the worker from pyproject.toml (--no-pyproject-worker): {settings.worker}",
                file=sys.stderr,
            )
            changes.update(worker=None, worker_source=None)
        else:
            print(f"using worker from pyproject.toml: {settings.worker}", file=sys.stderr)
    if args.jax:
        changes["jax"] = parse_jax(args.jax)
    if args.python:
        changes.update(python=os.path.abspath(args.python), python_source="--python")
    if cache_dir := cache_dir_change(args.cache_dir, args.no_cache, os.getcwd()):  # a URL stays one
        changes["cache_dir"] = cache_dir
    if args.no_compile:
        changes["compile"] = False
    if args.worker_fallback:
        changes["worker_fallback"] = True
    if args.jobs:
        changes["jobs"] = max(1, args.jobs)
    if args.require_examples:
        changes["require_examples"] = True
    if args.faster_fixes:
        changes["faster_fixes"] = True
    if args.spills:
        changes["spills"] = True
    if args.backend:
        changes["backend"] = args.backend
    if args.ray_address:
        changes.update(ray_address=args.ray_address, backend=args.backend or "ray")
    return dataclasses.replace(settings, **changes)


def checked(args, settings, worker):
    """engine.check with a progress bar on a terminal."""
    from ..engine import check

    bar = progress_bar()
    try:
        return check(args.paths, settings, use_cache=not args.no_cache, progress=bar, worker=worker, shard=args.shard)
    finally:
        if bar is not None:
            bar.close()


def run(args) -> int:
    from ..config import ConfigError
    from ..engine import exit_code
    from ..output import render
    from .fix import add_examples, fix_files

    if args.verbose:
        log_to_stderr()
    missing = [p for p in args.paths if not os.path.exists(p)]
    if missing:
        print(f"vmem-lsp: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return EXIT_ERROR
    if args.shard and (args.fix or args.diff or args.add_examples):
        print(
            "vmem-lsp: --shard checks part of a run; --fix, --diff and --add-examples need all of it", file=sys.stderr
        )
        return EXIT_ERROR
    try:
        settings = settings_for(args)
    except ConfigError as error:
        print(f"vmem-lsp: {error}", file=sys.stderr)
        return EXIT_ERROR
    if settings.jax:
        return run_across(args, settings)
    worker = start_workers(settings)
    if worker is None:
        return EXIT_ERROR
    try:
        outcome = checked(args, settings, worker)
        if args.add_examples:
            return add_examples(outcome, settings)
        if args.fix or args.diff:
            changed = fix_files(outcome, settings, worker, use_cache=not args.no_cache, write=args.fix)
            if args.diff:
                report_internal_errors(outcome)
                return EXIT_ERROR if outcome.internal_errors else EXIT_FOUND if changed else EXIT_OK
            if changed:
                outcome = checked(args, settings, worker)
    finally:
        worker.stop()
    summary = summary_line(args, outcome, settings)
    if outcome.shard and args.format != "json":
        print(
            f"vmem-lsp: shard {args.shard} reports its part only; for the run's report, write each shard's "
            f"--format json and join them with `vmem-lsp merge`",
            file=sys.stderr,
        )
    if outcome.shard and args.format == "json":
        from ..output.formats import json_text
        from ..output.merge import shard_dict

        rendered = json_text(
            outcome.diagnostics,
            summary,
            outcome.sources.notebook,
            {"shard": shard_dict(outcome.shard, settings.targets)},
        )
    else:
        rendered = render(args.format, outcome.diagnostics, summary, outcome.sources.notebook, shows_fits(args))
    emit(rendered, args.output)
    report_internal_errors(outcome)
    report_losses(outcome)
    report_unmeasured_spills(outcome)
    return exit_code(outcome)


def run_across(args, settings) -> int:
    """`check --jax X`: the check with the project's own compiler, then with each listed
    jax in its managed environment, reported as one (compilers.across)."""
    import time

    from ..compile.backend import BackendError, compilers_for
    from ..compilers import CompilerRun, across
    from ..engine import compiled_chips, exit_code
    from ..output import render

    if args.shard or args.fix or args.diff or args.add_examples:
        print(
            "vmem-lsp: --jax compares whole checks; not with --shard, --fix, --diff or --add-examples", file=sys.stderr
        )
        return EXIT_ERROR
    if settings.worker or settings.backend == "ray":
        print(
            "vmem-lsp: --jax compiles in environments on this machine; not with a worker command or Ray",
            file=sys.stderr,
        )
        return EXIT_ERROR
    say = lambda text: print(f"vmem-lsp: {text}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    try:
        compilers = compilers_for(settings, say)
    except BackendError as error:
        print(f"vmem-lsp: {error}", file=sys.stderr)
        return EXIT_ERROR
    runs, outcomes = [], []
    for compiler, each in compilers:
        if len(compilers) > 1:
            say(f"checking with {compiler.described}")
        worker = start_workers(each)
        if worker is None:
            return EXIT_ERROR
        try:
            outcome = checked(args, each, worker)
        finally:
            worker.stop()
        outcomes.append(outcome)
        pairs = [(example, result) for example, _, result in outcome.results]
        runs.append(CompilerRun(compiler, outcome.diagnostics, compiled_chips(pairs)))
    combined = dataclasses.replace(
        outcomes[0],
        diagnostics=across(runs),
        compiles=sum(o.compiles for o in outcomes),
        traced=sum(o.traced for o in outcomes),
        reused=sum(o.reused for o in outcomes),
        cache_hits=sum(o.cache_hits for o in outcomes),
        seconds=time.perf_counter() - started,
        internal_errors=list(dict.fromkeys(e for o in outcomes for e in o.internal_errors)),
    )
    summary = summary_line(args, combined, settings) + compilers_clause(runs, combined.diagnostics)
    if args.format == "json":
        from ..output.formats import json_text

        extra = {"compilers": [run.compiler.as_dict() for run in runs]}
        rendered = json_text(combined.diagnostics, summary, combined.sources.notebook, extra)
    else:
        rendered = render(args.format, combined.diagnostics, summary, combined.sources.notebook, shows_fits(args))
    emit(rendered, args.output)
    report_internal_errors(combined)
    return exit_code(combined)


def compilers_clause(runs, diagnostics) -> str:
    """The summary's end under --jax: which compilers ran, and how many findings differ."""
    from ..compilers import differences

    ran = ", ".join(run.compiler.described for run in runs)
    differ = differences(diagnostics)
    return f"; compilers: {ran}; {differ} diagnostic{'s' * (differ != 1)} not alike on all of them"


def shows_fits(args) -> bool:
    return bool(args.show_fits or args.verbose)


def summary_line(args, outcome, settings) -> str:
    """The report's last line: what was found, in how many examples, on which chips, and how;
    then how many kernels fit and how close the closest is."""
    from ..output.formats import fit_tally, tally

    return (
        tally(outcome.diagnostics) + f" in {outcome.examples} example"
        f"{'s' * (outcome.examples != 1)} on {', '.join(settings.targets)} "
        f"({outcome.compiles} {'compiled' if settings.compile else 'traced (layout model only)'}, "
        + (f"{outcome.traced} traced for the model alone (no compiler here), " if outcome.traced else "")
        + (f"{outcome.reused} already compiled by this run, " if outcome.reused else "")
        + (f"{outcome.failed} not checked, " if outcome.failed else "")
        + f"{outcome.cache_hits} cached, {outcome.seconds:.1f} s)"
        + (f"; {outcome.unchecked} kernel{'s' * (outcome.unchecked != 1)} not checked" if outcome.unchecked else "")
        + (
            f"; shard {args.shard}: {len(outcome.shard.done)} of {len(outcome.shard.plan)} pairs"
            if outcome.shard
            else ""
        )
        + fit_tally(outcome.diagnostics)
    )


def report_losses(outcome) -> None:
    """What the worker's jax lacks (compile/jax_compat.py), once per run, on
    stderr: the report's formats stay what their readers parse."""
    seen: dict[str, None] = {}
    for _, _, result in outcome.results:
        seen.update(dict.fromkeys(result.losses))
    for loss in seen:
        print(f"vmem-lsp: {loss}", file=sys.stderr)


def report_unmeasured_spills(outcome) -> None:
    """Why --spills has no ptxas report for a kernel (no ptxas here), each reason once, on stderr."""
    seen = dict.fromkeys(call.no_ptxas for _, _, result in outcome.results for call in result.calls if call.no_ptxas)
    for why in seen:
        print(f"vmem-lsp: --spills: {why}", file=sys.stderr)


def report_internal_errors(outcome) -> None:
    """Our bugs go to stderr, whole; everything else was still checked and reported."""
    from ..render import display_path

    for path, details in outcome.internal_errors:
        sys.stderr.write(
            f"vmem-lsp: internal error locating the kernels of {display_path(path)}:\n{details.rstrip()}\n"
        )
