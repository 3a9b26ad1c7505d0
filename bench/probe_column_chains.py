"""Which unrolled loops a chip's compiler keeps step by step (issue 42, the router's account on v5e).

    python bench/probe_column_chains.py [--targets v5e,v6e] [--steps 2,4,8]

Compiles one kernel over an f32[2048,256] block per piece, deviceless, under a scoped limit just
above its windows (6.25M; windows 6.00M), and prints what the compiler needs beyond them (its
size less the windows and the chip's own internal scratch) beside the body account of the chip
(tpu/body: "kept" on layout.KEEPS_COLUMNS_CHIPS, else "held"):

- groups: per-group maxima collected into an f32[2048,128] slot array by where(lane == g, ...),
  a chain of selects each read by the next only (tpu/body._column_chains);
- sums: the same maxima kept in a list and concatenated (no chain: the plain account holds them);
- consumed: a top-k's candidates masked with a constant each step (read by the next max, not a
  chain) and the picks summed, `total = total + best` (a chain of adds).
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

from vmem_lsp.compile.tracing import pallas_equations
from vmem_lsp.results import CapturedCall
from vmem_lsp.tpu import layout
from vmem_lsp.tpu.body import kept_values, large_values
from vmem_lsp.tpu.chips import chip
from vmem_lsp.tpu.parse import parse_report

ROWS, COLS, NEG = 2048, 256, -1e30
MiB = 1 << 20
WINDOWS = 6 * MiB  # f32[2048,256] in and f32[2048,128] out, two buffers each
LIMIT = WINDOWS + MiB // 4
PIECES = ("groups", "sums", "consumed")


def body(x_ref, o_ref, *, piece: str, steps: int):
    x = x_ref[...]
    lane = jax.lax.broadcasted_iota(jnp.int32, (ROWS, 128), 1)
    if piece == "groups":
        column = jax.lax.broadcasted_iota(jnp.int32, x.shape, 1)
        slots = jnp.full((ROWS, 128), NEG, jnp.float32)
        for g in range(steps):
            best = jnp.max(jnp.where(column // (COLS // steps) == g, x, NEG), axis=-1, keepdims=True)
            slots = jnp.where(lane == g, best, slots)
        o_ref[...] = slots
    elif piece == "sums":
        maxima = [jnp.max(x * (g + 1.0), axis=-1, keepdims=True) for g in range(steps)]
        o_ref[...] = jnp.concatenate([*maxima, jnp.zeros((ROWS, 128 - steps), jnp.float32)], axis=-1)
    else:
        total = jnp.zeros((ROWS, 1), jnp.float32)
        for _ in range(steps):
            best = jnp.max(x, axis=-1, keepdims=True)
            total = total + best
            x = jnp.where(x == best, NEG, x)
        o_ref[...] = jnp.broadcast_to(total, (ROWS, 128))


def call(piece: str, steps: int, limit: int | None):
    params = pltpu.CompilerParams(vmem_limit_bytes=limit) if limit else None
    return lambda x: pl.pallas_call(
        functools.partial(body, piece=piece, steps=steps),
        out_shape=jax.ShapeDtypeStruct((2 * ROWS, 128), jnp.float32),
        grid=(2,),
        in_specs=[pl.BlockSpec((ROWS, COLS), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((ROWS, 128), lambda i: (i, 0)),
        compiler_params=params,
    )(x)


def beyond_windows(target: str, piece: str, steps: int) -> str:
    device = topologies.get_topology_desc(platform="tpu", topology_name=chip(target).topology).devices[0]
    x = jax.ShapeDtypeStruct((2 * ROWS, COLS), jnp.float32, sharding=SingleDeviceSharding(device))
    try:
        with jax.default_device(device):
            jax.jit(call(piece, steps, LIMIT)).lower(x).compile()
        return f"under {(LIMIT - WINDOWS) / MiB:.2f}M"
    except Exception as error:  # the compiler's report is the measurement
        report = parse_report(str(error))
        if report.used is None or report.limit is None:
            return f"unread ({report.form} report)"
        return f"{(report.used - (report.limit - LIMIT) - WINDOWS) / MiB:.2f}M"


def account(target: str, piece: str, steps: int) -> float:
    x = jax.ShapeDtypeStruct((2 * ROWS, COLS), jnp.float32)
    [eqn] = pallas_equations(jax.make_jaxpr(call(piece, steps, None))(x).jaxpr)
    unseen = (*large_values(eqn.params["jaxpr"]), *kept_values(eqn.params["jaxpr"]))
    probe = CapturedCall("probe", None, None, (2,), 0, (), (), None, False, None, 0.0, unseen=unseen)
    kind = layout.account_kind(probe, target)
    return sum(u.bytes for u in unseen if u.kind == kind) / MiB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="v5e,v6e")
    parser.add_argument("--steps", default="2,4,8")
    args = parser.parse_args(argv)
    print("| chip | piece | steps | compiler beyond windows | body account |")
    print("|---|---|---|---|---|")
    for target in args.targets.split(","):
        for piece in PIECES:
            for steps in (int(s) for s in args.steps.split(",")):
                compiled = beyond_windows(target, piece, steps)
                print(
                    f"| {target} | {piece} | {steps} | {compiled} | {account(target, piece, steps):.2f}M |", flush=True
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
