"""`vmem-lsp check` end to end: the real TPU compiler, the CLI as a subprocess."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys

import jax.experimental.pallas.ops.tpu.flash_attention as flash_module
from support import EXAMPLES, KERNELS, ROOT, line_of
from support.cli import run_cli, run_json, without_libtpu


def by(diagnostics, target=None, **where):
    """Diagnostics matching `where`; `target` matches one chip of a merged diagnostic."""
    return [
        d
        for d in diagnostics
        if all(d.get(k) == v for k, v in where.items())
        and (target is None or target in (d.get("target") or "").split(","))
    ]


def test_seed_copy_kernel_on_v6e_reports_on_each_blockspec(examples_check):
    done, report = examples_check
    assert done.returncode == 1, done.stderr
    path = EXAMPLES / "copy_whole.py"
    found = by(report["diagnostics"], path="examples/copy_whole.py", target="v6e", code="VMEM001")
    in_line, out_line = line_of(path, "in_specs="), line_of(path, "out_specs=")
    assert sorted(d["range"]["start_line"] for d in found) == [in_line, out_line]
    first = next(d for d in found if d["range"]["start_line"] == in_line)
    # One diagnostic for both chips: what the window is, then what each chip says.
    assert first["message"].startswith("input 0 window f32[4096,4096] = 64.00M, single buffered; ")
    assert first["message"].endswith(
        "; needs 128.00M; limits 16.00M scoped on v5e, 127.94M on v6e"
    )  # limits: its kernel's
    related = [r["message"] for r in first["related"]]
    assert any(
        m.endswith(
            "kernel needs 128.00M of 127.94M VMEM on TPU v6e (over by 64.0K, 0.05% of the limit: a small overshoot)"
        )
        for m in related
    )
    assert any("kernel needs 128.00M of 16.00M scoped VMEM on TPU v5e" in m for m in related)
    assert first["target"] == "v5e,v6e"
    # The range covers the block-shape expression exactly.
    text = path.read_text().splitlines()[in_line - 1]
    r = first["range"]
    assert text[r["start_col"] : r["end_col"]] == "(n, m)"
    v6e = first["facts"]["targets"]["v6e"]
    assert v6e["buffers"] == 1 and v6e["estimated"] is False and first["facts"]["targets"]["v5e"]["estimated"]


def test_seed_total_on_the_pallas_call_line_and_the_directive(examples_check):
    _, report = examples_check
    path = EXAMPLES / "copy_whole.py"
    total = by(report["diagnostics"], path="examples/copy_whole.py", target="v6e", code="VMEM002")
    assert [d["range"]["start_line"] for d in total] == [line_of(path, "pl.pallas_call(")]
    assert "127.94M on v6e" in total[0]["message"]
    assert any(
        "needs 128.00M of 127.94M VMEM on TPU v6e (over by 64.0K, 0.05% of the limit: a small overshoot)"
        in r["message"]
        for r in total[0]["related"]
    )
    directive = by(report["diagnostics"], path="examples/copy_whole.py", target="v6e", code="VMEM004")
    assert [d["range"]["start_line"] for d in directive] == [line_of(path, "# vmem:")]


def test_text_output_is_path_line_col(cache_dir, examples_check):
    done = run_cli("check", "examples/copy_whole.py", "--target", "v6e", "--cache-dir", str(cache_dir))
    path = EXAMPLES / "copy_whole.py"
    line = line_of(path, "in_specs=")
    col = path.read_text().splitlines()[line - 1].index("(n, m)") + 1
    expected = (
        f"examples/copy_whole.py:{line}:{col}: error VMEM001 input 0 window f32[4096,4096] = 64.00M, "
        "single buffered; kernel needs 128.00M of 127.94M VMEM on TPU v6e (over by 64.0K, 0.05% of the limit: a small overshoot)"
    )
    assert expected in done.stdout.splitlines()
    assert done.returncode == 1


def test_matmul_overflows_v5e_scoped_limit_with_an_estimated_split(examples_check):
    _, report = examples_check
    path = EXAMPLES / "matmul.py"
    v5e = by(report["diagnostics"], path="examples/matmul.py", target="v5e")
    total = by(v5e, code="VMEM002")
    assert len(total) == 1
    assert "needs 18.36M of 16.00M scoped VMEM on TPU v5e (over by 2.36M)" in total[0]["message"]
    windows = by(v5e, code="VMEM001")
    lines = sorted(d["range"]["start_line"] for d in windows)
    spec_lines = [
        line_of(path, "pl.BlockSpec((bm, bk)"),
        line_of(path, "pl.BlockSpec((bk, bn)"),
        line_of(path, "out_specs="),
        line_of(path, "pltpu.VMEM("),
    ]
    assert lines == sorted(spec_lines)
    for d in windows:
        assert d["facts"]["estimated"] is True and d["origin"] == "model"
        assert "estimate" in d["message"]
    # On v6e the same kernel fits the 32 MiB scoped default: nothing to say but what was checked.
    assert [d["code"] for d in by(report["diagnostics"], path="examples/matmul.py", target="v6e")] == ["VMEM007"]


def test_the_kernel_that_fits_says_what_was_checked_in_json_only(cache_dir, examples_check):
    """No finding, but JSON names the blocks, grid and limit that were checked (VMEM007,
    information, one per kernel with both chips); text prints it with --show-fits only."""
    _, report = examples_check
    (fit,) = by(report["diagnostics"], path="examples/add_fits.py")
    assert (fit["severity"], fit["code"], fit["target"]) == ("information", "VMEM007", "v5e,v6e")
    assert (
        "grid (16,); input 0 f32[512,1024], input 1 f32[512,1024], output 0 f32[512,1024], double buffered"
        in (fit["message"])
    )
    v5e = fit["facts"]["targets"]["v5e"]
    assert (v5e["used"], v5e["limit"], v5e["limit_from"], v5e["grid"]) == (
        12 << 20,
        16 << 20,
        "the chip's default",
        [16],
    )
    assert [(b["kind"], b["shape"], b["buffers"]) for b in v5e["blocks"]][0] == ("input_window", [512, 1024], 2)
    assert "1 kernel fits on every chip, 1 on some only (the closest at 75% of its limit" in report["summary"]
    args = ("check", "examples/add_fits.py", "--target", "v5e,v6e", "--cache-dir", str(cache_dir))
    quiet, shown = run_cli(*args), run_cli(*args, "--show-fits")
    assert quiet.returncode == shown.returncode == 0
    assert quiet.stdout.splitlines()[:-1] == [] and "1 kernel fits" in quiet.stdout
    (line,) = shown.stdout.splitlines()[:-1]
    assert line.startswith("examples/add_fits.py:17:15: information VMEM007 pallas_call add_kernel fits (grid (16,)")
    assert line.endswith("needs ~12.00M; limits 16.00M scoped on v5e, 32.00M scoped on v6e")


def test_two_examples_that_reach_one_kernel_alike_are_one_vmem007_and_two_fits(tmp_path, cache_dir):
    """add_fits.py's kernel reached by its own example, by a wrapper with the same shapes (the
    same blocks, grid and verdict: one VMEM007 naming both examples) and with half the rows
    (another grid): three examples fit, and the summary counts three."""
    text = (ROOT / "examples" / "add_fits.py").read_text()
    text = text.replace(
        "# vmem: add(f32[8192, 1024], f32[8192, 1024])\n",
        "# vmem: add(f32[8192, 1024], f32[8192, 1024])\n# vmem: add(f32[4096, 1024], f32[4096, 1024])\n",
    )
    text += "\n\n# vmem: add_again(f32[8192, 1024], f32[8192, 1024])\ndef add_again(x, y):\n    return add(x, y)\n"
    (tmp_path / "adds.py").write_text(text)
    done, report = run_json("check", "adds.py", "--target", "v6e", "--cache-dir", str(cache_dir), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    fits = [d for d in report["diagnostics"] if d["code"] == "VMEM007"]
    assert sorted("grid (16,)" in d["message"] for d in fits) == [False, True], [d["message"] for d in fits]
    [alike] = [d for d in fits if "grid (16,)" in d["message"]]
    assert [e.rsplit(":", 1)[-1] for e in alike["facts"]["examples"]] == [
        str(line_of(tmp_path / "adds.py", "# vmem: add(f32[8192")),
        str(line_of(tmp_path / "adds.py", "# vmem: add_again(")),
    ]
    assert {r["message"] for r in alike["related"]} >= {
        "example add(f32[8192, 1024], f32[8192, 1024])",
        "example add_again(f32[8192, 1024], f32[8192, 1024])",
    }, alike["related"]
    assert "; 3 kernels fit" in report["summary"], report["summary"]


def test_warm_cache_starts_no_compiler_and_gives_the_same_answer(cache_dir, examples_check):
    _, cold = examples_check
    done, warm = run_json("check", "examples", "--target", "v5e,v6e", "--cache-dir", str(cache_dir))
    assert "0 compiled" in warm["summary"], warm["summary"]
    assert warm["diagnostics"] == cold["diagnostics"]
    assert done.returncode == 1


def test_an_edit_invalidates_the_cache(cache_dir, tmp_path):
    source = tmp_path / "copy_whole.py"
    shutil.copy(EXAMPLES / "copy_whole.py", source)
    args = ("check", str(source), "--target", "v6e", "--cache-dir", str(cache_dir))
    first = run_json(*args)[1]
    assert "1 compiled" in first["summary"]
    assert "0 compiled" in run_json(*args)[1]["summary"]
    source.write_text(source.read_text().replace("f32[4096, 4096]", "f32[1024, 1024]"))
    done, edited = run_json(*args)
    assert "1 compiled" in edited["summary"] and [d["code"] for d in edited["diagnostics"]] == ["VMEM007"]
    assert done.returncode == 0


def test_a_package_installed_after_a_failed_import_is_found_not_the_cached_failure(cache_dir, tmp_path):
    """An example whose module imports a package not installed yet: once it is, the next check
    imports it (the key holds jax's versions and the user's files, not every package's)."""
    project, packages = tmp_path / "project", tmp_path / "site"
    project.mkdir()
    packages.mkdir()
    source = project / "uses_later.py"
    source.write_text(
        (EXAMPLES / "copy_whole.py").read_text().replace("import jax\n", "import jax\nimport later_pkg\n", 1)
    )
    args = ("check", str(source), "--target", "v6e", "--cache-dir", str(cache_dir))
    env = {"PYTHONPATH": str(packages)}
    before = run_json(*args, env=env)[1]
    assert any("later_pkg" in d["message"] for d in before["diagnostics"]), before
    (packages / "later_pkg.py").write_text("")
    after = run_json(*args, env=env)[1]
    assert not any("later_pkg" in d["message"] for d in after["diagnostics"]), after
    assert "1 compiled" in after["summary"]


def test_sarif_carries_the_same_facts(cache_dir, examples_check):
    _, report = examples_check
    done = run_cli("check", "examples", "--target", "v5e,v6e", "--cache-dir", str(cache_dir), "--format", "sarif")
    sarif = json.loads(done.stdout)
    assert sarif["version"] == "2.1.0" and sarif["runs"][0]["columnKind"] == "unicodeCodePoints"
    results = sarif["runs"][0]["results"]
    findings = [d for d in report["diagnostics"] if d["code"] != "VMEM007"]  # what fits: with --show-fits
    assert len(results) == len(findings)
    rules = {r["id"] for r in sarif["runs"][0]["tool"]["driver"]["rules"]}
    for result, diagnostic in zip(results, findings):
        assert result["ruleId"] == diagnostic["code"] in rules
        region = result["locations"][0]["physicalLocation"]["region"]
        assert region["startLine"] == diagnostic["range"]["start_line"]
        assert region["startColumn"] == diagnostic["range"]["start_col"] + 1
        assert result["properties"]["target"] == diagnostic["target"]


def blockspec_spans(path) -> list[tuple[int, int]]:
    """Line ranges of every BlockSpec(...) call in a file, found with ast."""
    spans = []
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "BlockSpec":
                spans.append((node.lineno, node.end_lineno))
    return spans


def test_library_kernel_diagnostics_land_in_jax_flash_attention(cache_dir):
    done, report = run_json("check", str(KERNELS / "flash_user.py"), "--target", "v5e", "--cache-dir", str(cache_dir))
    assert done.returncode == 1, done.stderr
    library = flash_module.__file__
    # Its 67M of internal scratch makes the overflow: the windows (under 5% each) are related
    # information of the total, still placed on the library's BlockSpec lines.
    (total,) = [d for d in report["diagnostics"] if d["abs_path"] == library and d["code"] == "VMEM002"]
    windows = [r for r in total["related"] if " window " in r["message"] and r["path"].endswith("flash_attention.py")]
    assert windows, total["related"]
    spans = blockspec_spans(library)
    for d in windows:
        line = d["range"]["start_line"]
        assert any(a <= line <= b for a, b in spans), (line, d["message"])
    directive = [d for d in report["diagnostics"] if d["path"].endswith("flash_user.py")]
    assert [d["code"] for d in directive] == ["VMEM004"]
    assert directive[0]["range"]["start_line"] == line_of(KERNELS / "flash_user.py", "# vmem:")


def test_misbehaving_examples_are_reported_and_the_check_goes_on(tmp_path):
    done, report = run_json(
        "check", str(KERNELS / "misbehaving.py"), "--target", "v6e", "--trace-timeout", "20", "--no-cache"
    )
    path = KERNELS / "misbehaving.py"
    lines = path.read_text().splitlines()
    at = {
        i: [d for d in report["diagnostics"] if d["range"]["start_line"] == i and d["path"].endswith("misbehaving.py")]
        for i in range(1, len(lines) + 1)
    }

    def only(needle):
        number = line_of(path, needle)
        found = at[number]
        assert found, (needle, report["diagnostics"])
        return " ".join(d["message"] for d in found)

    assert "does not parse" in only("# vmem: copy_rows(f32[4096, 4096)")
    assert "must be a call" in only("# vmem: 42")
    assert "ValueError: this example raises on purpose (raised at tests/data/kernels/misbehaving.py:22)" in only(
        "# vmem: raises("
    )  # where it raised, in the text too
    assert "the example's Python did not return within 20 s (in hangs at misbehaving.py:27)" in only("# vmem: hangs(")
    assert "exited with code 3 while running the example's Python" in only("# vmem: exits(")
    segfault = only("# vmem: segfaults(")
    assert (
        "killed by signal 11 (SIGSEGV) while running the example's Python, in segfaults at misbehaving.py:36"
        in segfault
    )
    assert "Coroner" not in segfault and "remote_coredump" not in segfault and "last output" not in segfault
    assert "MemoryError" in only("# vmem: allocates(")
    assert "raised after the flood" in only("# vmem: floods(")
    # The last example still ran after all that, and overflows v6e's scoped limit.
    assert "scoped VMEM on TPU v6e" in only("# vmem: copy_rows(f32[8192, 4096], rows=1024)")
    assert done.returncode == 1


CRASHES = """import ctypes
import os
import uuid

# vmem: boom(f32[8, 128])


def boom(x):
    open(os.path.join(os.path.dirname(__file__), f"ran.{uuid.uuid4().hex}"), "w").close()
    ctypes.string_at(0)
"""


def test_a_crash_in_the_examples_own_python_is_run_once(tmp_path):
    """A segfault faulthandler places in the user's code is the example's own:
    the pool (more than one job) ran it a second time in a fresh worker, and the
    user waited twice for the same message. A crash with no user frame (the
    machine's, libtpu's) is still tried once more."""
    (tmp_path / "crash.py").write_text(CRASHES)
    done, report = run_json("check", str(tmp_path / "crash.py"), "--target", "v6e", "--jobs", "2", "--no-cache")
    [d] = report["diagnostics"]
    assert "killed by signal 11 (SIGSEGV) while running the example's Python, in boom at crash.py:10" in d["message"]
    assert len(list(tmp_path.glob("ran.*"))) == 1


def test_an_import_error_is_reported_on_the_directive(tmp_path):
    done, report = run_json("check", str(KERNELS / "import_fails.py"), "--target", "v6e", "--no-cache")
    [d] = report["diagnostics"]
    assert d["code"] == "VMEM010" and "a_module_that_does_not_exist" in d["message"]
    assert d["range"]["start_line"] == line_of(KERNELS / "import_fails.py", "# vmem:")


def test_usage_errors_exit_2(tmp_path):
    assert run_cli("check", str(tmp_path / "missing.py")).returncode == 2
    done = run_cli("check", str(EXAMPLES), "--target", "v99")
    assert done.returncode == 2 and "unknown target" in done.stderr
    assert run_cli("check").returncode == 2


def test_noqa_suppresses_a_code(tmp_path, cache_dir):
    source = tmp_path / "copy_whole.py"
    text = (EXAMPLES / "copy_whole.py").read_text()
    source.write_text(
        text.replace(
            "in_specs=[pl.BlockSpec((n, m), lambda: (0, 0))],",
            "in_specs=[pl.BlockSpec((n, m), lambda: (0, 0))],  # noqa: VMEM001",
        )
    )
    _, report = run_json("check", str(source), "--target", "v6e", "--cache-dir", str(cache_dir))
    lines = {d["range"]["start_line"] for d in report["diagnostics"] if d["code"] == "VMEM001"}
    assert line_of(source, "in_specs=") not in lines and line_of(source, "out_specs=") in lines


def test_pyproject_examples_check_kernels_defined_elsewhere(tmp_path):
    package = tmp_path / "kernels"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "copies.py").write_text((EXAMPLES / "copy_whole.py").read_text().replace("# vmem:", "# (example)"))
    entry = "kernels.copies:copy_whole(f32[4096, 4096])"
    (tmp_path / "pyproject.toml").write_text(
        f'[project]\nname = "k"\n\n[tool.vmem-lsp]\ntargets = ["v6e"]\nexamples = [\n    "{entry}",\n    "kernels.copies",\n]\n'
    )
    done, report = run_json("check", ".", "--no-cache", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    windows = [d for d in report["diagnostics"] if d["code"] == "VMEM001"]
    assert {d["path"] for d in windows} == {"kernels/copies.py"}
    assert {d["target"] for d in windows} == {"v6e"}
    config = tmp_path / "pyproject.toml"
    [summary] = [d for d in report["diagnostics"] if d["code"] == "VMEM004"]
    assert summary["path"] == "pyproject.toml" and summary["range"]["start_line"] == line_of(config, entry)
    [bad] = [d for d in report["diagnostics"] if d["code"] == "VMEM010"]
    assert bad["range"]["start_line"] == line_of(config, '"kernels.copies"') and "must look like" in bad["message"]


def test_progress_goes_to_stderr_only_when_it_is_a_terminal():
    import os
    import pty
    import subprocess
    import sys

    leader, follower = pty.openpty()
    done = subprocess.run(
        [sys.executable, "-m", "vmem_lsp", "check", "examples/add_fits.py", "--target", "v6e", "--no-cache"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=follower,
        text=True,
        timeout=600,
    )
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert done.returncode == 0
    assert b"[1/1] v6e examples/add_fits.py:" in seen
    piped = run_cli("check", "examples/add_fits.py", "--target", "v6e", "--no-cache")
    assert "[1/1]" not in piped.stderr


def test_no_compile_gives_the_layout_model_verdict_on_the_same_lines(tmp_path):
    done, report = run_json("check", "examples/copy_whole.py", "--target", "v6e", "--no-compile", "--no-cache")
    assert done.returncode == 1 and "traced (layout model only)" in report["summary"]
    path = EXAMPLES / "copy_whole.py"
    windows = [d for d in report["diagnostics"] if d["code"] == "VMEM001"]
    assert sorted(d["range"]["start_line"] for d in windows) == [
        line_of(path, "in_specs="),
        line_of(path, "out_specs="),
    ]
    assert all(
        d["origin"] == "model" and "layout model estimate, not compiled" in d["message"] for d in report["diagnostics"]
    )


def test_without_libtpu_the_check_falls_back_to_the_model(tmp_path):
    """As on macOS: jax is there, libtpu is not."""
    done = run_cli(
        "check",
        "examples/copy_whole.py",
        "--target",
        "v6e",
        "--no-cache",
        "--format",
        "json",
        env=without_libtpu(tmp_path / "hide"),
        inherit=False,
        timeout=300,
    )
    report = json.loads(done.stdout)
    assert done.returncode == 1
    assert {d["code"] for d in report["diagnostics"]} >= {"VMEM001", "VMEM002"}
    assert all(d["origin"] == "model" for d in report["diagnostics"]), [
        (d["code"], d["origin"], d["message"]) for d in report["diagnostics"]
    ]
    # Nothing compiled, and the run says so: not "1 compiled" (issue 41, item 2), and why, once.
    assert "(0 compiled, 1 traced for the model alone (no compiler here)," in report["summary"], report["summary"]
    assert done.stderr.count("no TPU compiler for v6e: libtpu is not available here") == 1, done.stderr
    assert "the model's estimates instead, nothing compiled" in done.stderr


def test_github_annotations(cache_dir, examples_check):
    done = run_cli(
        "check", "examples/copy_whole.py", "--target", "v6e", "--cache-dir", str(cache_dir), "--format", "github"
    )
    path = EXAMPLES / "copy_whole.py"
    line = line_of(path, "in_specs=")
    col = path.read_text().splitlines()[line - 1].index("(n, m)") + 1
    assert any(
        a.startswith(f"::error file=examples/copy_whole.py,line={line},col={col},")
        and "title=VMEM001::input 0 window f32[4096,4096] = 64.00M" in a
        for a in done.stdout.splitlines()
    )
    assert done.returncode == 1


def test_pre_commit_hook_definition_runs_the_check():
    import yaml

    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["entry"] == "vmem-lsp check" and hook["types"] == ["python"]


def test_a_module_that_registers_on_import_is_checked_again_after_an_edit(tmp_path):
    """Unchanged, the worker keeps the module loaded (no second run of it);
    edited, running it again raises a duplicate registration, and the check is
    retried once in a new worker, which answers."""
    from vmem_lsp.compile.client import CheckRequest, WorkerClient

    path = tmp_path / "registers.py"
    shutil.copy(KERNELS / "registers_on_import.py", path)
    worker = WorkerClient()
    try:

        def check(target):
            result = worker.check(CheckRequest(example="double(f32[1024, 1024])", target=target, path=str(path)), 300)
            assert result.error is None and [c.fits for c in result.calls] == [True], result.error
            return worker.process.pid

        first = check("v6e")
        assert check("v5e") == first  # the module was reused, not run again
        path.write_text(path.read_text() + "\n# an edit\n")
        assert check("v6e") != first  # run again, it raised; a new worker answered
    finally:
        worker.stop()


def test_a_worker_leaves_no_compiler_log_files_behind(monkeypatch):
    """libtpu writes log files nobody removes, a file per process and level, to /tmp/tpu_logs
    whatever TMPDIR says (and to /tmp itself for a value it cannot use); an LLO_CHECK abort under
    the cycle estimate wrote 0.5-1 GB each, and a day of sweeps filled this machine's 62 GB. A
    worker's go to a folder of its own (libtpu writes them there, named with its process id),
    removed when the worker ends: none is left anywhere libtpu writes by default."""
    from pathlib import Path

    from vmem_lsp.compile.client import CheckRequest, WorkerClient

    monkeypatch.delenv("TPU_LOG_DIR", raising=False)  # conftest's, for the tests' own compiles
    worker = WorkerClient()
    try:
        request = CheckRequest(
            example="matmul(bf16[2048, 2048], bf16[2048, 2048], bm=512, bk=512, bn=512)",
            target="v5e",
            path=str(EXAMPLES / "matmul.py"),
        )
        result = worker.check(request, 300)
        assert result.error is None and result.calls, result.error
        pid, folder = worker.local_pid, worker.log_folder
        assert pid is not None and folder is not None
        assert any(p.name.endswith(f".{pid}") for p in Path(folder).iterdir()), list(Path(folder).iterdir())
    finally:
        worker.stop()
    assert not Path(folder).exists()
    left = [p for d in (Path("/tmp"), Path("/tmp/tpu_logs")) if d.is_dir() for p in d.glob(f"tpu_driver.*.{pid}")]
    assert not left, left


def test_the_cache_answers_only_for_the_same_compiler_flags(tmp_path):
    """Production jobs raise the scoped limit in LIBTPU_INIT_ARGS; a
    verdict cached without it must not be served with it."""
    cache = str(tmp_path / "cache")
    args = ("check", str(EXAMPLES / "matmul.py"), "--target", "v5e", "--cache-dir", cache)
    first = run_cli(*args)
    assert first.returncode == 1 and "18.36M of 16.00M scoped VMEM on TPU v5e" in first.stdout
    raised = subprocess.run(
        [sys.executable, "-m", "vmem_lsp", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "LIBTPU_INIT_ARGS": "--xla_tpu_scoped_vmem_limit_kib=65536"},
    )
    assert raised.returncode == 0, raised.stdout
    assert "(1 compiled, 0 cached" in raised.stdout
    again = run_cli(*args)
    assert again.returncode == 1 and "(0 compiled, 1 cached" in again.stdout


def test_the_scoped_limit_is_a_setting_and_messages_say_where_it_was_set(tmp_path):
    source = tmp_path / "matmul.py"
    source.write_text((EXAMPLES / "matmul.py").read_text())
    (tmp_path / "pyproject.toml").write_text(
        '[tool.vmem-lsp]\ntargets = ["v5e"]\nscoped-vmem-limit = { v5e = "17MiB" }\n'
    )
    done = run_cli("check", str(source), "--no-cache", cwd=tmp_path)
    assert done.returncode == 1
    assert "kernel needs 18.36M of 17.00M scoped VMEM (set in pyproject.toml) on TPU v5e" in done.stdout
    done = run_cli("check", str(source), "--no-cache", "--scoped-vmem-limit", "v5e=64MiB", cwd=tmp_path)
    assert done.returncode == 0, done.stdout
    done = run_cli("check", str(source), "--no-cache", "--scoped-vmem-limit", "v5e=lots", cwd=tmp_path)
    assert done.returncode == 2 and "not a size" in done.stderr


def test_a_slow_compile_is_limited_by_the_compile_limit_and_named():
    """The trace limit covers the example's Python only; a kernel's
    compile gets the compile limit, and its message names the kernel."""
    done, report = run_json(
        "check",
        str(KERNELS / "flash_user.py"),
        "--target",
        "v5e",
        "--no-cache",
        "--trace-timeout",
        "3",
        "--timeout",
        "8",
    )
    [d] = report["diagnostics"]
    assert d["code"] == "VMEM010"
    assert "the TPU compiler did not finish kernel '_flash_attention_kernel' for v5e within 8 s" in d["message"]


def test_a_0_d_argument_written_f32_brackets_is_checked_and_no_cache_leaves_the_folder_alone(tmp_path):
    """`f32[]` in a `# vmem:` line is a 0-d array (it was refused as a syntax error, and the kernel
    went unchecked); the verdict is the compiler's on the same call compiled directly. With
    --no-cache nothing is written into the checked folder (the workers' peaks go to the user's cache)."""
    from support.tpu_direct import compile_directly

    shutil.copy(KERNELS / "scalar_scale.py", tmp_path)
    done, report = run_json("check", "scalar_scale.py", "--target", "v5e", "--no-cache", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    path = tmp_path / "scalar_scale.py"
    windows = by(report["diagnostics"], code="VMEM001")
    assert sorted(d["range"]["start_line"] for d in windows) == [
        line_of(path, "in_specs="),
        line_of(path, "out_specs="),
    ]
    assert all("kernel needs 128.00M of 16.00M scoped VMEM on TPU v5e" in d["message"] for d in windows)
    assert not by(report["diagnostics"], code="VMEM010")
    direct = compile_directly(
        "v5e",
        """
        run = scalar_scale.scale
        args = [jax.ShapeDtypeStruct((), jnp.float32, sharding=sharding),
                jax.ShapeDtypeStruct((4096, 4096), jnp.float32, sharding=sharding)]
        """,
        {"scalar_scale": KERNELS / "scalar_scale.py"},
    )
    assert "128.00M" in direct, direct
    # (Python's own bytecode of the imported example aside, when it writes any)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == ["scalar_scale.py"]


def test_a_grid_sized_from_data_says_so(tmp_path):
    """megablox's gmm, as jax writes it, sizes its grid's middle axis from the group sizes at run
    time; the fit line said `grid (8, -1, 8)`."""
    from support.jax_ops import EXAMPLES, copy_with_example

    example = EXAMPLES["megablox/gmm.py"].replace("tiling=(1024, 1024, 1024)", "tiling=(256, 256, 256)")
    path = copy_with_example("megablox/gmm.py", example, tmp_path)
    done, report = run_json("check", path.name, "--target", "v5e", "--show-fits", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [fit] = by(report["diagnostics"], code="VMEM007")
    assert "(grid (8, ?, 8), ? sized from the data at run time; input 0 bf16[256,256]" in fit["message"], fit
