"""Where `vmem-lsp explain --source` puts the reports of `check`'s own
compiles, against where `check` puts them (issue 18: at least 95% on the same
lines), with the log's names kept and with them replaced by a neutral one.

    .venv/bin/python bench/bench_explain_placement.py [--chips v4,v5e,v5p,v6e,v7x] [--corpus check,captured]
    .venv/bin/python bench/bench_explain_placement.py --from bench/placement_results.jsonl

Two corpora:
- check: the kernels that have examples (examples/, tests/data/kernels/*.py
  but those that hang or crash the worker by design, and copies of jax's own
  kernels from tests/jax_ops.py). `check` runs them on each chip (compiles
  cached in --work); every report of a kernel that does not fit is written
  into a log, and check's VMEM002 line for that kernel is the expected line.
- captured: the reports of tests/data/reports, made by
  scripts/capture_reports.py, whose cases each have a `# vmem:` directive on
  the line above them. `check` runs those directives; the expected line of a
  captured report is check's VMEM002 line for the directive above its case
  on the case's chip.

Each log is read by `python -m vmem_lsp explain LOG --source FILES --format
json` twice: as written ("named": op_name jit(double_kernel)/..., the label
double_kernel.1 = custom-call) and "neutral": every name the report gives
its kernel, and any source_file/source_line, replaced by `step` as a real
job's jit(train_step)/... would, so that only shapes can place it.
Prints the shares and the misses by cause; writes one JSON line a report to
--out, which --from prints again without compiling.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

CHIPS = ("v4", "v5e", "v5p", "v6e", "v7x")
FORMS = ("physical", "scoped", "single_allocation")
# Kernels of tests/data/kernels left out: their examples hang, spin or kill the worker by design.
SKIPPED = {
    "misbehaving.py": "examples that hang, exit or segfault (minutes a chip)",
    "spins.py": "an example that never returns",
    "import_fails.py": "a module that cannot import",
}
CAPTURE = ROOT / "scripts" / "capture_reports.py"


@dataclass(frozen=True)
class Expected:
    """One report of a corpus and where check puts it."""

    corpus: str
    name: str  # file:line of the example (check) or the case (captured)
    chip: str
    text: str
    lines: tuple  # ((path, line), ...): check's VMEM002 for that kernel
    windows: tuple  # ((path, line, col), ...): check's VMEM001 for it
    reused: bool = False  # check answered from an identical kernel it compiled first: its text, its names


@dataclass(frozen=True)
class Outcome:
    """Where explain put one report in one variant of the log."""

    corpus: str
    name: str
    chip: str
    variant: str  # "named" | "neutral"
    result: str  # "placed" | "elsewhere" | "tie listing check's line" | "tie without ..." | "not placed"
    why: str
    windows_ok: bool
    reused: bool = False


def corpus_files(work: Path) -> list[str]:
    """examples/, the test kernels with examples, and jax's kernels copied with theirs."""
    from support.jax_ops import EXAMPLES, copy_with_example

    kernels = [
        p
        for p in sorted((ROOT / "tests" / "data" / "kernels").glob("*.py"))
        if "# vmem:" in p.read_text() and p.name not in SKIPPED
    ]
    ops = work / "jax_ops"
    ops.mkdir(parents=True, exist_ok=True)
    copies = [copy_with_example(name, example, ops) for name, example in EXAMPLES.items()]
    return [str(p) for p in [*sorted((ROOT / "examples").glob("*.py")), *kernels, *copies]]


def checked(files: list[str], chips: tuple, work: Path):
    """check's outcome for `files` on `chips` (compiles cached in work/cache)."""
    from vmem_lsp.config import Settings
    from vmem_lsp.engine import check

    settings = Settings(targets=chips, jobs=1, cache_dir=str(work / "cache"), root=str(ROOT))
    return check(files, settings)


def marked(example, result, number: int, sources) -> tuple[tuple, tuple]:
    """check's VMEM002 lines and VMEM001 anchors for call `number` of one result."""
    from vmem_lsp.engine import diagnostics_for

    found = [d for d in diagnostics_for(example, result, sources) if d.subject and d.subject.call == number]
    lines = tuple(sorted({(d.path, d.span.start_line) for d in found if d.code == "VMEM002"}))
    windows = tuple(sorted({(d.path, d.span.start_line, d.span.start_col) for d in found if d.code == "VMEM001"}))
    return lines, windows


def failing(outcome):
    """(example, chip, result, call number, call) of each kernel with a VMEM report."""
    from vmem_lsp.tpu.parse import parse_report

    for example, chip, result in outcome.results:
        for number, call in enumerate(result.calls):
            if call.compiled and not call.fits and parse_report(call.compiler_text or "").form in FORMS:
                yield example, chip, result, number, call


