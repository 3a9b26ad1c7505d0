"""`vmem-lsp explain`: the reports in a job's log found among
other lines, parsed as `check` parses them, and explained; no compiler."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT, line_of, reports

from vmem_lsp.explain import explain_json, explain_text, find_reports
from vmem_lsp.tpu.explain import describe
from vmem_lsp.tpu.parse import parse_report

REPORTS = reports.folder()
LOGS = ROOT / "tests" / "data" / "logs"  # scripts/capture_logs.py's, one folder per libtpu
sys.path.insert(0, str(ROOT))  # bench/: the renaming a real job's log makes


def captured() -> list[tuple[str, str]]:
    """(name, compiler text) of every captured report with figures."""
    found = []
    for path in sorted(REPORTS.glob("*.txt")):
        text = path.read_text().split("\n", 3)[3]
        if parse_report(text).form not in ("unknown", "block_shape"):
            found.append((path.stem, text))
    return found


def log_with(reports, seed: int = 0) -> tuple[list[str], list[int]]:
    """A job's log: noise, each report behind a timestamp and worker prefix, more noise."""
    rng = random.Random(seed)
    lines, starts = [], []
    for _, text in reports:
        lines += [
            f"2026-11-30 12:{rng.randint(0, 59):02d}:00 INFO step {rng.random()}\n" for _ in range(rng.randint(1, 5))
        ]
        starts.append(len(lines) + 1)
        prefix = f"[worker {rng.randint(0, 99)}] 2026-11-30 12:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} E "
        lines += [prefix + line + "\n" for line in text.splitlines()]
    lines.append("done\n")
    return lines, starts


def signature(report):
    return report.form, report.used, report.limit, report.exceeded_by, [(a.kind, a.size) for a in report.allocations]


def test_every_captured_report_in_a_log_is_found_where_it_starts_and_parsed_as_check_parses_it():
    reports = captured()
    lines, starts = log_with(reports)
    found = list(find_reports(lines))
    assert [f.line for f in found] == starts
    assert [signature(parse_report(f.text)) for f in found] == [signature(parse_report(t)) for _, t in reports]


def run_explain(*args, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vmem_lsp", "explain", *args], cwd=ROOT, input=stdin, capture_output=True, timeout=120
    )


def test_the_seed_report_names_both_windows_and_the_way_out_in_bytes(tmp_path):
    text = (REPORTS / "physical-breakdown-v6e.txt").read_text().split("\n", 3)[3]
    log = tmp_path / "train.log"
    log.write_bytes(b"\x00\xff\xfebinary junk\n" + "".join(f"12:00:00 E {l}\n" for l in text.splitlines()).encode())
    done = run_explain(str(log), "--target", "v6e")
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr
    assert (
        "kernel needs 128.00M of 127.94M VMEM on TPU v6e (over by 64.0K, 0.05% of the limit: a small overshoot)" in out
    )
    assert "64.00M  input 0 window f32[4096,4096] of f32[4096,4096], single buffered" in out
    assert "64.00M  output 0 window f32[4096,4096] of f32[4096,4096], single buffered" in out
    assert "halving input 0's block (4096 → 2048 rows) saves 32.00M: fits with 31.94M to spare" in out


def test_a_single_allocations_way_out_is_measured_against_that_allocation():
    """The compiler gives no total: the gap is the named allocation over the limit (144.00M in
    128.00M), so halving its block to 72.00M fits with 56.00M to spare, not 200.00M."""
    (found,) = find_reports(reports.compiler_text(REPORTS / "single-allocation-v5e.txt").splitlines())
    assert explain_json(found)["ways_out"] == [
        "halving input 0's block (6144 → 3072 rows) saves 72.00M: fits with 56.00M to spare"
    ]


