"""A kernel's loops of run-time length, which libtpu's static estimate leaves out
(bench/probe_loop_count.py), counted from the example's values and put back into the
estimate: trips from the scalar work (tpu/trips.py), a trip's cycles from the kernel
bounded in the code (tpu/loops.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.cli import run_json

ROOT = Path(__file__).resolve().parent.parent


def rpa_lengths(seed: int, seqs: int, valid: int, tokens: int, model_len: int) -> dict:
    """Mixed decode and prefill: `valid` of `seqs` sequences with 1-40 queries each and 1 to
    model_len keys, as vLLM batches them; the rest padding."""
    rng = np.random.default_rng(seed)
    q_lens = rng.integers(1, 25, valid)
    q_lens[-1] += max(0, tokens // 2 - int(q_lens.sum()))  # a long prefill last
    assert q_lens.sum() <= tokens
    cu = np.zeros(seqs + 1, np.int32)
    cu[1 : valid + 1] = np.cumsum(q_lens)
    cu[valid + 1 :] = cu[valid]
    kv_lens = np.zeros(seqs, np.int32)
    kv_lens[:valid] = rng.integers(1, model_len + 1, valid)
    return {"kv_lens": kv_lens, "cu_q_lens": cu, "num_seqs": np.array([valid], np.int32)}


def by_hand(lengths: dict, grid: tuple[int, int], q_block: int, kv_tokens: int) -> tuple[int, int]:
    """The trips of ragged paged attention's two loops as its code reads (kernel.py): per grid
    step, one sequence-loop trip for each sequence whose queries overlap the step's q block;
    in each, one kv-loop trip per kv block of that sequence's keys."""
    cu, kv_lens, valid = lengths["cu_q_lens"], lengths["kv_lens"], int(lengths["num_seqs"][0])
    outer = inner = 0
    for _heads in range(grid[0]):
        for block in range(grid[1]):
            start, end = block * q_block, (block + 1) * q_block
            for s in range(valid):
                if cu[s] < end and cu[s + 1] > start:
                    outer += 1
                    inner += -(-int(kv_lens[s]) // kv_tokens)
    return outer, inner


@pytest.mark.parametrize(
    "heads, kv_block, q_block", [((8, 1), 4, 64), ((8, 1), 1, 256), ((8, 1), 16, 8), ((8, 4), 2, 32)]
)
def test_ragged_paged_attentions_loops_are_counted_from_its_lengths(heads, kv_block, q_block):
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ragged_paged_attention

    from vmem_lsp.compile.known_values import known_operands
    from vmem_lsp.compile.tracing import pallas_equations
    from vmem_lsp.tpu.loops import run_time_loops
    from vmem_lsp.tpu.trips import count_trips

    (q_heads, kv_heads), page, tokens, model_len, seqs = heads, 16, 1024, 256, 64
    lengths = rpa_lengths(7, seqs, 50, tokens, model_len)
    pages = np.arange(seqs * (model_len // page), dtype=np.int32).reshape(seqs, -1)

    def call(q, kv):
        return ragged_paged_attention(
            q,
            kv,
            lengths["kv_lens"],
            pages,
            lengths["cu_q_lens"],
            lengths["num_seqs"],
            num_kv_pages_per_block=kv_block,
            num_queries_per_block=q_block,
        )

    closed = jax.make_jaxpr(call)(
        jax.ShapeDtypeStruct((tokens, q_heads, 128), jnp.bfloat16),
        jax.ShapeDtypeStruct((seqs * (model_len // page), page, 2 * kv_heads, 128), jnp.bfloat16),
    )
    [(eqn_id, known)] = known_operands(closed).items()
    [eqn] = [e for e in pallas_equations(closed.jaxpr) if id(e) == eqn_id]
    mapping = eqn.params["grid_mapping"]
    loops = run_time_loops(eqn.params["jaxpr"])
    assert [loop.origin.line for loop in loops] == [667, 658]  # the sequences, then each one's kv blocks
    grid = tuple(mapping.grid)
    trips = count_trips(eqn.params["jaxpr"], grid, known[: mapping.num_index_operands], [loop.path for loop in loops])
    assert (trips[loops[0].path], trips[loops[1].path]) == by_hand(lengths, grid, q_block, kv_block * page)


LOOPING = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

EIGHT = np.array([8, 0, 0, 0], np.int32)  # the loop's trips, read in the kernel from SMEM


def kernel(n_ref, x_ref, o_ref):
    """bench/probe_loop_count.py's kernel in its "fori" form: adds a product n_ref[0] times."""

    def body(carry):
        count, total = carry
        return count + 1, total + jnp.dot(x_ref[...], x_ref[...], preferred_element_type=jnp.float32)

    _, total = jax.lax.while_loop(lambda c: c[0] < n_ref[0], body, (0, jnp.zeros(o_ref.shape, jnp.float32)))
    o_ref[...] = total


# vmem: looped({trips}, bf16[512, 512], size=[256, 512])
def looped(n, x, size=512):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((size, size), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(4,),
            in_specs=[pl.BlockSpec((size, size), lambda i, n: (0, 0))],
            out_specs=pl.BlockSpec((size, size), lambda i, n: (0, 0)),
        ),
    )(n, x)
'''


def probe_cycles(*forms: str) -> dict[str, int]:
    """The compiler's estimates of bench/probe_loop_count.py's kernel in `forms`, compiled directly."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "probe_loop_count.py"), "--target", "v6e", "--forms", ",".join(forms)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split("|")[1:3] for line in done.stdout.splitlines() if line.startswith("| ") and "cycles" not in line]
    return {form.strip(): int(n) for form, n in rows}


@pytest.mark.compiler
def test_a_loop_counted_from_the_examples_values_costs_what_the_same_loop_bounded_in_the_code_does(tmp_path):
    (tmp_path / "looping.py").write_text(LOOPING.replace("{trips}", "EIGHT"))
    done, report = run_json("sweep", "looping.py", "--target", "v6e", "--rank", "speed", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [valued] = [c for c in report["configs"] if c["params"]["size"] == 512]
    line = LOOPING.splitlines().index(next(s for s in LOOPING.splitlines() if "while_loop" in s)) + 1
    assert f"looping.py:{line}: 32 trips" in valued["estimate_loops"], valued  # 8 a step, 4 steps
    assert "counted from the example's values" in valued["estimate_caveat"]
    # The roofline does not see the loop, so it screens nothing out: every config is estimated.
    done, screened = run_json(
        "sweep", "looping.py", "--target", "v6e", "--rank", "speed", "--rank-top", "1", cwd=tmp_path
    )
    assert all(c["estimated_cycles"] for c in screened["configs"]), screened["configs"]
    compiler = probe_cycles("static 8", "fori")
    assert compiler["fori"] < valued["estimated_cycles"]  # the loop is in it now...
    assert abs(valued["estimated_cycles"] / compiler["static 8"] - 1) < 0.05, (valued, compiler)  # ...as compiled
    (tmp_path / "looping.py").write_text(LOOPING.replace("{trips}", "i32[4]"))  # its shape only
    done, report = run_json("sweep", "looping.py", "--target", "v6e", "--rank", "speed", cwd=tmp_path)
    [shapes] = [c for c in report["configs"] if c["params"]["size"] == 512]
    assert shapes["estimated_cycles"] == compiler["fori"] and shapes["estimate_loops"] is None, shapes
    assert "known only at run time" in shapes["estimate_caveat"] and "given as values" in shapes["estimate_caveat"]


def test_the_api_sends_an_integer_array_by_its_values_and_any_other_by_its_shape():
    import jax
    import jax.numpy as jnp

    from vmem_lsp.api import shape_text
    from vmem_lsp.compile.tracing import given_values

    lengths = np.array([[3, 1], [4, 1]], np.int32)
    text = shape_text(lengths)
    assert text == "__vmem_values__('int32', (2, 2), [3, 1, 4, 1])"
    assert (given_values("int32", (2, 2), [3, 1, 4, 1]) == lengths).all()
    assert shape_text(np.zeros((8, 128), np.float32)) == "f32[8, 128]"  # data: its shape is what counts
    assert shape_text(jax.ShapeDtypeStruct((4,), jnp.int32)) == "s32[4]"


@pytest.mark.compiler
def test_rank_counts_ragged_paged_attentions_loops_from_the_lengths_it_is_given():
    """As a tuner calls rank(): the lengths as NumPy arrays. Each config's estimate carries its
    loops' trips (as counted by hand) and a kv block of the whole sequence ranks before one
    page at a time, where the compiler's estimate alone ranked them the other way round."""
    import jax
    import jax.numpy as jnp

    import vmem_lsp

    sys.path.insert(0, str(ROOT / "bench"))
    from bench_rank_tuned import rpa  # the worker imports the bench's file for it

    seqs, page, tokens, model_len = 64, 16, 1024, 256
    lengths = rpa_lengths(3, seqs, 40, tokens, model_len)
    pages = np.arange(seqs * (model_len // page), dtype=np.int32).reshape(seqs, -1)
    q = jax.ShapeDtypeStruct((tokens, 8, 128), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((seqs * (model_len // page), page, 2, 128), jnp.bfloat16)
    configs = [{"num_kv_pages_per_block": kv_block, "num_queries_per_block": 64} for kv_block in (1, 16)]
    ranked = vmem_lsp.rank(
        rpa,
        (q, kv, lengths["kv_lens"], pages, lengths["cu_q_lens"], lengths["num_seqs"]),
        configs,
        target="v6e",
        top=None,
    )
    by_block = {r.config["num_kv_pages_per_block"]: r for r in ranked}
    for kv_block, found in by_block.items():
        outer, inner = by_hand(lengths, (1, tokens // 64), 64, kv_block * page)
        assert found.loops and f"kernel.py:667: {outer:,} trips" in found.loops, found
        assert f"kernel.py:658: {inner:,} trips" in found.loops, found
    assert by_block[16].rank == 1 and by_block[1].rank == 2, by_block