def check_corpus(files: list[str], chips: tuple, work: Path) -> list[Expected]:
    outcome = checked(files, chips, work)
    found = []
    for example, chip, result, number, call in failing(outcome):
        lines, windows = marked(example, result, number, outcome.sources)
        name = f"{os.path.relpath(example.path, ROOT)}:{example.line}"
        found.append(Expected("check", name, chip, call.compiler_text, lines, windows, call.reused))
    return found


def case_directives() -> dict[str, int]:
    """Case name -> line of the `# vmem:` directive on the line above it in capture_reports.py
    (the case's name on the `Case(` line, or on the next when the formatter wrapped the call)."""
    lines = CAPTURE.read_text().splitlines()
    found = {}
    for number, line in enumerate(lines, 1):
        if not re.match(r"\s*# vmem:", line):
            continue
        after = " ".join(lines[number : number + 2])
        case = re.match(r'\s*Case\(\s*"([\w-]+)"', after)
        if case:
            found[case[1]] = number
    return found


def run_pairs(pairs: list, work: Path) -> list:
    """(example, chip, result) of each (example, chip), as check runs one (cached in work/cache)."""
    from vmem_lsp.compile.backend import runner_for
    from vmem_lsp.compile.cache import ResultCache
    from vmem_lsp.config import Settings
    from vmem_lsp.engine import run_example

    settings = Settings(jobs=1, cache_dir=str(work / "cache"), root=str(ROOT))
    cache, worker = ResultCache(settings.cache_folder()), runner_for(settings)
    try:
        return [(e, chip, run_example(e, chip, settings, cache, worker)[0]) for e, chip in pairs]
    finally:
        worker.stop()


def captured_corpus(work: Path) -> tuple[list[Expected], list[str]]:
    """The captured reports with check's lines for their cases (the directive above
    each case, run on the case's chip), and why any is left out."""
    from vmem_lsp.engine import SourceFiles
    from vmem_lsp.source.directives import find_examples
    from vmem_lsp.tpu.parse import parse_report

    examples = {e.line: e for e in find_examples(CAPTURE.read_text(), str(CAPTURE))[0]}
    directives = case_directives()
    cases, left = [], []
    for path in sorted((ROOT / "tests" / "data" / "reports" / "0.0.42.1").glob("*.txt")):  # the reference libtpu
        head, text = path.read_text().split("\n", 3)[:3], path.read_text().split("\n", 3)[3]
        if parse_report(text).form not in FORMS:
            continue
        if path.stem not in directives:
            left.append(f"{path.stem}: no directive above its case")
            continue
        cases.append((path.stem, head[0].split()[2], text, examples[directives[path.stem]]))
    sources = SourceFiles()
    found = []
    for (name, chip, text, _), (example, _, result) in zip(cases, run_pairs([(e, c) for _, c, _, e in cases], work)):
        failed = [n for n, c in enumerate(result.calls) if c.compiled and not c.fits]
        if not failed:
            left.append(f"{name}: check on {chip}: {result.error or 'it fits'}")
            continue
        lines, windows = marked(example, result, failed[0], sources)
        found.append(Expected("captured", name, chip, text, lines, windows))
    return found, left


def neutral(text: str) -> str:
    """The report as a real job prints it: its kernel's names (op_name path, the
    custom call's label, a tag) and source locations replaced by `step`."""
    from vmem_lsp.tpu.explain import report_names
    from vmem_lsp.tpu.parse import parse_report

    names = report_names(parse_report(text))
    text = re.sub(r'op_name="[^"]*"', 'op_name="jit(step)/pallas_call"', text)
    text = re.sub(r'\s*source_file="[^"]*"|\s*source_line=\d+', "", text)
    for name in sorted(names - {"step", "jit"}, key=len, reverse=True):
        text = re.sub(rf"(?<![\w.]){re.escape(name)}(?=\.\d|\b)", "step", text)
    return text


def write_log(path: Path, texts: list[str]) -> list[int]:
    """A job's log with each text behind a timestamp; the line each report starts on."""
    starts, lines = [], []
    for number, text in enumerate(texts):
        lines += [f"I1130 12:00:{number % 60:02d}.000 train.py:88] step {number}\n", "boot\n"]
        starts.append(len(lines) + 1)
        lines += [f"E1130 12:00:{number % 60:02d}.000 tpu] {line}\n" for line in text.splitlines()]
    path.write_text("".join(lines))
    return starts


def explained(log: Path, files: list[str]) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-m", "vmem_lsp", "explain", str(log), "--source", *files, "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode not in (0, 1):  # 1: it placed errors, as check exits
        raise SystemExit(f"explain failed: {done.stderr}")
    return json.loads(done.stdout)["diagnostics"]