def test_where_no_way_out_is_enough_alone_the_fewest_together_are_and_the_compiler_agrees():
    """The matmul with 2048 blocks on v5p, as its job's log carries it: 8.89M over, and every
    window's way out saves 8.00M, not enough alone. Together, halving input 0's and input 1's
    blocks (bm and bk) are, within the chip's VMEM and with the scoped limit it says; the spills
    are said as the body's values. The same matmul with those blocks and that limit, compiled
    directly for v5p, fits."""
    from support.tpu_direct import compile_directly

    log = LOGS / reports.REFERENCE / "matmul-breakdown-v5p.jit.log"
    done = run_explain(str(log), "--target", "v5p")
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr
    assert "not enough alone" in out and "fits with" not in out.split("together,")[0]
    assert (
        "together, halving input 0's block (2048 → 1024 rows) and halving input 1's block (2048 → 1024 rows) "
        "save 16.00M: fits with 7.11M to spare of the chip's VMEM, with vmem_limit_bytes >= 57 MiB "
        "(above TPU v5p's scoped default, 16.00M)" in out
    )
    assert "the register spills (8.82M) are the kernel body's values" in out
    direct = compile_directly(
        "v5p",
        f"""
        import sys
        sys.path.insert(0, {str(ROOT / "scripts")!r})
        from capture_reports import matmul
        run = matmul(1024, 1024, 2048, vmem_limit_bytes=57 << 20)  # bm, bk halved; bn as it was
        args = tuple(jax.ShapeDtypeStruct((8192, 8192), jnp.bfloat16, sharding=sharding) for _ in range(2))
        """,
    )
    assert direct.strip() == "fits", direct[:2000]


def test_placed_on_its_pallas_call_the_ways_out_name_the_block_dimensions_as_the_source_writes_them():
    """The same log with --source: the report is placed on scripts/capture_reports.py's matmul,
    whose BlockSpecs write (bm, bk) and (bk, bn), so the halvings say which of them to halve; without
    --source the operands alone (the test above)."""
    log = LOGS / reports.REFERENCE / "matmul-breakdown-v5p.jit.log"
    done = run_explain(str(log), "--target", "v5p", "--source", str(ROOT / "scripts" / "capture_reports.py"))
    out = done.stdout.decode()
    assert done.returncode == 1, done.stderr  # errors placed on the sources' lines, as check exits
    assert (
        "together, halving input 0's block (bm: 2048 → 1024 rows) and halving input 1's block "
        "(bk: 2048 → 1024 rows) save 16.00M: fits with 7.11M to spare" in out
    ), out
    assert "halving output 0's block (bm: 2048 → 1024 rows)" in out


def test_json_lists_each_report_and_a_log_without_one_says_so():
    reports = captured()
    lines, _ = log_with(reports, seed=3)
    done = run_explain("-", "--format", "json", stdin="".join(lines).encode())
    parsed = json.loads(done.stdout)
    assert done.returncode == 0 and len(parsed["reports"]) == len(reports)
    assert all(r["limit"] and r["allocations"] or r["form"] == "scoped" for r in parsed["reports"])
    empty = run_explain("-", stdin=b"nothing to see\n\xff\n")
    assert empty.returncode == 0 and b"no VMEM report in stdin" in empty.stdout


# ---- a report as a job's log carries it: behind an exception's name, in a traceback ---------------

# The id of the stack frame that made an op counts the capturing script's frames: the log's and
# the bare capture's differ in it, and in nothing else of the compiler's text.
FRAME_ID = re.compile(r" stack_frame_id=\d+")


def captured_logs() -> list[Path]:
    return sorted(LOGS.glob("*/*.log"))


def bare_text(log: Path) -> str:
    """The compiler's text of the log's case, bare, as scripts/capture_reports.py kept it."""
    libtpu, case = log.parent.name, log.name.split(".")[0]
    return reports.compiler_text(reports.folder(libtpu) / f"{case}.txt")


def same_text(text: str) -> str:
    return FRAME_ID.sub("", reports.comparable(text)).strip("\n")


def log_id(log: Path) -> str:
    return f"{log.parent.name}/{log.stem}"


