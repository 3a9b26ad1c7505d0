"""Kernels whose body allocates the VMEM: pltpu.emit_pipeline's
windows and pl.run_scoped's buffers, compiled by the real compiler and traced
for the layout model, through the CLI as a user runs it.

The kernels are tests/data/kernels/pipelines.py; their compiler reports are
tests/data/reports/<libtpu>/pipeline-*.txt and run-scoped-v6e.txt."""

from __future__ import annotations

import pytest
from support import KERNELS, line_of
from support.cli import run_json

PIPELINES = KERNELS / "pipelines.py"


def spec_line(needle: str, nth: int = 0) -> int:
    return line_of(PIPELINES, needle, nth)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    done, report = run_json(
        "check", str(PIPELINES), "--target", "v5e,v6e", "--cache-dir", str(tmp_path_factory.mktemp("cache"))
    )
    assert done.returncode == 1, done.stderr
    return report["diagnostics"]


@pytest.fixture(scope="module")
def modelled(tmp_path_factory):
    done, report = run_json(
        "check",
        str(PIPELINES),
        "--target",
        "v5e,v6e",
        "--no-compile",
        "--cache-dir",
        str(tmp_path_factory.mktemp("cache")),
    )
    assert done.returncode == 1, done.stderr
    return report["diagnostics"]


def at(diagnostics, code: str, line: int) -> list[dict]:
    return [d for d in diagnostics if d["code"] == code and d["range"]["start_line"] == line]


@pytest.mark.compiler  # the fixtures, taken by name at run time, run the CLI
@pytest.mark.parametrize("tier", ["compiled", "modelled"])
def test_every_inner_blockspec_of_an_overflowing_pipeline_is_marked_on_its_own_line(tier, request):
    """Each inner BlockSpec holds half the total: each gets a VMEM001 at its
    block shape, not a compiler-internal remainder on the pallas_call."""
    diagnostics = request.getfixturevalue(tier)
    for needle, what in (
        ("in_specs=[pl.BlockSpec((bm, x_hbm", "pipeline input window f32[1024,8192]"),
        ("out_specs=pl.BlockSpec((bm, x_hbm", "pipeline output window f32[1024,8192]"),
    ):
        line = spec_line(needle)
        [marked] = at(diagnostics, "VMEM001", line)
        assert marked["message"].startswith(what), marked["message"]
        text = PIPELINES.read_text().splitlines()[line - 1]
        assert text[marked["range"]["start_col"] :].startswith("(bm, x_hbm.shape[1])")
    internal = [d for d in diagnostics if d["code"] == "VMEM003" and "flat_kernel" in str(d["related"])]
    assert not internal


def test_the_compiler_names_the_kernel_not_our_wrapper(compiled):
    assert not [d for d in compiled if "_lambda_" in d["message"] or "lambda" in d["message"]]


def test_pipelines_in_a_row_share_their_memory(compiled, modelled):
    """Two emit_pipelines one after the other: 128.00M, not 256.00M, in the
    model as in the compiler's report."""
    for diagnostics in (compiled, modelled):
        [total] = [d for d in diagnostics if d["code"] == "VMEM002" and "in_a_row_kernel" in d["message"]]
        assert "needs 128.00M" in total["message"] or "needs ~128.00M" in total["message"], total["message"]


def test_a_single_buffered_inner_spec_and_run_scoped_buffers(compiled):
    [single] = at(compiled, "VMEM001", spec_line("pipeline_mode=pl.Buffered(1)"))
    assert "pipeline input window f32[2048,8192] = 64.00M, single buffered" in single["message"]
    scoped = sorted(at(compiled, "VMEM001", spec_line("pl.run_scoped(body")), key=lambda d: d["range"]["start_col"])
    assert len(scoped) == 2
    text = PIPELINES.read_text().splitlines()[spec_line("pl.run_scoped(body") - 1]
    assert all(text[d["range"]["start_col"] :].startswith("pltpu.VMEM(") for d in scoped)
    assert all("run_scoped VMEM f32[4096,4104] = 66.00M" in d["message"] for d in scoped)


def test_a_fits_the_model_cannot_vouch_for_is_a_warning_not_a_silent_pass(tmp_path):
    """dot: the windows fit v5e's 16M by the model (14.00M), the compiler
    needs 17.33M for the f32 dot result it stages in VMEM. Without a compiler
    the verdict is a lower bound, said on the line of the dot; exit 0."""
    copy = tmp_path / "dot_only.py"
    text = PIPELINES.read_text()
    copy.write_text(
        "\n".join(l for l in text.splitlines() if not l.startswith("# vmem:") or l.startswith("# vmem: dot(")) + "\n"
    )
    done, report = run_json("check", str(copy), "--target", "v5e", "--no-compile", "--cache-dir", str(tmp_path / "c"))
    assert done.returncode == 0, done.stderr
    [warning] = [d for d in report["diagnostics"] if d["code"] == "VMEM006"]
    assert warning["severity"] == "warning"
    assert warning["range"]["start_line"] == line_of(copy, "jnp.dot(")
    assert "lower bound" in warning["message"] and "f32[1024,1024] from dot_general" in warning["message"]
    assert report["summary"].startswith("0 errors, 2 warnings in 1 example")  # and in_hbm's VMEM020
    assert report["summary"].endswith("; 1 kernel not checked")


def test_a_quick_fix_shrinks_the_blocks_of_the_inner_specs(tmp_path):
    """flat's only knob is the example's bm, which sizes the emit_pipeline's
    inner BlockSpecs: halving it is found, and verified by the compiler."""
    from support.fixes import fixes_for

    copy = tmp_path / "flat_only.py"
    copy.write_text(
        "\n".join(
            l
            for l in PIPELINES.read_text().splitlines()
            if not l.startswith("# vmem:") or l.startswith("# vmem: flat(")
        )
        + "\n"
    )
    [(example, fixes)] = fixes_for(copy, ("v6e",), tmp_path / "cache")
    best = next(f for f in fixes if f.verified)
    assert best.kind == "shrink" and "bm=" in best.title and "in the example" in best.title, best.title


def test_a_kernel_fed_by_its_program_says_its_figure_is_for_the_kernel_alone(tmp_path):
    """Compiled alone, produced's kernel needs 24.00M of v5e's
    16.00M; in its program XLA keeps the operand it makes whole in VMEM and
    the kernel needs 16.00M. The message says so; plain's, which takes the
    example's own arrays and compiles the same in its program, does not."""
    kernels = KERNELS / "in_program.py"
    done, report = run_json("check", str(kernels), "--target", "v5e", "--cache-dir", str(tmp_path / "c"))
    totals = {
        d["facts"]["example"].rsplit(":", 1)[1]: d["message"] for d in report["diagnostics"] if d["code"] == "VMEM002"
    }
    plain, produced = line_of(kernels, "# vmem: plain("), line_of(kernels, "# vmem: produced(")
    assert "compiled alone" not in totals[str(plain)]
    assert (
        "compiled alone; in the example's program XLA may keep input 0 (8.00M) whole in VMEM" in totals[str(produced)]
    ), totals
