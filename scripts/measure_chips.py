"""Measure each chip's VMEM capacity and default scoped limit as the installed libtpu
prints them: the figures vmem_lsp/versions.py keys by libtpu version.

Usage: <a jax env's python> scripts/measure_chips.py [--json]

Runs in any environment with jax[tpu] (nothing of vmem-lsp installed: its report parser
is loaded from this checkout). Per chip, deviceless (no TPU needed):
- capacity: a single-step kernel of many windows, each smaller than any chip's VMEM and
  together larger than the largest, with vmem_limit_bytes above them, so the compiler
  reports the physical form "Used X of Y vmem" (Y: what it can use, not the memory's
  size, which a single window too large for the memory would print instead);
- scoped limit: single-step copies of growing size, without vmem_limit_bytes, until
  the compiler says E1001 "Scoped allocation ... and limit L"; a chip that reports the
  physical form first (v4) has no scoped limit below its capacity.
"""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import version
from pathlib import Path

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # another libtpu process may hold the lockfile
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # vmem_lsp.report, pure Python

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental import topologies
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import SingleDeviceSharding

from vmem_lsp.tpu.parse import parse_report

TOPOLOGIES = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2", "v7x": "tpu7x:2x2x1"}
MiB = 2**20
ROW = 1024 * 4  # bytes of one f32 row of 1024
WINDOW = 12 * MiB  # each window of the capacity probe: under v4's 16M
WINDOWS = 12  # 144M in all: over v5e's and v6e's 128M
SCOPED_STEPS = (20 * MiB, 40 * MiB, 56 * MiB, 62 * MiB)  # two windows in all: above 16M, 32M, 48M; under 64M


def compiler_params(limit: int | None) -> dict:
    if not limit:
        return {}
    params = getattr(pltpu, "CompilerParams", None) or pltpu.TPUCompilerParams  # the older name
    return {"compiler_params": params(vmem_limit_bytes=limit)}


def copy(rows: int, inputs: int, limit: int | None):
    """One grid step: `inputs` whole f32[rows, 1024] windows in, their sum out (each window
    read, so none is dropped)."""

    def kernel(*refs):
        *ins, o_ref = refs
        total = ins[0][...]
        for ref in ins[1:]:
            total += ref[...]
        o_ref[...] = total

    def f(*xs):
        spec = pl.BlockSpec(xs[0].shape, lambda: (0, 0))
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(xs[0].shape, xs[0].dtype),
            in_specs=[spec] * len(xs),
            out_specs=spec,
            **compiler_params(limit),
        )(*xs)

    return f, [jax.ShapeDtypeStruct((rows, 1024), jnp.float32)] * inputs


def compile_text(target: str, window: int, windows: int, limit: int | None) -> str:
    """The compiler's error text for `windows` windows of `window` bytes, or "" when it fits."""
    try:
        device = topologies.get_topology_desc(platform="tpu", topology_name=TOPOLOGIES[target]).devices[0]
    except Exception as error:  # an old libtpu that does not know the chip
        return f"unknown chip: {type(error).__name__}: {error}"
    f, args = copy(window // ROW, windows - 1, limit)
    sharding = SingleDeviceSharding(device)
    try:
        jax.jit(f, out_shardings=sharding, in_shardings=(sharding,) * len(args)).lower(*args).compile()
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return ""


def measure(target: str) -> dict:
    found: dict = {"chip": target}
    text = compile_text(target, WINDOW, WINDOWS, 4 * WINDOW * WINDOWS)
    report = parse_report(text)
    if text.startswith("unknown chip"):
        return found | {"error": text.splitlines()[0]}
    if report.limit_kind == "physical" and report.limit:
        found |= {"capacity": report.limit, "capacity_text": report.limit_text or f"{report.limit}B"}
    else:
        found["capacity_error"] = text.splitlines()[0][:200] if text else "compiled"
    for total in SCOPED_STEPS:
        text = compile_text(target, total // 2, 2, None)
        report = parse_report(text)
        if report.form == "scoped" and report.limit:
            found |= {"scoped_limit": report.limit, "scoped_text": report.limit_text}
            break
        if report.limit_kind == "physical":  # over the capacity before any scoped limit
            found |= {"scoped_limit": found.get("capacity"), "scoped_text": "(none below the capacity)"}
            break
    else:
        found["scoped_error"] = text.splitlines()[0][:200] if text else "compiled"
    return found


def main(argv: list[str]) -> int:
    versions = {name: version(name) for name in ("jax", "jaxlib", "libtpu")}
    rows = [measure(target) for target in TOPOLOGIES]
    if "--json" in argv:
        print(json.dumps({"versions": versions, "chips": rows}, indent=1))
        return 0
    print(f"jax {versions['jax']}, libtpu {versions['libtpu']}")
    for row in rows:
        if "error" in row:
            print(f"  {row['chip']:<4} {row['error']}")
            continue
        capacity = row.get("capacity_text") or row.get("capacity_error")
        print(
            f"  {row['chip']:<4} capacity {capacity} ({row.get('capacity')} B), "
            f"scoped {row.get('scoped_text') or row.get('scoped_error')} ({row.get('scoped_limit')} B)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