def test_every_libtpu_with_captured_reports_has_the_same_logs():
    """Four cases (one of each form with figures) in seven logs each, for each captured compiler."""
    names = {p.name for p in (LOGS / reports.REFERENCE).glob("*.log")}
    assert len(names) == 4 * 7
    assert {p.name for p in LOGS.iterdir()} == set(reports.captured_versions())
    assert all({p.name for p in folder.glob("*.log")} == names for folder in LOGS.iterdir())


@pytest.mark.parametrize("log", captured_logs(), ids=log_id)
def test_a_report_in_a_jobs_log_is_found_once_and_whole(log):
    """Behind jax's exception name, a logger's prefix on its first line or on every line, a
    task group's `| `: the log's one compile failure is one report, the text the exception
    carries from its RESOURCE_EXHAUSTED to its proto tail (no report of its own), jax's note
    and the log's next record left out."""
    found = list(find_reports(log.read_text().splitlines(True)))
    assert len(found) == 1
    assert same_text(found[0].text) == same_text(bare_text(log))


@pytest.mark.parametrize("log", captured_logs(), ids=log_id)
def test_a_report_in_a_jobs_log_is_explained_as_the_bare_report_is(log):
    """Every allocation the compiler listed, in the text and the JSON, and a way out."""
    [found] = find_reports(log.read_text().splitlines(True))
    bare = parse_report(bare_text(log))
    text, data = explain_text(found), explain_json(found)
    assert bare.allocations or bare.form == "scoped"  # E1001 gives the total only
    assert [a["described"] for a in data["allocations"]] == [describe(a) for a in bare.allocations]
    assert all(describe(a) in text for a in bare.allocations)
    assert (data["form"], data["used"], data["limit"]) == (bare.form, bare.used, bare.limit)
    assert data["ways_out"] and "  ways out:\n" in text


@pytest.mark.parametrize("name", ["jaxlib.xla_extension.XlaRuntimeError", "jaxlib._jax.XlaRuntimeError"])
@pytest.mark.parametrize("form", ["jit", "absl-lines"])
def test_the_exception_names_of_older_jax_are_taken_off_alike(name, form):
    """jax before the tested range raised the compiler's error under these names: the same
    captured log with the name changed is read the same."""
    log = LOGS / reports.REFERENCE / f"physical-breakdown-v6e.{form}.log"
    text = log.read_text()
    assert "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED" in text
    [found] = find_reports(text.replace("jax.errors.JaxRuntimeError", name).splitlines(True))
    assert same_text(found.text) == same_text(bare_text(log))


def test_the_proto_tail_alone_is_no_report():
    """A log that kept only the tail (its report cut away) has no report: the tail echoes
    the report's first words, escaped, without its listing."""
    log = LOGS / reports.REFERENCE / "physical-breakdown-v6e.jit.log"
    [tail] = [line for line in log.read_text().splitlines(True) if "[type.googleapis.com/" in line]
    assert "Ran out of memory in memory space vmem" in tail
    assert list(find_reports([tail])) == []


@pytest.mark.parametrize("libtpu", reports.captured_versions())
def test_a_jobs_logs_piped_to_explain_give_one_report_per_compile_failure(libtpu):
    """A libtpu's captured logs one after another on stdin, as `kubectl logs` pipes them."""
    logs = sorted((LOGS / libtpu).glob("*.log"))
    done = run_explain("-", "--format", "json", stdin=b"".join(p.read_bytes() for p in logs))
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)["reports"]
    expected = [parse_report(bare_text(p)) for p in logs]
    assert [(r["form"], len(r["allocations"])) for r in found] == [(b.form, len(b.allocations)) for b in expected]


