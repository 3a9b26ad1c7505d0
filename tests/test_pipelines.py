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
PACKAGE = KERNELS / "pipeline_pkg"


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
        ("in_specs=[pl.BlockSpec((bm, x_hbm", "pipeline input 0 window f32[1024,8192]"),
        ("out_specs=pl.BlockSpec((bm, x_hbm", "pipeline output 0 window f32[1024,8192]"),
    ):
        line = spec_line(needle)
        [marked] = at(diagnostics, "VMEM001", line)
        assert marked["message"].startswith(what), marked["message"]
        text = PIPELINES.read_text().splitlines()[line - 1]
        assert text[marked["range"]["start_col"] :].startswith("(bm, x_hbm.shape[1])")
        assert not [r for r in marked["related"] if "this call makes" in r["message"]]  # made where it is passed
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
    assert "pipeline input 0 window f32[2048,8192] = 64.00M, single buffered" in single["message"]
    scoped = sorted(at(compiled, "VMEM001", spec_line("pl.run_scoped(body")), key=lambda d: d["range"]["start_col"])
    assert len(scoped) == 2
    text = PIPELINES.read_text().splitlines()[spec_line("pl.run_scoped(body") - 1]
    assert all(text[d["range"]["start_col"] :].startswith("pltpu.VMEM(") for d in scoped)
    assert all("run_scoped VMEM f32[4096,4104] = 66.00M" in d["message"] for d in scoped)


@pytest.fixture(scope="module")
def package_compiled(tmp_path_factory):
    done, report = run_json(
        "check", str(PACKAGE), "--target", "v6e", "--cache-dir", str(tmp_path_factory.mktemp("cache"))
    )
    assert done.returncode == 1, done.stderr
    return report["diagnostics"]


@pytest.fixture(scope="module")
def package_modelled(tmp_path_factory):
    done, report = run_json(
        "check", str(PACKAGE), "--target", "v6e", "--no-compile", "--cache-dir", str(tmp_path_factory.mktemp("cache"))
    )
    assert done.returncode == 1, done.stderr
    return report["diagnostics"]


def places(diagnostics):
    """Every (file name, line, column, message) a check marks: diagnostics and their related information."""
    for d in diagnostics:
        yield d["path"].rsplit("/", 1)[-1], d["range"]["start_line"], d["range"]["start_col"], d["message"]
        for r in d["related"]:
            yield r["path"].rsplit("/", 1)[-1], r["range"]["start_line"], r["range"]["start_col"], r["message"]


@pytest.mark.compiler  # the fixtures, taken by name at run time, run the CLI
@pytest.mark.parametrize("tier", ["package_compiled", "package_modelled"])
def test_inner_specs_made_by_a_helper_module_are_marked_in_the_helper_with_the_call_that_shaped_them(tier, request):
    """pipeline_pkg: emit_pipeline's BlockSpecs are made by specs.tiles in
    another module and the pallas_call runs inside `with jax.named_scope` (fused)
    or a contextlib context manager (fused_profiled). Each window is marked on
    the BlockSpec that made it, by its place in the inner pipeline (input 0 and
    output 0 share a line: two buffers, two errors), with the call in the
    kernel body that gave it its shape as related information; never on the
    pallas_call or the emit_pipeline."""
    specs, kernel = PACKAGE / "specs.py", PACKAGE / "kernel.py"
    diagnostics = [  # kernel.py's examples (staged.py's are the next test's)
        d for d in request.getfixturevalue(tier) if d["facts"].get("example", "").startswith(f"{kernel}:")
    ]
    first, second = (line_of(specs, "pl.BlockSpec((bm, bk)", n) for n in (0, 1))
    half = line_of(specs, "pl.BlockSpec((bm, bk // 2)")
    ins, outs = line_of(kernel, "in_specs=(*specs.tiles("), line_of(kernel, "out_specs=specs.tiles(")
    made = {  # window -> (its BlockSpec's line in specs.py, the line in kernel.py of the call that made it)
        "input 0": (first, ins),
        "input 1": (second, ins),
        "input 2": (half, ins),
        "output 0": (first, outs),
        "output 1": (second, outs),
    }
    is_ = "~" if tier == "package_modelled" else "="
    examples = [line_of(kernel, directive) for directive in ("# vmem: fused(", "# vmem: fused_profiled(")]
    # The two examples reach the kernel alike: each window is one error that names both.
    errors = [d for d in diagnostics if d["code"] == "VMEM001"]
    assert sorted(d["message"].split(", ")[0] for d in errors) == [  # five errors, two pairs on one line
        f"pipeline input 0 window bf16[4096,2048] {is_} 32.00M",
        f"pipeline input 1 window bf16[4096,2048] {is_} 32.00M",
        f"pipeline input 2 window bf16[4096,1024] {is_} 16.00M",
        f"pipeline output 0 window bf16[4096,2048] {is_} 32.00M",
        f"pipeline output 1 window bf16[4096,2048] {is_} 32.00M",
    ], errors
    for d in errors:
        window = d["message"].removeprefix("pipeline ").split(" window ")[0]
        spec_line, call_line = made[window]
        assert (d["abs_path"], d["range"]["start_line"]) == (str(specs), spec_line), d
        text = specs.read_text().splitlines()[spec_line - 1]
        assert text[d["range"]["start_col"] :].startswith("(bm, bk"), d
        [call] = [r for r in d["related"] if r["message"].startswith("this call makes the BlockSpec of pipeline")]
        assert call["message"].endswith(d["message"].split(" = ")[0].split(" ~ ")[0]), call
        assert (call["path"].rsplit("/", 1)[-1], call["range"]["start_line"]) == ("kernel.py", call_line), call
        called = kernel.read_text().splitlines()[call_line - 1][call["range"]["start_col"] :]
        assert called.startswith("specs.half_tile(" if window == "input 2" else "specs.tiles("), call
        named = {r["range"]["start_line"] for r in d["related"] if r["message"].startswith("example ")}
        assert named == set(examples), d["related"]
    [total] = [d for d in diagnostics if d["code"] == "VMEM002"]
    assert total["range"]["start_line"] == line_of(kernel, "return pl.pallas_call(")
    assert {r["range"]["start_line"] for r in total["related"] if r["message"].startswith("example ")} == set(examples)
    assert not [d for d in diagnostics if d["code"] in ("VMEM001", "VMEM003") and d["abs_path"] == str(kernel)]
    for name, line, _, message in places(diagnostics):  # nothing of a window anywhere else, related or not
        if " window " in message and message.startswith(("pipeline ", "this call makes")):
            window = message.removeprefix("this call makes the BlockSpec of ").removeprefix("pipeline ")
            spec_line, call_line = made[window.split(" window ")[0]]
            expected = ("kernel.py", call_line) if message.startswith("this call") else ("specs.py", spec_line)
            assert (name, line) == expected, (name, line, message)


