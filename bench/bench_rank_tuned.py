"""Issue 32 part 5: the compiler's speed ranking against block sizes tuned on real TPUs.

    .venv/bin/python bench/bench_rank_tuned.py [--kernels rpa,matmul,flash,qmm] [--chips v6e,v5e]
                                               [--rpa-entries N] [--rpa-shapes] [--flash-shapes 0,2]
                                               [--out bench/rank_tuned.jsonl]
    .venv/bin/python bench/bench_rank_tuned.py --cut-check --chips v6e   # flash: cut grids vs whole
    .venv/bin/python bench/bench_rank_tuned.py --summary bench/rank_tuned.jsonl

For each case (a kernel, its shapes, a chip) the candidates are ranked with
`vmem_lsp.rank(..., top=None)` (every config that fits gets the compiler's static cycle
estimate) and we record where the tuned choice lands by the estimate and by the roofline
alone, how often a roofline screen of 3 or 5 would have dropped the compiler's best, and the
estimate count and wall time. One JSON line per case goes to --out; a table is printed.

Tuned choices:
  * rpa: jax's ragged paged attention, TUNED_BLOCK_SIZES in
    jax/experimental/pallas/ops/tpu/ragged_paged_attention/tuned_block_sizes.py
    ('TPU v6' -> v6e; 'TPU v5' -> v5e: the table's key is the first two words of device_kind,
    which 'TPU v5 lite' and 'TPU v5' (v5p) share, so v5e is an assumption). Its lengths are given
    as values (rpa_lengths: 64 sequences sharing the tokens, each of the model's whole length),
    so the estimate counts its loops; --rpa-shapes gives shapes only, as before.
  * qmm: tpu-inference's quantized matmul (int8 weights and activations, bf16 x), its v6e entries of
    TUNED_BLOCK_SIZES_RAW in kernels/quantized_matmul/tuned_block_sizes.py (tpu-inference 0.32.0
    from PyPI: its files only, laid out by tests/support/tpu_inference_kernels.py, since its
    package imports vllm); libtpu 0.0.42.1 aborts every compile of it under the profile on v6e
    (an LLO_CHECK) after writing the estimate, which is what gets ranked.
  * matmul: the Pallas TPU matmul guide (docs.jax.dev pallas/tpu/matmul) measures
    bm=512, bk=1024, bn=1024 on v5e for bf16 1024/4096/8192 cubes (against 128-blocks only);
    the kernel is the guide's, as bundled in examples/matmul.py.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.flash_attention import BlockSizes, flash_attention
from jax.experimental.pallas.ops.tpu.ragged_paged_attention.kernel import ragged_paged_attention
from jax.experimental.pallas.ops.tpu.ragged_paged_attention.tuned_block_sizes import TUNED_BLOCK_SIZES

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
from matmul import matmul  # noqa: E402

import vmem_lsp  # noqa: E402

DEVICE = {"v6e": "TPU v6", "v5e": "TPU v5", "v7x": "TPU v7"}


def libtpu_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for name in ("libtpu", "libtpu-nightly"):
        try:
            return version(name)
        except PackageNotFoundError:
            pass
    return None


LIBTPU = libtpu_version()
MAX_NUM_SEQS = 64  # the table's key has no batch of sequences; vLLM-like, and SMEM-safe
KV_BLOCKS = (1, 2, 4, 8, 16, 32)
Q_BLOCKS = (8, 16, 32, 64, 128, 256)


def rpa(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *, num_kv_pages_per_block, num_queries_per_block):
    """jax's ragged paged attention with its two block sizes as keyword arguments."""
    return ragged_paged_attention(
        q,
        kv_pages,
        kv_lens,
        page_indices,
        cu_q_lens,
        num_seqs,
        num_kv_pages_per_block=num_kv_pages_per_block,
        num_queries_per_block=num_queries_per_block,
    )