def test_the_issues_traceback_is_explained_in_full():
    """Issue 31: a jitted call's uncaught error, its first line behind the exception's name."""
    log = LOGS / reports.REFERENCE / "physical-breakdown-v6e.jit.log"
    done = run_explain(str(log), "--target", "v6e")
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr
    assert out.count("report at") == 1
    assert "64.00M  input 0 window f32[4096,4096] of f32[4096,4096], single buffered" in out
    assert "64.00M  output 0 window f32[4096,4096] of f32[4096,4096], single buffered" in out
    assert "halving input 0's block (4096 → 2048 rows) saves 32.00M: fits with 31.94M to spare" in out


def test_a_report_it_does_not_understand_is_shown_whole():
    odd = b"RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Something new happened in vmem.\n  detail 1\n"
    done = run_explain("-", stdin=odd)
    assert b"not understood" in done.stdout and b"Something new happened in vmem." in done.stdout
    assert b"detail 1" in done.stdout


@pytest.fixture(scope="module")
def checked_examples(tmp_path_factory):
    """check's diagnostics on examples/ (v5e, v6e) and the compiler texts of its reports."""
    cache = tmp_path_factory.mktemp("cache")
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "vmem_lsp",
            "check",
            "examples",
            "--target",
            "v5e,v6e",
            "--format",
            "json",
            "--cache-dir",
            str(cache),
            "-j",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        timeout=900,
    )
    marked = json.loads(check.stdout)["diagnostics"]
    from vmem_lsp.config import Settings
    from vmem_lsp.engine import check as run_check

    outcome = run_check(["examples"], Settings(targets=("v5e", "v6e"), cache_dir=str(cache), jobs=1))
    texts = [
        c.compiler_text
        for _, _, r in outcome.results
        for c in r.calls
        if not c.fits and parse_report(c.compiler_text or "").form in ("physical", "scoped", "single_allocation")
    ]
    assert len(texts) >= 3
    return marked, texts


def explain_log(tmp_path, texts, *source) -> list[dict]:
    """explain --source on a log of `texts`, each behind a timestamp: its diagnostics."""
    log = tmp_path / "job.log"
    log.write_text("".join("boot\n" + "".join(f"I1130 12:00:00.000 tpu] {l}\n" for l in t.splitlines()) for t in texts))
    done = run_explain(str(log), "--source", *source, "--format", "json")
    placed = json.loads(done.stdout)["diagnostics"]
    # as check: exit 1 when it places an error on the sources' lines, else 0
    assert done.returncode == (1 if any(d["severity"] == "error" for d in placed) else 0), done.stderr
    return placed


def assert_on_checks_lines(marked, texts, placed):
    """At least 95% of the reports' VMEM002 on check's, every window on one of check's BlockSpecs."""
    totals = [d for d in placed if d["code"] == "VMEM002"]
    check_totals = {(d["path"], d["range"]["start_line"]) for d in marked if d["code"] == "VMEM002"}
    on_check_lines = [d for d in totals if (d["path"], d["range"]["start_line"]) in check_totals]
    assert len(on_check_lines) / len(texts) >= 0.95, [d["message"] for d in placed]
    check_windows = {
        (d["path"], d["range"]["start_line"], d["range"]["start_col"]) for d in marked if d["code"] == "VMEM001"
    }
    windows = [d for d in placed if d["code"] == "VMEM001"]
    assert windows and all(
        (d["path"], d["range"]["start_line"], d["range"]["start_col"]) in check_windows for d in windows
    )


def test_with_the_sources_a_report_lands_where_check_puts_it(tmp_path, checked_examples):
    """The compiler texts of check's own compiles, written into a log: explain
    --source places each on the pallas_call and BlockSpecs check marks."""
    marked, texts = checked_examples
    assert_on_checks_lines(marked, texts, explain_log(tmp_path, texts, "examples"))


def test_a_report_whose_names_say_nothing_lands_where_check_puts_it_by_the_traced_examples(tmp_path, checked_examples):
    """A real job's op_name is jit(train_step)/..., its custom call train_step.1: with every name
    the report gives replaced, only the examples' traced calls (shapes, blocks, dtypes) place it."""
    from bench.bench_explain_placement import neutral

    marked, texts = checked_examples
    renamed = [neutral(t) for t in texts]
    assert all("double_kernel" not in t and "matmul_kernel" not in t for t in renamed)
    placed = explain_log(tmp_path, renamed, "examples")
    assert_on_checks_lines(marked, texts, placed)
    assert all("matched to the call traced from the example" in d["facts"]["why"] for d in placed)


