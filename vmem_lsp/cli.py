"""The command line: `vmem-lsp check PATH...` and `vmem-lsp worker`."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from . import __version__

EXIT_OK, EXIT_FOUND, EXIT_ERROR = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vmem-lsp", description=__doc__)
    parser.add_argument(
        "--version",
        action=VersionAction,
        nargs=0,
        default=argparse.SUPPRESS,
        help="print the versions of vmem-lsp, jax, jaxlib and libtpu, and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True)
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
        help="log to stderr what the workers did, with the last output of one that died",
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
    commands.add_parser(
        "worker",
        help="run a compile worker on stdin/stdout (JSON lines); "
        "options: --cache-dir, --max-request-mb, --max-seconds, --max-memory-mb",
    )
    trust = commands.add_parser(
        "trust",
        help="let the language server run the code of a folder (its examples, "
        "the modules they import, the worker command of its pyproject.toml)",
    )
    trust.add_argument("path", nargs="?", default=".", metavar="PATH", help="the folder (default: this one)")
    trust.add_argument("--list", action="store_true", help="print the trusted folders")
    untrust = commands.add_parser("untrust", help="take a folder off the trusted list")
    untrust.add_argument("path", nargs="?", default=".", metavar="PATH")
    explain = commands.add_parser(
        "explain", help="find the VMEM reports in a TPU job's log and explain them (no compiler needed)"
    )
    explain.add_argument("log", nargs="?", default="-", metavar="LOG", help="the log file (default: stdin, or -)")
    explain.add_argument("--target", help="the chip the job ran on (v4, v5e, v5p, v6e, v7x), for limits and ways out")
    explain.add_argument("--format", choices=("text", "json", "sarif", "github"), default="text")
    explain.add_argument(
        "--source",
        nargs="+",
        metavar="PATH",
        help="put each report on the pallas_call and BlockSpecs of these files that made it",
    )
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
    doctor = commands.add_parser(
        "doctor",
        help="what this machine can do: versions, the worker, a tiny compile "
        "per chip, the cache, memory, the settings and where each came from",
    )
    doctor.add_argument("path", nargs="?", default=".", metavar="PATH", help="the project (default: this folder)")
    doctor.add_argument("--format", choices=("text", "json"), default="text")
    doctor.add_argument("--worker", help="try this worker command instead of the configured one")
    from .sweep.command import add_parser as add_sweep

    add_sweep(commands)
    serve = commands.add_parser("serve", help="run the language server on stdin/stdout")
    serve.add_argument("--stdio", action="store_true", help="accepted for clients that pass it; stdio is the transport")
    return parser


def version_text() -> str:
    """vmem-lsp's version and the installed jax, jaxlib and libtpu (from their metadata: jax is not imported)."""
    from importlib.metadata import PackageNotFoundError, version

    lines = [f"vmem-lsp {__version__}"]
    for name in ("jax", "jaxlib", "libtpu"):
        try:
            lines.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            lines.append(f"{name} not installed")
    return "\n".join(lines)