# Spread over the table's keys: heads (q per kv), page size, tokens, model length.
RPA_KEYS = (
    ("bfloat16", "bfloat16", 8, 1, 128, 16, 1024, 256),
    ("bfloat16", "bfloat16", 8, 4, 128, 16, 512, 128),
    ("bfloat16", "bfloat16", 12, 2, 128, 128, 1024, 1024),
    ("bfloat16", "bfloat16", 4, 2, 128, 32, 2048, 256),
    ("bfloat16", "bfloat16", 4, 2, 128, 64, 1024, 1024),
    ("bfloat16", "bfloat16", 8, 2, 128, 128, 4096, 2048),
    ("bfloat16", "bfloat16", 6, 1, 128, 32, 512, 512),
)
# Left out: its estimates ran over 6 minutes (one worker at 6.5 GB) before the first answer of
# 30 candidates came back; 28 q heads in one block, 256-token pages, 16-page kv buffers.
SLOW_RPA_KEYS = (("bfloat16", "bfloat16", 28, 4, 128, 256, 2048, 4096),)


VALUES = True  # --rpa-shapes: the lengths as shapes only, as before the loops were counted


def rpa_lengths(tokens: int, model_len: int, pages_per_seq: int) -> tuple:
    """The batch the table's key describes at its fullest: MAX_NUM_SEQS sequences sharing the
    token budget evenly, each with the model's whole length of keys, pages in order."""
    import numpy as np

    q_lens = np.full(MAX_NUM_SEQS, tokens // MAX_NUM_SEQS)
    cu_q_lens = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    kv_lens = np.full(MAX_NUM_SEQS, model_len, np.int32)
    pages = np.arange(MAX_NUM_SEQS * pages_per_seq, dtype=np.int32).reshape(MAX_NUM_SEQS, pages_per_seq)
    return kv_lens, pages, cu_q_lens, np.array([MAX_NUM_SEQS], np.int32)


def rpa_case(key: tuple, device: str) -> dict | None:
    table = TUNED_BLOCK_SIZES.get(device, {})
    if key not in table:
        return None
    _, _, q_heads, kv_heads, head_dim, page_size, tokens, model_len = key
    pages_per_seq = model_len // page_size
    dt = jnp.bfloat16
    i32 = jnp.int32
    q_args = (
        jax.ShapeDtypeStruct((tokens, q_heads, head_dim), dt),
        jax.ShapeDtypeStruct((MAX_NUM_SEQS * pages_per_seq, page_size, 2 * kv_heads, head_dim), dt),
    )
    if VALUES:  # the lengths as values (rpa_lengths): the estimate counts the kernel's loops by them
        args = (*q_args, *rpa_lengths(tokens, model_len, pages_per_seq))
    else:
        args = (
            *q_args,
            jax.ShapeDtypeStruct((MAX_NUM_SEQS,), i32),
            jax.ShapeDtypeStruct((MAX_NUM_SEQS, pages_per_seq), i32),
            jax.ShapeDtypeStruct((MAX_NUM_SEQS + 1,), i32),
            jax.ShapeDtypeStruct((1,), i32),
        )
    bkv, bq = table[key]
    tuned = {"num_kv_pages_per_block": min(bkv, pages_per_seq), "num_queries_per_block": min(bq, tokens)}
    configs = [
        {"num_kv_pages_per_block": kv, "num_queries_per_block": q}
        for kv in KV_BLOCKS
        if kv <= pages_per_seq
        for q in Q_BLOCKS
        if q <= tokens
    ]
    if tuned not in configs:
        configs.append(tuned)
    name = f"h{q_heads}/{kv_heads} page{page_size} tok{tokens} len{model_len}"
    kernel = "rpa, lengths given" if VALUES else "rpa"  # a row of its own in the summary
    return {"kernel": kernel, "case": name, "fn": rpa, "args": args, "configs": configs, "tuned": tuned}


# tpu-inference's kernel files, laid out once where its qmm wrapper (run in vmem-lsp's worker too) finds them.
TPU_INFERENCE = Path.home() / ".cache" / "vmem-lsp-ci" / "tpu-inference-0.32.0"


def qmm(x, w_q, w_scale, *, batch_block_size, out_block_size, in_block_size):
    """tpu-inference's quantized matmul, int8 activations and weights, its block sizes as keywords."""
    if str(TPU_INFERENCE) not in sys.path:
        sys.path.insert(0, str(TPU_INFERENCE))
    from tpu_inference.kernels.quantized_matmul.kernel import quantized_matmul_kernel
    from tpu_inference.kernels.quantized_matmul.tuned_block_sizes import TunedValue

    blocks = TunedValue(batch_block_size, out_block_size, in_block_size)
    return quantized_matmul_kernel(x, w_q, w_scale, x_q_dtype=jnp.int8, tuned_value=blocks)


# (n_batch, n_out, n_in) of the table's v6e int8/int8 entries: two batches, square and long k.
QMM_KEYS = ((1024, 1024, 4096), (1024, 4096, 4096), (128, 4096, 4096), (128, 1024, 8192))


def qmm_case(key: tuple[int, int, int]) -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    from support.tpu_inference_kernels import quantized_matmul

    quantized_matmul(TPU_INFERENCE)
    sys.path.insert(0, str(TPU_INFERENCE))
    from tpu_inference.kernels.quantized_matmul.tuned_block_sizes import TUNED_BLOCK_SIZES_RAW

    n_batch, n_out, n_in = key
    bb, ob, ib = TUNED_BLOCK_SIZES_RAW[(6, n_batch, n_out, n_in, "int8", "int8")]
    tuned = {"batch_block_size": bb, "out_block_size": ob, "in_block_size": ib}
    configs = [
        {"batch_block_size": b, "out_block_size": o, "in_block_size": i}
        for b in (128, 256, 512, 1024)
        if b <= n_batch
        for o in (256, 512, 1024)
        if o <= n_out
        for i in (n_in // 2, n_in)
    ]
    if tuned not in configs:
        configs.append(tuned)
    args = (
        jax.ShapeDtypeStruct((n_batch, n_in), jnp.bfloat16),
        jax.ShapeDtypeStruct((n_out, n_in), jnp.int8),
        jax.ShapeDtypeStruct((n_out,), jnp.float32),
    )
    name = f"b{n_batch} out{n_out} in{n_in} int8"
    return {"kernel": "qmm", "case": name, "fn": qmm, "args": args, "configs": configs, "tuned": tuned}


MATMUL_SHAPES = (4096, 8192)
MATMUL_TUNED = {"bm": 512, "bk": 1024, "bn": 1024}


def matmul_case(size: int) -> dict:
    x = jax.ShapeDtypeStruct((size, size), jnp.bfloat16)
    configs = [
        {"bm": bm, "bk": bk, "bn": bn}
        for bm, bk, bn in itertools.product((256, 512, 1024), (512, 1024, 2048), (512, 1024))
        if max(bm, bk, bn) <= size  # a block over the array leaves a grid of 0 steps
    ]
    return {
        "kernel": "matmul",
        "case": f"bf16[{size}]^3",
        "fn": matmul,
        "args": (x, x),
        "configs": configs,
        "tuned": dict(MATMUL_TUNED),
    }


def flash(q, k, v, *, block_q, block_k_major, block_k, block_b=1):
    """jax's flash attention forward, non-causal, its forward block sizes as keywords."""
    sizes = BlockSizes(block_q=block_q, block_k_major=block_k_major, block_k=block_k, block_b=block_b)
    return flash_attention(q, k, v, block_sizes=sizes)


def flash_causal(q, k, v, *, block_q, block_k_major, block_k, block_b=1):
    """The same, causal (the kernel skips the kv blocks above the diagonal with pl.when)."""
    sizes = BlockSizes(block_q=block_q, block_k_major=block_k_major, block_k=block_k, block_b=block_b)
    return flash_attention(q, k, v, causal=True, block_sizes=sizes)


# (batch, heads, seq, head_dim, causal), bf16 q, k, v of [batch, heads, seq, head_dim].
FLASH_SHAPES = (
    (1, 32, 2048, 128, False),  # a 7B-like prefill
    (8, 16, 1024, 64, False),  # head_dim 64, batch 8
    (2, 8, 8192, 128, False),  # long sequence
    (1, 32, 4096, 128, True),  # causal
)
FLASH_Q = (128, 256, 512, 1024)
FLASH_KV = ((128, 128), (512, 128), (512, 512), (1024, 512), (1024, 1024))  # (block_k_major, block_k)


def flash_case(shape: tuple) -> dict:
    batch, heads, seq, head_dim, causal = shape
    x = jax.ShapeDtypeStruct((batch, heads, seq, head_dim), jnp.bfloat16)
    configs = [
        {"block_q": bq, "block_k_major": bkm, "block_k": bk, "block_b": 1}
        for bq in FLASH_Q
        if bq <= seq
        for bkm, bk in FLASH_KV
        if bkm <= seq
    ]
    m = min(512, seq)
    maxtext = {"block_q": m, "block_k_major": m, "block_k": m, "block_b": min(2, batch)}
    default = {"block_q": 128, "block_k_major": 128, "block_k": 128, "block_b": 1}
    for c in (maxtext, default):
        if c not in configs:
            configs.append(c)
    name = f"b{batch} h{heads} s{seq} d{head_dim}{' causal' if causal else ''}"
    return {
        "kernel": "flash",
        "case": name,
        "fn": flash_causal if causal else flash,
        "args": (x, x, x),
        "configs": configs,
        "tuned": maxtext,
        "default": default,
    }


# The cut-grid check: a grid over 64 steps is estimated on two grids of its axes cut and
# extrapolated along the steps (tpu/profile.py, compile/cut_grids.py). Heads are independent and alike, so
# H x the estimate at 1 head (a grid of at most 64 steps: estimated whole) is what the
# H-head estimate should be, give or take the pipeline's first and last copies.
CUT_CHECK = (
    # (batch, heads, seq, head_dim, causal), configs as (block_q, block_k_major, block_k)
    ((1, 32, 4096, 128, True), ((512, 512, 512), (512, 1024, 1024), (1024, 1024, 1024), (256, 1024, 1024))),
    ((1, 32, 1024, 128, False), ((128, 128, 128), (512, 512, 512), (1024, 1024, 1024))),
)


def cut_check(chip: str) -> list[dict]:
    out = []
    for (batch, heads, seq, head_dim, causal), blocks in CUT_CHECK:
        configs = [{"block_q": q, "block_k_major": km, "block_k": k, "block_b": 1} for q, km, k in blocks]
        fn = flash_causal if causal else flash
        cycles = {}
        for h in (1, heads):
            x = jax.ShapeDtypeStruct((batch, h, seq, head_dim), jnp.bfloat16)
            start = time.perf_counter()
            ranked = vmem_lsp.rank(fn, (x, x, x), configs, target=chip, top=None)
            print(f"  {h} heads: {time.perf_counter() - start:.1f} s", flush=True)
            for r in ranked:
                cycles[(h, json.dumps(r.config, sort_keys=True))] = r.estimated_cycles
        for c in configs:
            key = json.dumps(c, sort_keys=True)
            one, many = cycles.get((1, key)), cycles.get((heads, key))
            steps = heads * -(-seq // c["block_q"]) * (seq // c["block_k_major"])
            row = {
                "check": "cut",
                "chip": chip,
                "case": f"b{batch} h{heads} s{seq} d{head_dim}{' causal' if causal else ''}",
                "config": c,
                "grid_steps": steps,
                "one_head": one,
                "heads_x_one": heads * one if one else None,
                "cut_estimate": many,
                "cut_over_whole": round(many / (heads * one), 4) if one and many else None,
                "jax": jax.__version__,
                "libtpu": LIBTPU,
            }
            out.append(row)
            print(
                f"{chip} {row['case']} {c['block_q']}/{c['block_k_major']}/{c['block_k']}: "
                f"{steps} steps, cut {many}, {heads} x whole-grid 1 head {row['heads_x_one']}, "
                f"ratio {row['cut_over_whole']}",
                flush=True,
            )
    return out


def place(order: list[dict], key, tuned: dict) -> int | None:
    """1 + how many are strictly better than the tuned config by `key` (ties share a place)."""
    mine = next((r for r in order if r["config"] == tuned), None)
    if mine is None or key(mine) is None:
        return None
    return 1 + sum(1 for r in order if key(r) is not None and key(r) < key(mine))


def measure(case: dict, chip: str) -> dict:
    start = time.perf_counter()
    ranked = vmem_lsp.rank(case["fn"], case["args"], case["configs"], target=chip, top=None)
    wall = time.perf_counter() - start
    index = {json.dumps(c, sort_keys=True): i for i, c in enumerate(case["configs"])}
    rows = [
        {
            "config": r.config,
            "cycles": r.estimated_cycles,
            "roofline": r.roofline_seconds,
            "no_estimate": r.no_estimate,
            "caveat": getattr(r, "caveat", None),
            "loops": getattr(r, "loops", None),
            "given": index.get(json.dumps(r.config, sort_keys=True), -1),
        }
        for r in ranked
    ]
    estimated = [r for r in rows if r["cycles"] is not None]
    out = {
        "kernel": case["kernel"],
        "case": case["case"],
        "chip": chip,
        "tuned": case["tuned"],
        "candidates": len(case["configs"]),
        "fitting": len(rows),
        "estimated": len(estimated),
        "wall_s": round(wall, 1),
        "tuned_fits": any(r["config"] == case["tuned"] for r in rows),
        "no_estimate_reasons": sorted({r["no_estimate"] for r in rows if r["no_estimate"]}),
        "distinct_cycles": len({r["cycles"] for r in estimated}),
        "rows": rows,
    }
    out["tuned_estimate_place"] = place(rows, lambda r: r["cycles"], case["tuned"])
    out["tuned_roofline_place"] = place(rows, lambda r: r["roofline"], case["tuned"])
    out["caveats"] = sorted({r["caveat"] for r in rows if r["caveat"]})
    if case.get("default"):
        out["default"] = case["default"]
        out["default_estimate_place"] = place(rows, lambda r: r["cycles"], case["default"])
        out["default_roofline_place"] = place(rows, lambda r: r["roofline"], case["default"])
    if estimated:
        best = min(estimated, key=lambda r: (r["cycles"], r["given"]))
        tuned_row = next((r for r in rows if r["config"] == case["tuned"]), None)
        out["best"] = best["config"]
        out["best_cycles"] = best["cycles"]
        if tuned_row and tuned_row["cycles"]:
            out["tuned_cycles"] = tuned_row["cycles"]
            out["tuned_over_best"] = round(tuned_row["cycles"] / best["cycles"], 4)
        default_row = next((r for r in rows if case.get("default") and r["config"] == case["default"]), None)
        if default_row and default_row["cycles"]:
            out["default_over_best"] = round(default_row["cycles"] / best["cycles"], 4)
        # The screen rank() applies with top=N: the roofline's best N (ties by given order).
        by_roof = sorted(
            rows,
            key=lambda r: (r["roofline"] if r["roofline"] is not None else float("inf"), r["given"]),
        )
        best_cycles = best["cycles"]
        for n in (3, 5):
            kept = by_roof[:n]
            # a miss: none of the screen's N reaches the compiler's best cycles
            out[f"screen{n}_miss"] = not any(r["cycles"] == best_cycles for r in kept)
            got = [r["cycles"] for r in kept if r["cycles"] is not None]
            out[f"screen{n}_best_over_best"] = round(min(got) / best_cycles, 4) if got else None
        out["screen5_estimates"] = min(5, len(estimated))
    return out


def show(results: list[dict]) -> None:
    head = (
        f"{'kernel':7} {'chip':4} {'case':38} {'fit':>4} {'est':>4} {'wall s':>7} {'s/est':>6} "
        f"{'tuned@est':>9} {'tuned@roof':>10} {'tuned/best':>10} {'distinct':>8} {'scr3':>5} {'scr5':>5}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        per = r["wall_s"] / r["estimated"] if r["estimated"] else float("nan")
        print(
            f"{r['kernel']:7} {r['chip']:4} {r['case']:38} {r['fitting']:>4} {r['estimated']:>4} "
            f"{r['wall_s']:>7.1f} {per:>6.1f} {str(r.get('tuned_estimate_place')):>9} "
            f"{str(r.get('tuned_roofline_place')):>10} {str(r.get('tuned_over_best')):>10} "
            f"{r['distinct_cycles']:>8} {'miss' if r.get('screen3_miss') else 'ok':>5} "
            f"{'miss' if r.get('screen5_miss') else 'ok':>5}"
        )
        if r.get("best") and r.get("tuned_estimate_place") != 1:
            print(f"    compiler's best {r['best']} {r['best_cycles']:,} cycles; tuned {r['tuned']}")
        if r.get("default"):
            print(
                f"    default {r['default']}: @est {r.get('default_estimate_place')}, "
                f"@roof {r.get('default_roofline_place')}, /best {r.get('default_over_best')}"
            )
        if r["no_estimate_reasons"]:
            print(f"    no estimate: {r['no_estimate_reasons']}")


def summary(results: list[dict]) -> None:
    """Per kernel and chip: tuned top-1/top-3 by estimate and by roofline, screen misses,
    estimate counts, seconds per estimate; for rpa the cycles' spread over kv blocks."""
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault((r["kernel"], r["chip"], r.get("jax", "0.10.2")), []).append(r)
    print(
        "| kernel | chip | jax | cases | tuned top-1 / top-3 (estimate) | tuned top-1 / top-3 (roofline) "
        "| screen top=3 / top=5 misses | estimates all / screened (top=5) | s per estimate |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (kernel, chip, version), rs in groups.items():
        n = len(rs)

        def count(field, k):
            return sum(1 for r in rs if r.get(field) is not None and r[field] <= k)

        est = sum(r["estimated"] for r in rs)
        wall = sum(r["wall_s"] for r in rs)
        print(
            f"| {kernel} | {chip} | {version} | {n} | {count('tuned_estimate_place', 1)} / {count('tuned_estimate_place', 3)} "
            f"| {count('tuned_roofline_place', 1)} / {count('tuned_roofline_place', 3)} "
            f"| {sum(bool(r.get('screen3_miss')) for r in rs)} / {sum(bool(r.get('screen5_miss')) for r in rs)} "
            f"| {est} / {sum(r.get('screen5_estimates', 0) for r in rs)} | {wall / est if est else float('nan'):.2f} |"
        )
    for r in results:
        if r["kernel"] != "rpa":
            continue
        by_q: dict[int, list[int]] = {}
        for row in r["rows"]:
            if row["cycles"]:
                by_q.setdefault(row["config"]["num_queries_per_block"], []).append(row["cycles"])
        if not by_q:
            print(f"rpa {r['chip']} {r['case']}: no estimate: {r['no_estimate_reasons'][:1]}")
            continue
        spread = max(max(v) / min(v) for v in by_q.values())
        qs = sorted(by_q)
        ratio = min(by_q[qs[0]]) / min(by_q[qs[-1]])
        print(
            f"rpa {r['chip']} {r['case']}: over kv blocks at one q block the cycles differ by at most "
            f"{(spread - 1) * 100:.0f}%; q block {qs[0]} vs {qs[-1]}: {ratio:.1f}x the cycles"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernels", default="rpa,matmul")
    parser.add_argument("--chips", default="v6e,v5e")
    parser.add_argument("--rpa-entries", type=int, default=len(RPA_KEYS))
    parser.add_argument("--rpa-from", type=int, default=0, help="skip the first N rpa keys")
    parser.add_argument("--matmul-sizes", default=",".join(map(str, MATMUL_SHAPES)))
    parser.add_argument("--flash-shapes", help="indices into FLASH_SHAPES, e.g. 0,1 (default: all)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "rank_tuned.jsonl"))
    parser.add_argument("--summary", help="summarise this JSONL file and stop")
    parser.add_argument(
        "--cut-check", action="store_true", help="flash: cut-grid estimates against whole grids, and stop"
    )
    parser.add_argument(
        "--rpa-shapes", action="store_true", help="rpa: the lengths as shapes only (the loops are not counted)"
    )
    opts = parser.parse_args()
    global VALUES
    VALUES = not opts.rpa_shapes
    if opts.summary:
        latest = {}  # a case measured again: its last line counts
        for line in open(opts.summary):
            r = json.loads(line)
            if "check" in r:
                continue
            latest[(r["kernel"], r["chip"], r["case"], r.get("jax", "0.10.2"))] = r
        summary(list(latest.values()))
        return
    chips = opts.chips.split(",")
    if opts.cut_check:
        with open(opts.out, "a") as sink:
            for chip in chips:
                for row in cut_check(chip):
                    sink.write(json.dumps(row) + "\n")
        return
    results = []
    with open(opts.out, "a") as sink:
        for chip in chips:
            cases = []
            if "rpa" in opts.kernels:
                cases += [c for k in RPA_KEYS[opts.rpa_from : opts.rpa_entries] if (c := rpa_case(k, DEVICE[chip]))]
            if "qmm" in opts.kernels:
                cases += [qmm_case(k) for k in QMM_KEYS]
            if "matmul" in opts.kernels.split(","):
                cases += [matmul_case(int(s)) for s in opts.matmul_sizes.split(",")]
            if "flash" in opts.kernels:
                picked = (
                    [int(i) for i in opts.flash_shapes.split(",")] if opts.flash_shapes else range(len(FLASH_SHAPES))
                )
                cases += [flash_case(FLASH_SHAPES[i]) for i in picked]
            for case in cases:
                r = measure(case, chip)
                r["jax"] = jax.__version__
                r["libtpu"] = LIBTPU
                sink.write(json.dumps(r) + "\n")
                sink.flush()
                results.append(r)
                show([r])
    print()
    show(results)


if __name__ == "__main__":
    main()