def test_the_captured_reports_land_on_the_kernel_their_case_runs(tmp_path):
    """tests/data/reports, names replaced, placed on scripts/capture_reports.py: each on the
    pallas_call that the `# vmem:` directive above its case reaches, traced (check's line for it)."""
    from bench.bench_explain_placement import CAPTURE, case_directives, neutral
    from vmem_lsp.explain import trace_examples

    traced = trace_examples([str(CAPTURE), str(ROOT / "tests" / "data" / "kernels" / "pipelines.py")], "v6e")
    site_of = {
        int(t.example.rsplit(":", 1)[1]): (t.path, t.site.name_span.start_line)
        for t in traced.calls
        if t.example.startswith("scripts/")
    }
    directives = case_directives()
    reports = [
        (name, text) for name, text in captured() if parse_report(text).form != "block_shape" and name in directives
    ]
    assert len(reports) == 27
    library = {path for path, _ in site_of.values() if "site-packages" in path}
    placed = explain_log(
        tmp_path,
        [neutral(text) for _, text in reports],
        str(CAPTURE),
        str(ROOT / "tests" / "data" / "kernels" / "pipelines.py"),
        *library,
    )
    lines = log_lines(reports)
    at = {d["facts"]["log_line"]: (d["abs_path"], d["range"]["start_line"]) for d in placed if d["code"] == "VMEM002"}
    right = [name for (name, _), line in zip(reports, lines) if at.get(line) == site_of[directives[name]]]
    assert len(right) / len(reports) >= 0.95, sorted({n for n, _ in reports} - set(right))


def log_lines(reports) -> list[int]:
    """The line each report starts on in explain_log's log."""
    lines, at = [], 1
    for _, text in reports:
        lines.append(at + 1)
        at += 1 + len(text.splitlines())
    return lines


def test_two_kernels_the_report_fits_alike_are_said_as_a_tie_not_guessed(tmp_path):
    """The seed report, names replaced, with two files whose examples trace the same copy kernel
    on f32[4096, 4096]: VMEM040 on both pallas_calls, no VMEM001 or VMEM002."""
    from bench.bench_explain_placement import neutral

    for name in ("first.py", "second.py"):
        (tmp_path / name).write_text((ROOT / "examples" / "copy_whole.py").read_text())
    text = neutral((REPORTS / "physical-breakdown-v6e.txt").read_text().split("\n", 3)[3])
    placed = explain_log(tmp_path, [text], str(tmp_path / "first.py"), str(tmp_path / "second.py"))
    assert sorted((Path(d["path"]).name, d["code"]) for d in placed) == [
        ("first.py", "VMEM040"),
        ("second.py", "VMEM040"),
    ]
    assert all("could be this pallas_call or" in d["message"] for d in placed)