class VersionAction(argparse.Action):
    """--version: the versions are looked up only when asked for."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def shard_arg(text: str):
    """`--shard K/N` for argparse."""
    from .shard import ShardError, parse_shard

    try:
        return parse_shard(text)
    except ShardError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def settings_for(args):
    from .config import cache_location, load_settings, parse_scoped_limits, parse_targets

    settings = load_settings(args.paths[0])
    changes = {}
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
    if args.cache_dir:
        changes["cache_dir"] = cache_location(args.cache_dir, os.getcwd())  # a URL stays one
    if args.no_compile:
        changes["compile"] = False
    if args.worker_fallback:
        changes["worker_fallback"] = True
    if args.jobs:
        changes["jobs"] = max(1, args.jobs)
    if args.require_examples:
        changes["require_examples"] = True
    if args.backend:
        changes["backend"] = args.backend
    if args.ray_address:
        changes.update(ray_address=args.ray_address, backend=args.backend or "ray")
    return dataclasses.replace(settings, **changes)


class ProgressBar:
    """kernels done / total and the current file, on a terminal (tqdm): the
    engine's Progress as the CLI shows it."""

    bar = None

    def __init__(self, unit: str = "kernel"):
        self.unit = unit

    def start(self, total: int) -> None:
        """A new bar (a run may have phases: a sweep traces, then compiles)."""
        from tqdm import tqdm

        self.close()
        if total:
            self.bar = tqdm(total=total, unit=self.unit, file=sys.stderr, leave=False, dynamic_ncols=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def line(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)

    def advance(self, where: str) -> None:
        if self.bar is not None:
            self.bar.set_description(where, refresh=False)
            self.bar.update(1)


def checked(args, settings, worker):
    """engine.check with a progress bar on a terminal."""
    from .engine import check

    bar = ProgressBar() if sys.stderr.isatty() else None
    try:
        return check(args.paths, settings, use_cache=not args.no_cache, progress=bar, worker=worker, shard=args.shard)
    finally:
        if bar is not None:
            bar.close()


def run_check(args) -> int:
    from .config import ConfigError
    from .engine import exit_code
    from .output import render

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
    from .compile.backend import BackendError, runner_for

    try:
        worker = runner_for(settings)
    except BackendError as error:
        print(f"vmem-lsp: {error}", file=sys.stderr)
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
    from .output.formats import tally

    summary = (
        tally(outcome.diagnostics) + f" in {outcome.examples} example"
        f"{'s' * (outcome.examples != 1)} on {', '.join(settings.targets)} "
        f"({outcome.compiles} {'compiled' if settings.compile else 'traced (layout model only)'}, "
        + (f"{outcome.reused} already compiled by this run, " if outcome.reused else "")
        + f"{outcome.cache_hits} cached, {outcome.seconds:.1f} s)"
        + (f"; {outcome.unchecked} kernel{'s' * (outcome.unchecked != 1)} not checked" if outcome.unchecked else "")
        + (
            f"; shard {args.shard}: {len(outcome.shard.done)} of {len(outcome.shard.plan)} pairs"
            if outcome.shard
            else ""
        )
    )
    if outcome.shard and args.format != "json":
        print(
            f"vmem-lsp: shard {args.shard} reports its part only; for the run's report, write each shard's "
            f"--format json and join them with `vmem-lsp merge`",
            file=sys.stderr,
        )
    if outcome.shard and args.format == "json":
        from .output.formats import json_text
        from .output.merge import shard_dict

        rendered = json_text(
            outcome.diagnostics,
            summary,
            outcome.sources.notebook,
            {"shard": shard_dict(outcome.shard, settings.targets)},
        )
    else:
        rendered = render(args.format, outcome.diagnostics, summary, outcome.sources.notebook)
    emit(rendered, args.output)
    report_internal_errors(outcome)
    return exit_code(outcome)


def emit(rendered: str, output: str | None) -> None:
    """The report, to --output or stdout."""
    if output:
        with open(output, "w") as f:
            f.write(rendered)
    else:
        sys.stdout.write(rendered)


def run_merge(args) -> int:
    """`vmem-lsp merge REPORT.json...`: the shards' reports as one run's; exit 2
    when they are not one whole run (overlapping, missing, of other versions)."""
    from .engine import SourceFiles
    from .output import render
    from .output.merge import MergeError, merge, read_shard

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
    emit(render(args.format, merged.diagnostics, merged.summary, SourceFiles().notebook), args.output)
    from .render import display_path

    for path in merged.internal_errors:
        print(
            f"vmem-lsp: internal error locating the kernels of {display_path(path)} "
            f"(its traceback is in the log of the shard that owns it)",
            file=sys.stderr,
        )
    return merged.exit_code()


def add_examples(outcome, settings) -> int:
    """--add-examples: each template on a new line above its function, as
    `ruff --add-noqa` writes its comments; what was written goes to stderr."""
    from . import render
    from .engine import example_templates
    from .fixes.edits import TextEdit
    from .render import display_path
    from .source.model import Span

    by_path: dict = {}
    for template in example_templates(outcome, settings):
        by_path.setdefault(template.path, []).append(template)
    for path, templates in sorted(by_path.items()):
        edits = [TextEdit(path, Span(t.line, 0, t.line, 0), t.directive) for t in templates]
        if (problem := write_edits(path, outcome.sources.text(path), edits)) is not None:
            print(f"{display_path(path)}: not written: {problem}", file=sys.stderr)
            continue
        for t in templates:
            found = f" (shapes from {t.found_in})" if t.found_in else " (fill in the shapes)" if t.unfinished else ""
            print(f"{render.at(path, t.line)}: added # vmem: {t.call}{found}", file=sys.stderr)
    count = sum(len(t) for t in by_path.values())
    print(f"{count} example{'s' * (count != 1)} added", file=sys.stderr)
    return EXIT_OK


def report_internal_errors(outcome) -> None:
    """Our bugs go to stderr, whole; everything else was still checked and reported."""
    from .render import display_path

    for path, details in outcome.internal_errors:
        sys.stderr.write(
            f"vmem-lsp: internal error locating the kernels of {display_path(path)}:\n{details.rstrip()}\n"
        )


def fix_files(outcome, settings, worker, use_cache: bool, write: bool) -> int:
    """Find fixes for the overflowing examples; write them (--fix) or print
    them as a diff (--diff). Returns how many files change."""
    from . import render
    from .engine import SourceFiles, find_fixes
    from .fixes.edits import apply_edits
    from .fixes.plan import unified_diff
    from .render import display_path

    sources = outcome.sources or SourceFiles()
    edits_by_path: dict = {}
    for example, fixes in find_fixes(outcome, settings, worker, use_cache):
        where = render.at(example.path, example.line)
        best = next((f for f in fixes if f.verified), None)
        if best is None:
            print(
                f"{where}: no compiler-verified fix found"
                + (f" ({len(fixes)} estimated: {fixes[0].title})" if fixes else ""),
                file=sys.stderr,
            )
            continue
        print(f"{where}: {'fixed' if write else 'would fix'}: {best.title} [{best.compiles} compiles]", file=sys.stderr)
        for edit in best.edits:
            edits_by_path.setdefault(edit.path, []).append(edit)
    for path, edits in sorted(edits_by_path.items()):
        before = sources.text(path)
        if not write:
            notebook = sources.notebook(path)
            for label, old, new in (
                notebook.edited_cells(edits) if notebook else [("", before, apply_edits(before, edits))]
            ):
                sys.stdout.write(unified_diff(path, old, new, display_path(path) + label))
        elif (problem := write_edits(path, before, edits)) is not None:
            print(f"{display_path(path)}: not fixed: {problem}", file=sys.stderr)
    return len(edits_by_path)


def write_edits(path: str, checked: str, edits: list) -> str | None:
    """Apply edits to the file on disk, keeping its line ends, all or nothing
    (a temporary file renamed over it). Refuses when the file no longer holds
    the text that was checked. Returns why it did not write, or None."""
    import shutil
    import tempfile

    from .fixes.edits import apply_edits, in_line_endings
    from .source.notebook import NotebookError, is_notebook, read_notebook

    try:
        with open(path, encoding="utf-8", newline="") as f:
            raw = f.read()
    except (OSError, UnicodeDecodeError) as error:
        return f"cannot read it again ({error})"
    if is_notebook(path):
        try:
            notebook = read_notebook(raw, path)
            if notebook.module != checked:
                return "it changed on disk while fixes were searched; run the check again"
            after = notebook.apply_edits(edits)
        except NotebookError as error:
            return str(error)
    else:
        if raw.replace("\r\n", "\n").replace("\r", "\n") != checked:
            return "it changed on disk while fixes were searched; run the check again"
        if "\r" in raw.replace("\r\n", ""):
            return "it has lone \\r line ends, which fixes do not edit"
        after = apply_edits(raw, in_line_endings(edits, raw))
    folder = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile(
        "w",
        encoding="utf-8",
        newline="",
        dir=folder,
        delete=False,
        prefix=".vmem-fix-",
        suffix=os.path.splitext(path)[1],
    ) as temporary:
        temporary.write(after)
    try:
        shutil.copymode(path, temporary.name)
        os.replace(temporary.name, path)
    except OSError as error:
        os.unlink(temporary.name)
        return f"cannot replace it ({error})"
    return None


def run_explain(args) -> int:
    """`vmem-lsp explain [LOG|-]`: every report in the log, explained; exit 0
    (a log is evidence, not a check), 2 when it cannot be read."""
    import json

    from .config import ConfigError, parse_targets
    from .explain import explain_json, explain_text, find_reports, placed, source_sites

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
            if candidates is not None:
                found_here = placed(f, target, name, candidates)
                diagnostics += found_here
                if not found_here:
                    print(
                        f"{name}, line {f.line}: the report is not placed: nothing in it names or shapes "
                        f"a pallas_call of the sources",
                        file=sys.stderr,
                    )
            if args.format == "json":
                reports.append(explain_json(f, target))
            elif args.format == "text":
                sys.stdout.write(("\n" if count > 1 else "") + explain_text(f, target, name))
    if args.format == "json":
        from .output.formats import as_dict

        sys.stdout.write(
            json.dumps({"log": name, "reports": reports, "diagnostics": [as_dict(d) for d in diagnostics]}, indent=2)
            + "\n"
        )
    elif args.format == "text" and diagnostics:
        from .output import render

        sys.stdout.write("\n" + render("text", diagnostics, f"{len(diagnostics)} diagnostics from {name}"))
    elif args.format in ("sarif", "github"):
        from .output import render

        sys.stdout.write(render(args.format, diagnostics, f"{count} reports in {name}"))
    if not count:
        print(f"no VMEM report in {name}", file=sys.stderr if args.format == "json" else sys.stdout)
    return EXIT_OK


def run_trust(args) -> int:
    """`vmem-lsp trust [PATH]`, `--list`, `vmem-lsp untrust [PATH]`: the user's own list."""
    from . import trust

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


def log_to_stderr() -> None:
    """vmem-lsp's own log (not its libraries') at INFO on stderr."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("vmem-lsp %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("vmem_lsp")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:  # its own options: --cache-dir, --max-seconds, ...
        from .compile.backend import worker_main

        return worker_main(argv[1:])
    args = build_parser().parse_args(argv)
    from .lifetime import exit_with_children

    exit_with_children()  # a signal to us reaches every worker we started
    if args.command == "serve":
        from .server.app import serve

        log_to_stderr()  # the editor's log of the server
        return serve()
    if args.command in ("trust", "untrust"):
        return run_trust(args)
    if args.command == "explain":
        return run_explain(args)
    if args.command == "merge":
        return run_merge(args)
    if args.command == "doctor":
        from .doctor import run as run_doctor

        return run_doctor(args)
    if args.command == "sweep":
        from .sweep.command import run as run_sweep

        return run_sweep(args)
    if args.verbose:
        log_to_stderr()
    try:
        return run_check(args)
    except Exception as error:  # an internal error: say so, exit 2, never a silent 0 or 1
        import traceback

        traceback.print_exc()
        print(f"vmem-lsp: internal error: {error}", file=sys.stderr)
        return EXIT_ERROR
