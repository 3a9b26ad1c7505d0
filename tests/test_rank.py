"""`sweep --rank speed`: the configs that fit, ranked on each chip by the
compiler's static cycle estimate, the roofline's best few estimated; a chip
whose libtpu aborts under the estimate keeps its verdicts and says so once."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from support import EXAMPLES
from support.cli import run_cli, run_json

from vmem_lsp.results import CapturedCall, ExampleResult, Operand
from vmem_lsp.sweep.rank import LOOPS_CAVEAT, Estimate, estimate_from, ranks, screen
from vmem_lsp.tpu.chips import PEAKS
from vmem_lsp.tpu.speed import roofline_seconds


def matmul_call(bm: int, bn: int, k: int = 1024, m: int = 2048, n: int = 2048, x_constant=False) -> CapturedCall:
    def operand(role, index, full, block, constant=False):
        return Operand(role, index, index, "bf16", full, block, "vmem", None, constant, None)

    return CapturedCall(
        "mm_kernel",
        None,
        None,
        (m // bm, n // bn),
        0,
        (
            operand("in", 0, (m, k), (bm, k), x_constant),
            operand("in", 1, (k, n), (k, bn)),
            operand("out", 0, (m, n), (bm, bn)),
        ),
        (),
        None,
        True,
        None,
        1.0,
        flops_per_step=2 * bm * bn * k,
    )


def test_fewer_larger_steps_are_faster_at_best_and_a_still_window_is_copied_once():
    v6e = PEAKS["v6e"]
    times = [roofline_seconds(matmul_call(b, b), v6e) for b in (128, 256, 512)]
    assert times == sorted(times, reverse=True), times
    assert roofline_seconds(matmul_call(256, 256, x_constant=True), v6e) < times[1]
    still = matmul_call(256, 256, x_constant=True)
    without_x = CapturedCall(**{**vars(still), "operands": still.operands[1:]})
    once = 256 * 1024 * 2 / v6e.hbm  # its bf16[256,1024] block, copied once, not at every step
    assert roofline_seconds(still, v6e) - roofline_seconds(without_x, v6e) == pytest.approx(once)


def test_the_screen_takes_the_best_rooflines_and_puts_the_unknown_last():
    assert screen({0: 3.0, 1: 1.0, 2: None, 3: 2.0}, 2) == [1, 3]
    assert screen({0: 3.0, 1: 1.0, 2: None, 3: 2.0}, None) == [1, 3, 0, 2]


def test_ranks_start_at_the_fewest_cycles_and_ties_share_one():
    assert ranks({7: 300, 3: 100, 5: 200, 9: 200}) == {3: 1, 5: 2, 9: 2, 7: 4}
    assert ranks({}) == {}


def test_an_example_has_an_estimate_only_when_every_kernel_has_one():
    call = matmul_call(256, 256)
    with_cycles = [CapturedCall(**{**vars(call), "estimated_cycles": n}) for n in (1000, 234)]
    assert estimate_from(ExampleResult("v6e", None, tuple(with_cycles))) == Estimate(1234)
    lacking = CapturedCall(
        **{**vars(call), "no_estimate": "the compiler wrote no estimate for this kernel on this chip"}
    )
    assert estimate_from(ExampleResult("v6e", None, (with_cycles[0], lacking))).why_none == lacking.no_estimate
    crashed = estimate_from(ExampleResult("v4", None, error="the worker was killed by signal 6 (SIGABRT) while ..."))
    assert crashed.cycles is None and "signal 6" in (crashed.why_none or "")


def test_an_estimate_left_by_an_aborted_compile_counts_only_for_one_kernel():
    """The profile a worker left when libtpu aborted it is the estimate of its last compile: the
    whole example's where that was its one kernel on its whole grid (64 steps at most); for a
    longer grid, one of its cut grids', scaled by the steps the worker noted it compiled."""
    aborted = ExampleResult("v7x", None, error="killed by signal 6", error_kind="crashed", estimate_left=5000)
    short, long = (
        ExampleResult("v7x", None, (matmul_call(512, 512),)),
        ExampleResult("v7x", None, (matmul_call(128, 128),)),
    )
    assert estimate_from(aborted, short).cycles == 5000 and "aborted" in (estimate_from(aborted, short).caveat or "")
    assert estimate_from(aborted, long).cycles is None  # 16 x 16 steps, and which cut's it is is not known
    cut = replace(aborted, estimate_left_steps=64)  # the 8 x 8 cut of the 16 x 16 grid
    scaled = estimate_from(cut, long)
    assert scaled.cycles == 5000 * 256 // 64 and "scaled to the whole grid" in (scaled.caveat or ""), scaled
    two = ExampleResult("v7x", None, (matmul_call(512, 512), matmul_call(512, 512)))
    assert estimate_from(aborted, two).cycles is None and estimate_from(aborted).aborted