@pytest.mark.asyncio
async def test_the_editor_command_explains_a_pasted_report_and_marks_the_lines(tmp_path):
    """workspace/executeCommand vmemLsp.explain, as the VS Code command and Neovim call it."""

    from lsprotocol import types
    from support.lsp_client import running_server, wait_for

    # The report names its kernel "f" (the capture script's); the block shapes, written out, decide.
    (tmp_path / "copy_whole.py").write_text(
        (ROOT / "examples" / "copy_whole.py").read_text().replace("pl.BlockSpec((n, m)", "pl.BlockSpec((4096, 4096)")
    )
    text = (REPORTS / "physical-breakdown-v6e.txt").read_text().split("\n", 3)[3]
    async with running_server(tmp_path) as client:
        answer = await client.workspace_execute_command_async(types.ExecuteCommandParams("vmemLsp.explain", [text]))
        assert answer["reports"] == 1 and answer["placed"] == 3
        assert "halving input 0's block (4096 → 2048 rows) saves 32.00M" in answer["markdown"]
        uri = (tmp_path / "copy_whole.py").as_uri()
        found = await wait_for(
            lambda: [d for d in client.diagnostics.get(uri, []) if d.code == "VMEM001"],
            what="the report's windows on copy_whole.py",
        )
        specs = {line_of(tmp_path / "copy_whole.py", "in_specs="), line_of(tmp_path / "copy_whole.py", "out_specs=")}
        assert {d.range.start.line + 1 for d in found} == specs
        assert all("from the report in the pasted text, line 1" in d.message for d in found)
        none = await client.workspace_execute_command_async(types.ExecuteCommandParams("vmemLsp.explain", ["hi"]))
        assert none["reports"] == 0 and "No VMEM report" in none["markdown"]


def test_explain_keeps_a_window_too_small_to_close_the_gap_as_related_information_as_check_does(tmp_path):
    """check's culprit rule in explain --source (issue 44): small_windows.py's add_bias overflows v6e
    by far less than its two f32[4096,4096] windows; its f32[8,128] bias window is related information
    of the kernel's total, not an error, there as in check. The report is the compiler's own, from a
    compile of the kernel in this test."""
    from vmem_lsp.config import Settings
    from vmem_lsp.engine import check as run_check

    folder = tmp_path / "src"
    folder.mkdir()
    kernel = folder / "small_windows.py"
    kernel.write_text((ROOT / "tests" / "data" / "kernels" / "small_windows.py").read_text())
    outcome = run_check([str(kernel)], Settings(targets=("v6e",), root=str(folder), cache_dir=str(tmp_path / "c")))
    [text] = [c.compiler_text for _, _, r in outcome.results for c in r.calls if c.compiler_text and not c.fits]
    checked = [d for d in outcome.diagnostics if d.code == "VMEM001"]
    placed = explain_log(tmp_path, [text], str(folder))
    windows = [d for d in placed if d["code"] == "VMEM001"]
    assert sorted(d["range"]["start_line"] for d in windows) == sorted(d.span.start_line for d in checked)
    assert sorted(d["range"]["start_line"] for d in windows) == [
        line_of(kernel, "in_specs="),
        line_of(kernel, "out_specs="),
    ]
    assert all("f32[8,128]" not in d["message"] for d in windows)
    [total] = [d for d in placed if d["code"] == "VMEM002"]
    [bias] = [r for r in total["related"] if "f32[8,128]" in r["message"]]
    assert bias["message"].endswith("(too small to close the gap alone)")


def test_without_target_a_report_names_the_chips_whose_vmem_its_limit_is():
    """A log that names no chip: a 63.94M capacity is v5p's (or v7x's under libtpu 0.0.48+), 127.94M
    v6e's alone, and then the verdict names it as --target would; 32.00M scoped is v6e's or v7x's."""
    found = {}
    for name in ("matmul-breakdown-v5p", "physical-breakdown-v6e", "scoped-e1001-v6e"):
        [report] = list(find_reports((LOGS / "0.0.42.1" / f"{name}.jit.log").read_text().splitlines(True)))
        found[name] = report
    said = {name: explain_text(report) for name, report in found.items()}
    assert "  chip: the log names none; 63.94M is the capacity of TPU v5p or v7x" in said["matmul-breakdown-v5p"]
    assert "of 127.94M VMEM on TPU v6e (over by 64.0K" in said["physical-breakdown-v6e"]
    assert explain_json(found["physical-breakdown-v6e"])["chip"] == "v6e"
    assert "32.00M is the default scoped limit of TPU v6e or v7x" in said["scoped-e1001-v6e"]
    assert explain_json(found["scoped-e1001-v6e"])["chips_by_limit"] == ["v6e", "v7x"]
    assert "chip:" not in explain_text(found["physical-breakdown-v6e"], target="v6e")
