"""Where the router's compiler scratch differs between TPU generations (issue 42, done-when 2).

    python bench/probe_router_spills.py [--targets v5e,v6e]

The body account of a router's top-k is within 25% of the compiler's internal scratch on v6e and
about half of it on v5e (bench/RESULTS.md). This compiles one router body in pieces, deviceless,
with a scoped limit just above its windows (8.25M), so the report's "Scoped allocation with size
S" is windows + the compiler's own scratch + what the body spills:

- loop: the iterated max / lowest-index argmin over f32[2048,128] that picks k experts;
- value: plus each pick's value read back by a masked sum;
- picked: plus each pick written into [rows, k] slot arrays by where(slot == j, ...);
- full: both (bench/model_corpus.top_slots, as the corpus's routers are written);
- stored: as full, each pick written to the output refs as it is made (weights_ref[:, j:j+1]).

Prints, per chip and piece, the compiler's size and what is beyond the windows and the chip's own
internal scratch (the reported limit less the requested one): the spill the account is held to.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental import topologies
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import SingleDeviceSharding

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vmem_lsp.tpu.chips import chip
from vmem_lsp.tpu.parse import parse_report
from vmem_lsp.tpu.report import Report

TOTAL, EXPERTS, TOKENS, HIDDEN, K = 4096, 128, 2048, 512, 8
NEG = -1e30
MiB = 1 << 20
WINDOWS = 8 * MiB + MiB // 4  # (a chip that single-buffers the constant w: 0.13M less)
# x bf16[2048,512] and w bf16[512,128], two buffers each; two [2048,8] outputs padded to 128 lanes
LIMIT = 9 * MiB
PIECES = ("loop", "value", "picked", "stored", "full")


def router_body(x_ref, w_ref, weights_ref, ids_ref, *, piece: str, k: int):
    candidates = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)
    scores = candidates
    rows, experts = candidates.shape
    expert = jax.lax.broadcasted_iota(jnp.int32, (rows, experts), 1)
    slot = jax.lax.broadcasted_iota(jnp.int32, (rows, K), 1)
    picked = jnp.zeros((rows, K), jnp.float32)
    ids = jnp.zeros((rows, K), jnp.int32)
    total = jnp.zeros((rows, 1), jnp.float32)
    for j in range(k):
        best = jnp.max(candidates, axis=-1, keepdims=True)
        best_at = jnp.min(jnp.where(candidates == best, expert, experts), axis=-1, keepdims=True)
        value = best
        if piece in ("value", "full"):
            value = jnp.sum(jnp.where(expert == best_at, scores, 0.0), axis=-1, keepdims=True)
        if piece in ("picked", "full"):
            picked = jnp.where(slot == j, value, picked)
            ids = jnp.where(slot == j, best_at, ids)
        elif piece == "stored":
            weights_ref[:, j : j + 1] = jnp.sum(jnp.where(expert == best_at, scores, 0.0), axis=-1, keepdims=True)
            ids_ref[:, j : j + 1] = best_at
        else:
            total = total + value + best_at.astype(jnp.float32)
        candidates = jnp.where(expert == best_at, NEG, candidates)
    if piece == "stored":
        return
    if piece not in ("picked", "full"):
        picked = jnp.broadcast_to(total + jnp.max(candidates, axis=-1, keepdims=True), (rows, K))
    weights_ref[...] = picked
    ids_ref[...] = ids


def compiled_report(target: str, piece: str, k: int) -> Report | None:
    """The compiler's report on the piece, or None when it fits."""
    device = topologies.get_topology_desc(platform="tpu", topology_name=chip(target).topology).devices[0]
    sharding = SingleDeviceSharding(device)

    def run(x, w):
        out = jax.ShapeDtypeStruct((TOTAL, K), jnp.float32), jax.ShapeDtypeStruct((TOTAL, K), jnp.int32)
        rows = pl.BlockSpec((TOKENS, K), lambda i: (i, 0))
        return pl.pallas_call(
            functools.partial(router_body, piece=piece, k=k),
            out_shape=out,
            grid=(TOTAL // TOKENS,),
            in_specs=[
                pl.BlockSpec((TOKENS, HIDDEN), lambda i: (i, 0)),
                pl.BlockSpec((HIDDEN, EXPERTS), lambda i: (0, 0)),
            ],
            out_specs=(rows, rows),
            compiler_params=pltpu.CompilerParams(vmem_limit_bytes=LIMIT),
        )(x, w)

    args = (
        jax.ShapeDtypeStruct((TOTAL, HIDDEN), jnp.bfloat16, sharding=sharding),
        jax.ShapeDtypeStruct((HIDDEN, EXPERTS), jnp.bfloat16, sharding=sharding),
    )
    try:
        with jax.default_device(device):
            jax.jit(run).lower(*args).compile()
        return None
    except Exception as error:  # the compiler's report is the measurement
        return parse_report(str(error))


def spilled(report: Report) -> int | None:
    """The spill slots a physical report lists, else a scoped report's size less the windows and
    the chip's own internal scratch (what its printed limit adds to the one asked for)."""
    listed = [a.size for a in report.allocations if a.kind == "spill"]
    if listed:
        return sum(listed)
    if report.form == "scoped" and report.used is not None and report.limit is not None:
        return report.used - (report.limit - LIMIT) - WINDOWS
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="v5e,v6e")
    parser.add_argument("--k", default="1,2,4,8", help="picks, for the full piece")
    args = parser.parse_args(argv)
    print("| chip | piece | k | compiler report | spill |")
    print("|---|---|---|---|---|")
    for target in args.targets.split(","):
        runs = [(piece, K) for piece in PIECES[:-1]] + [("full", int(k)) for k in args.k.split(",")]
        for piece, k in runs:
            report = compiled_report(target, piece, k)
            if report is None:
                print(f"| {target} | {piece} | {k} | fits in 9.00M | under 0.75M |", flush=True)
                continue
            spill = spilled(report)
            said = f"{spill / MiB:.2f}M" if spill is not None else f"unread ({report.form} report)"
            print(f"| {target} | {piece} | {k} | {report.form}: {report.used_text} | {said} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