@pytest.mark.compiler
def test_pipelines_made_on_one_line_keep_their_own_specs(tmp_path):
    """staged: two emit_pipelines made on one line of a loop (specs.wide's,
    then specs.tiles'): the first is the peak, and its windows are marked on
    specs.wide's BlockSpecs, with the in_specs or out_specs call of the loop's
    line, not on the specs of the pipeline that was made last."""
    staged, specs = PACKAGE / "staged.py", PACKAGE / "specs.py"
    done, report = run_json("check", str(staged), "--target", "v6e", "--cache-dir", str(tmp_path / "c"))
    assert done.returncode == 1, done.stderr
    wide = [line_of(specs, "pl.BlockSpec((bm, 2 * bk)", n) for n in (0, 1)]
    loop = line_of(staged, "pltpu.emit_pipeline(")
    text = staged.read_text().splitlines()[loop - 1]
    calls = {"in": text.index("make(bm, bk)"), "out": text.index("make(bm, bk)", text.index("out_specs="))}
    errors = [d for d in report["diagnostics"] if d["code"] == "VMEM001"]
    assert sorted((d["message"].split(" = ")[0], d["range"]["start_line"]) for d in errors) == [
        ("pipeline input 0 window bf16[4096,4096]", wide[0]),
        ("pipeline input 1 window bf16[4096,4096]", wide[1]),
        ("pipeline output 0 window bf16[4096,4096]", wide[0]),
    ]
    for d in errors:
        [call] = [r for r in d["related"] if r["message"].startswith("this call makes")]
        column = calls["out" if " output " in d["message"] else "in"]
        assert (call["range"]["start_line"], call["range"]["start_col"]) == (loop, column), call
    tiles = {line_of(specs, "pl.BlockSpec((bm, bk)", n) for n in (0, 1)}
    assert not [p for p in places(report["diagnostics"]) if p[0] == "specs.py" and p[1] in tiles]


def test_a_run_scoped_body_that_takes_the_wrong_buffers_is_the_examples_error(tmp_path):
    """The worker traces a run_scoped body through its own hook: a body that
    takes one buffer where two are allocated fails in the user's code (VMEM010
    on the example, raised at the run_scoped line), not as vmem-lsp's error."""
    kernel = tmp_path / "wrong_arity.py"
    kernel.write_text(
        "import jax\n"
        "from jax.experimental import pallas as pl\n"
        "from jax.experimental.pallas import tpu as pltpu\n\n\n"
        "def copy_kernel(x_hbm, o_hbm):\n"
        "    def body(a_ref):\n"
        "        pltpu.sync_copy(x_hbm, a_ref)\n"
        "        pltpu.sync_copy(a_ref, o_hbm)\n"
        "    pl.run_scoped(body, pltpu.VMEM(x_hbm.shape, x_hbm.dtype), pltpu.VMEM(x_hbm.shape, x_hbm.dtype))\n\n\n"
        "# vmem: copy(f32[8, 128])\n"
        "def copy(x):\n"
        "    hbm = pl.BlockSpec(memory_space=pl.ANY)\n"
        "    out = jax.ShapeDtypeStruct(x.shape, x.dtype)\n"
        "    return pl.pallas_call(copy_kernel, out_shape=out, in_specs=[hbm], out_specs=hbm)(x)\n"
    )
    done, report = run_json("check", str(kernel), "--target", "v6e", "--cache-dir", str(tmp_path / "c"))
    [error] = [d for d in report["diagnostics"] if d["code"] == "VMEM010"]
    assert "the example raised: TypeError" in error["message"], error["message"]
    assert f"raised at {kernel}:{line_of(kernel, 'pl.run_scoped(body')}" in error["message"], error["message"]


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