@pytest.mark.compiler
def test_a_ranked_sweep_gives_every_config_that_fits_an_estimate_or_a_reason(tmp_path):
    """jax's own matmul shape, 8 configs on v6e and v4: v6e's best 3 by roofline are
    estimated and ranked 1 to 3; v4's libtpu aborts under the estimate (its DMA
    model), so v4 keeps its verdicts, gives up after two aborts and says why once."""
    spec = f"{EXAMPLES / 'matmul.py'}:matmul(bf16[2048, 2048], bf16[2048, 2048], bm=[256, 512], bk=[256, 512], bn=[256, 512])"
    args = ("sweep", spec, "--target", "v6e,v4", "--rank", "speed", "--rank-top", "3", "--cache-dir", str(tmp_path))
    done, report = run_json(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    configs = report["configs"]
    v6e = [c for c in configs if c["target"] == "v6e"]
    assert len(v6e) == 8 and all(c["fits"] for c in v6e)
    estimated = sorted((c for c in v6e if c["estimated_cycles"] is not None), key=lambda c: c["speed_rank"])
    assert [c["speed_rank"] for c in estimated] == [1, 2, 3], v6e
    assert [c["estimated_cycles"] for c in estimated] == sorted(c["estimated_cycles"] for c in estimated)
    for c in v6e:
        assert c["roofline_seconds"] > 0
        if c["estimated_cycles"] is None:
            assert c["no_estimate"] == "not among the 3 best by roofline" and c["speed_rank"] is None, c
    # The roofline's best 3 were the ones estimated.
    best = sorted(v6e, key=lambda c: c["roofline_seconds"])[:3]
    assert {id(c) for c in best} == {id(c) for c in estimated}
    v4 = [c for c in configs if c["target"] == "v4"]
    assert all(c["fits"] and c["estimated_cycles"] is None and c["no_estimate"] for c in v4), v4
    assert "aborted" in report["no_estimates"]["v4"]
    assert sum(c["no_estimate"].startswith("not tried") for c in v4) == 1  # the third of the best 3
    assert report["estimates"] == 5  # 3 on v6e, 2 aborted on v4

    again, text = run_json(*args, cwd=tmp_path)  # the estimates are cached with the verdicts
    assert [c["estimated_cycles"] for c in text["configs"]] == [c["estimated_cycles"] for c in configs]

    drawn = run_cli(*args, "--plot", str(tmp_path / "frontier.png"), cwd=tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    assert " cycles " in drawn.stdout.splitlines()[3] and " rank " in drawn.stdout.splitlines()[3], drawn.stdout
    for picture in ("frontier.png", "frontier-speed.png"):  # the estimates against the VMEM used, beside it
        assert (tmp_path / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# The example's one pallas_call compiled alone, as the sweep estimates it: in the example's own
# program libtpu's profile gives part of a kernel's cycles to the XLA ops before it (tpu-inference's
# quantized matmul on v6e: 13524 in its program, 23270 alone; the program's ops together 22896).
DIRECT_PROFILE = """
import sys
sys.path.insert(0, {folder!r})
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding
{imports}
device = topologies.get_topology_desc(platform="tpu", topology_name={topology!r}).devices[0]
def calls(jaxpr):
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            yield eqn
        for param in eqn.params.values():
            inner = getattr(param, "jaxpr", None)
            if inner is not None:
                yield from calls(getattr(inner, "jaxpr", inner))
[kernel] = calls(jax.make_jaxpr(lambda *a: {call})(*{arguments}).jaxpr)
operands = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype, sharding=SingleDeviceSharding(device)) for v in kernel.invars]
with jax.default_device(device):
    jax.jit(lambda *a: kernel.primitive.bind(*a, **kernel.params)).lower(*operands).compile()
print("compiled")
"""


def profile_left(written: Path, folder: Path, **script) -> int:
    """The cycles of the profile a direct compile (no vmem-lsp, `folder` on sys.path) of the
    example's pallas_call under the profile flag leaves in `written`, asserting that libtpu
    aborts it (an LLO_CHECK in its analysis) after writing it."""
    import os
    import subprocess
    import sys

    from vmem_lsp.tpu.static_profile import PROFILE_FLAG, parse_static_profile

    written.mkdir()
    env = {**os.environ, "LIBTPU_INIT_ARGS": f"{PROFILE_FLAG}={written}", "JAX_PLATFORMS": "cpu"}
    env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    direct = subprocess.run(
        [sys.executable, "-c", DIRECT_PROFILE.format(folder=str(folder), **script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert direct.returncode != 0 and "LLO_CHECK" in direct.stderr, direct.stderr[-1000:]  # it aborts...
    [profile] = list(written.iterdir())  # ...after writing the estimate
    return sum(op.cycles for op in parse_static_profile(profile.read_text()))


def test_an_estimate_libtpu_wrote_before_it_aborted_is_ranked(tmp_path):
    """v7x on libtpu 0.0.42.1 aborts every compile under the profile (an LLO_CHECK in its analysis),
    after writing the profile: the sweep ranks what it wrote, says so, and the figures are those of
    the profile a direct compile with the same flag leaves before it aborts."""
    spec = f"{EXAMPLES / 'matmul.py'}:matmul(bf16[1024, 1024], bf16[1024, 1024], bm=[512, 1024], bk=[512], bn=[512])"
    args = ("sweep", spec, "--target", "v7x", "--rank", "speed", "--rank-top", "0", "--cache-dir", str(tmp_path))
    done, report = run_json(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    ranked = {c["params"]["bm"]: c for c in report["configs"]}
    assert sorted(c["speed_rank"] for c in ranked.values()) == [1, 2], ranked
    assert "libtpu aborted the compile after writing its estimate" in report["estimate_caveats"]["v7x"]
    for bm, c in ranked.items():
        call = f"matmul(*a, bm={bm}, bk=512, bn=512)"
        arguments = "[jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16)] * 2"
        cycles = profile_left(
            tmp_path / f"profile-{bm}",
            EXAMPLES,
            imports="from matmul import matmul",
            topology="tpu7x:2x2x1",
            call=call,
            arguments=arguments,
        )
        assert c["estimated_cycles"] == cycles, c


QUANTIZED_MATMUL = """import jax.numpy as jnp
from tpu_inference.kernels.quantized_matmul.kernel import quantized_matmul_kernel
from tpu_inference.kernels.quantized_matmul.tuned_block_sizes import TunedValue
"""


def test_tpu_inferences_quantized_matmul_is_ranked_on_v6e_from_the_estimate_left_before_libtpu_aborts(tmp_path):
    """Issue 43: tpu-inference's int8 quantized matmul (its own files, from its wheel on PyPI) at a
    shape of its v6e tuned table, around its tuned blocks (1024, 256, 4096): libtpu 0.0.42.1 aborts
    every compile under the profile on v6e (LLO_CHECK "Expected vector-bf16packed, got
    vector-int32"), after writing it. Every config that fits is ranked, none "aborted": the tuned
    one with the cycles a direct compile of it leaves; (128, 256, 1024), a grid of 8 x 4 x 4 steps
    estimated on cut grids, from the first cut's, scaled."""
    from support.tpu_inference_kernels import quantized_matmul

    quantized_matmul(tmp_path)
    (tmp_path / "qmm.py").write_text(QUANTIZED_MATMUL, encoding="utf-8")
    spec = (
        "qmm.py:quantized_matmul_kernel(bf16[1024, 4096], i8[1024, 4096], f32[1024], x_q_dtype=jnp.int8, "
        "tuned_value=TunedValue(batch_block_size=[128, 1024], out_block_size=256, in_block_size=[1024, 4096]))"
    )
    args = ("sweep", spec, "--target", "v6e", "--rank", "speed", "--rank-top", "0", "--cache-dir", str(tmp_path))
    done, report = run_json(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    configs = report["configs"]
    assert len(configs) == 4 and all(c["fits"] for c in configs), configs
    assert sorted(c["speed_rank"] for c in configs) == [1, 2, 3, 4], configs
    assert not any(c["no_estimate"] for c in configs), configs
    assert "libtpu aborted the compile after writing its estimate" in report["estimate_caveats"]["v6e"]
    cut = next(c for c in configs if list(c["params"].values()) == [128, 1024])
    assert "scaled to the whole grid" in cut["estimate_caveat"] and "scaled" in report["estimate_caveats"]["v6e"], cut
    _, again = run_json(*args, cwd=tmp_path)  # an abort that left its estimate is an answer: kept
    assert again["estimate_cache_hits"] == again["estimates"] == report["estimates"] > 0, again
    assert [c["estimated_cycles"] for c in again["configs"]] == [c["estimated_cycles"] for c in configs]
    tuned = next(c for c in configs if list(c["params"].values()) == [1024, 4096])
    call = "quantized_matmul_kernel(*a, x_q_dtype=jnp.int8, tuned_value=TunedValue(1024, 256, 4096))"
    arguments = "[jax.ShapeDtypeStruct(s, t) for s, t in [((1024, 4096), jnp.bfloat16), ((1024, 4096), jnp.int8), ((1024,), jnp.float32)]]"
    cycles = profile_left(
        tmp_path / "profile",
        tmp_path,
        imports=QUANTIZED_MATMUL,
        topology="v6e:2x2",
        call=call,
        arguments=arguments,
    )
    assert tuned["estimated_cycles"] == cycles, tuned


def test_the_api_ranks_on_one_chip_only_and_says_so_before_starting_anything():
    import vmem_lsp

    with pytest.raises(ValueError, match="one chip"):
        vmem_lsp.rank(print, (), [{"bm": 8}], target="v5e,v6e")
    with pytest.raises(ValueError, match="one target"):
        vmem_lsp.prune(print, (), [{"bm": 8}], targets=("v5e", "v6e"), top=2)


SWEEP_LINE = "# vmem: matmul(bf16[2048, 2048], bf16[2048, 2048], bm=[256, 512], bk=512, bn=[256, 512])\n"


@pytest.mark.asyncio
async def test_the_editor_ranks_a_sweep_line_from_its_code_lens(tmp_path):
    """A `# vmem:` line that holds lists gets a lens that ranks its configs (asked for:
    it runs the user's code and costs compiles), then names the fastest on each chip."""
    from lsprotocol import types
    from support.lsp_client import Editor, running_server

    path = tmp_path / "matmul.py"
    path.write_text((EXAMPLES / "matmul.py").read_text().replace("# vmem: matmul(", SWEEP_LINE + "# vmem: matmul(", 1))
    line = path.read_text().splitlines().index(SWEEP_LINE.strip())
    async with running_server(tmp_path, options={"targets": ["v6e"]}) as client:
        editor = Editor(client, path)
        document = types.TextDocumentIdentifier(editor.uri)
        # Asked before the server has run didOpen's handler (an editor asks at once): the file answers.
        early = await client.text_document_code_lens_async(types.CodeLensParams(document))
        assert [lens.range.start.line for lens in early] == [line], early
        editor.open()
        lenses = await client.text_document_code_lens_async(types.CodeLensParams(document))
        (ask,) = [lens for lens in lenses if lens.range.start.line == line]
        assert ask.command.title == "Rank these 4 configs by the compiler's speed estimate", ask
        answer = await client.workspace_execute_command_async(
            types.ExecuteCommandParams(ask.command.command, ask.command.arguments)
        )
        assert answer["said"].startswith("fastest that fits: v6e bm=512, bn=512 ("), answer
        assert answer["estimates"] == 4, answer
        lenses = await client.text_document_code_lens_async(types.CodeLensParams(document))
        (said,) = [lens for lens in lenses if lens.range.start.line == line]
        assert said.command.title == answer["said"]


def test_an_estimate_of_a_kernel_with_a_loop_of_run_time_length_says_it_may_mislead():
    call = CapturedCall(**{**vars(matmul_call(256, 256)), "estimated_cycles": 1000, "loops_unknown": True})
    found = estimate_from(ExampleResult("v6e", None, (call,)))
    assert found.cycles == 1000 and found.caveat and "run time" in found.caveat


def test_a_long_grid_whose_steps_skip_their_matrix_work_says_its_estimate_may_mislead():
    """Causal attention's cut grid, extrapolated, was 0.46x to 1.10x of the whole grid
    (bench/RANK.md); a short grid is estimated whole and needs no caveat."""
    long = CapturedCall(**{**vars(matmul_call(64, 64)), "estimated_cycles": 1000, "steps_vary": True})
    assert long.grid[0] * long.grid[1] > 64
    found = estimate_from(ExampleResult("v6e", None, (long,)))
    assert found.cycles == 1000 and found.caveat and "under a condition" in found.caveat
    short = CapturedCall(**{**vars(matmul_call(1024, 1024)), "estimated_cycles": 1000, "steps_vary": True})
    assert estimate_from(ExampleResult("v6e", None, (short,))).caveat is None


def test_running_out_of_memory_or_time_under_the_profile_counts_as_aborting_and_a_protocol_mismatch_does_not():
    for kind, aborted in (("crashed", True), ("memory", True), ("timeout", True), ("protocol", False)):
        found = estimate_from(ExampleResult("v6e", None, error="it failed", error_kind=kind))
        assert found.cycles is None and found.aborted is aborted, kind


CAUSAL = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def kernel(x_ref, y_ref, o_ref):
    """A product of blocks only on and below the diagonal, as causal attention skips the rest."""
    i, j = pl.program_id(0), pl.program_id(1)

    @pl.when(i >= j)
    def _():
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(i < j)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)


# vmem: causal(f32[2048, 128], f32[128, 2048], rows=[64, 512])
def causal(x, y, rows=64):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((x.shape[0], y.shape[1]), jnp.float32),
        grid=(x.shape[0] // rows, y.shape[1] // 128),
        in_specs=[pl.BlockSpec((rows, 128), lambda i, j: (i, 0)), pl.BlockSpec((128, 128), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((rows, 128), lambda i, j: (i, j)),
    )(x, y)
'''


@pytest.mark.compiler
def test_a_ranked_sweep_of_a_kernel_that_skips_steps_says_so_where_its_grid_was_cut(tmp_path):
    (tmp_path / "causal.py").write_text(CAUSAL)
    done, report = run_json("sweep", "causal.py", "--target", "v6e", "--rank", "speed", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    by_rows = {c["params"]["rows"]: c for c in report["configs"]}
    assert by_rows[64]["estimated_cycles"] and "under a condition" in (
        by_rows[64]["estimate_caveat"] or ""
    )  # 512 steps
    assert by_rows[512]["estimated_cycles"] and by_rows[512]["estimate_caveat"] is None  # 64 steps: estimated whole


def loop_forms() -> dict[str, bool]:
    """bench/probe_loop_count.py's kernel in each of its forms, traced: whether the capture
    calls its loop one of run-time length."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import jax
    import jax.numpy as jnp
    import probe_loop_count

    from vmem_lsp.compile.capture import has_unknown_loops

    found = {}
    for form in probe_loop_count.FORMS:
        traced = jax.make_jaxpr(probe_loop_count.looped(form))(
            jax.ShapeDtypeStruct((4,), jnp.int32), jax.ShapeDtypeStruct((512, 512), jnp.bfloat16)
        )
        [kernel] = [e for e in traced.jaxpr.eqns if e.primitive.name == "pallas_call"]
        found[form] = has_unknown_loops(kernel.params["jaxpr"])
    return found


def test_a_loop_bounded_in_the_code_is_known_and_one_bounded_by_a_ref_is_not():
    assert loop_forms() == {
        "static 1": False,
        "static 2": False,
        "static 8": False,
        "fori": True,
        "fori x2": True,
        "while": True,
        "while x2": True,
    }


@pytest.mark.compiler
def test_the_compilers_estimate_leaves_a_loop_of_run_time_length_out_as_the_caveat_says():
    """What LOOPS_CAVEAT says, held to libtpu: a loop bounded by a ref's value costs the same
    with its body once or twice a trip, and less than the same loop bounded at one trip in the
    code; a loop bounded in the code is counted trip by trip."""
    probe = Path(__file__).resolve().parent.parent / "bench" / "probe_loop_count.py"
    env = {**os.environ, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    done = subprocess.run(
        [sys.executable, str(probe), "--target", "v6e", "--forms", "static 1,static 2,while,while x2"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split("|")[1:3] for line in done.stdout.splitlines() if line.startswith("| ") and "cycles" not in line]
    cycles = {form.strip(): int(n) for form, n in rows}
    assert cycles["while"] == cycles["while x2"] < cycles["static 1"] < cycles["static 2"], cycles
    assert "leaves such a loop out" in LOOPS_CAVEAT


LOOPING = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def kernel(x_ref, o_ref):
    """Adds the block to itself as many times as its first element says: a loop whose
    length only the data knows, as ragged attention loops over its sequences."""
    times = x_ref[0, 0].astype(jnp.int32)

    def add(carry):
        count, total = carry
        return count + 1, total + x_ref[...]

    _, total = jax.lax.while_loop(lambda c: c[0] < times, add, (0, jnp.zeros_like(x_ref[...])))
    o_ref[...] = total


# vmem: looped(f32[1024, 1024], rows=[256, 512])
def looped(x, rows=256):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // rows,),
        in_specs=[pl.BlockSpec((rows, 1024), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((rows, 1024), lambda i: (i, 0)),
    )(x)
'''


@pytest.mark.compiler
def test_a_ranked_sweep_of_a_kernel_with_a_run_time_loop_says_its_estimates_may_mislead(tmp_path):
    """The static estimate counts a while loop's body once (bench/RANK.md: jax's ragged
    attention): the ranks are given, and said to be doubtful, on every row and once below."""
    (tmp_path / "looping.py").write_text(LOOPING)
    done, report = run_json("sweep", "looping.py", "--target", "v6e", "--rank", "speed", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = [c for c in report["configs"] if c["estimated_cycles"] is not None]
    assert len(rows) == 2 and all("known only at run time" in (c["estimate_caveat"] or "") for c in rows), rows
    assert "known only at run time" in report["estimate_caveats"]["v6e"]
    text = run_cli("sweep", "looping.py", "--target", "v6e", "--rank", "speed", cwd=tmp_path).stdout
    assert "\nestimates on v6e: the kernel loops a number of times known only at run time" in text, text