def judged(expected: Expected, diagnostics: list[dict], variant: str) -> Outcome:
    """Where explain put one report against where check did."""
    totals = [d for d in diagnostics if d["code"] == "VMEM002"]
    ties = [d for d in diagnostics if d["code"] == "VMEM040"]
    windows = {
        (d["abs_path"], d["range"]["start_line"], d["range"]["start_col"])
        for d in diagnostics
        if d["code"] == "VMEM001"
    }
    at = {(d["abs_path"], d["range"]["start_line"]) for d in totals}
    why = next((d.get("facts", {}).get("why", "") for d in [*totals, *ties]), "")
    lines = set(map(tuple, expected.lines))
    if totals:
        result = "placed" if at and at <= lines else "elsewhere"
    elif ties:  # a tie lists every site the report fits: check's line among them, or not
        among = lines <= {(d["abs_path"], d["range"]["start_line"]) for d in ties}
        result = "tie listing check's line" if among else "tie without check's line"
    else:
        result = "not placed"
    return Outcome(
        expected.corpus,
        expected.name,
        expected.chip,
        variant,
        result,
        why,
        windows <= set(map(tuple, expected.windows)),
        expected.reused,
    )


def run(corpora: list[str], chips: tuple, work: Path, out: Path) -> list[Outcome]:
    work.mkdir(parents=True, exist_ok=True)
    outcomes = []
    for corpus in corpora:
        started = time.perf_counter()
        if corpus == "check":
            files = corpus_files(work)
            expected = check_corpus(files, chips, work)
        else:
            expected, left = captured_corpus(work)
            files = [str(CAPTURE), str(ROOT / "tests" / "data" / "kernels" / "pipelines.py")]
            for why in left:
                print(f"captured, left out: {why}")
        expected = [e for e in expected if e.lines]
        # The kernels that produced the reports: a library kernel an example reaches (jax's flash
        # attention under .venv) is given too, as a user points --source at the kernel in the report.
        files = sorted(set(files) | {path for e in expected for path, _ in e.lines})
        on = ",".join(chips) if corpus == "check" else "each case's chip"
        print(f"{corpus}: {len(expected)} reports from check on {on} ({time.perf_counter() - started:.0f} s)")
        for variant in ("named", "neutral"):
            texts = [e.text if variant == "named" else neutral(e.text) for e in expected]
            log = work / f"{corpus}-{variant}.log"
            starts = write_log(log, texts)
            started = time.perf_counter()
            diagnostics = explained(log, files)
            print(f"  explain --source, {variant}: {time.perf_counter() - started:.1f} s")
            by_line = collections.defaultdict(list)
            for d in diagnostics:
                by_line[d.get("facts", {}).get("log_line")].append(d)
            outcomes += [judged(e, by_line[start], variant) for e, start in zip(expected, starts)]
    with open(out, "w") as f:
        f.writelines(json.dumps(asdict(o)) + "\n" for o in outcomes)
    return outcomes


def report(outcomes: list[Outcome]) -> None:
    """The share placed on check's lines per corpus and variant, and each miss with its cause."""
    groups = collections.defaultdict(list)
    for o in outcomes:
        groups[(o.corpus, o.variant)].append(o)
    for (corpus, variant), group in sorted(groups.items()):
        placed = [o for o in group if o.result == "placed"]
        listed = [o for o in group if o.result == "tie listing check's line"]
        windows = sum(o.windows_ok for o in placed)
        print(
            f"{corpus:8} {variant:7}: {len(placed)}/{len(group)} placed on check's lines "
            f"({100 * len(placed) / max(len(group), 1):.1f}%), windows on check's BlockSpecs in {windows}; "
            f"with the ties that list check's line, {len(placed) + len(listed)}/{len(group)} "
            f"({100 * (len(placed) + len(listed)) / max(len(group), 1):.1f}%)"
        )
        causes = collections.Counter(
            f"{o.result}: {o.why}" + (REUSED if o.reused and o.result == "elsewhere" else "")
            for o in group
            if o.result != "placed"
        )
        for cause, count in causes.most_common():
            print(f"    {count:3} x {cause}")
        for o in group:
            if o.result != "placed":
                print(f"          {o.name} on {o.chip}: {o.result}")


REUSED = " (check reused an identical kernel's compile: the text names that kernel)"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chips", default=",".join(CHIPS))
    parser.add_argument("--corpus", default="check,captured")
    parser.add_argument("--work", default="/tmp/vmem-lsp-placement", help="jax copies, logs, compile cache")
    parser.add_argument("--out", default=str(ROOT / "bench" / "placement_results.jsonl"))
    parser.add_argument("--from", dest="source", help="print the figures of a results jsonl again")
    args = parser.parse_args()
    if args.source:
        outcomes = [Outcome(**json.loads(line)) for line in Path(args.source).read_text().splitlines()]
    else:
        outcomes = run(args.corpus.split(","), tuple(args.chips.split(",")), Path(args.work), Path(args.out))
    report(outcomes)


if __name__ == "__main__":
    main()
