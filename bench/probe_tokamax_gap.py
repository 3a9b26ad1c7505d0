"""What tokamax's TPU ragged_dot holds in VMEM beyond the layout model's windows, per chip.

    PYTHONPATH=. JAX_PLATFORMS=cpu ALLOW_MULTIPLE_LIBTPU_LOAD=1 /work/tkenv/bin/python \\
        bench/probe_tokamax_gap.py [--targets v5e,v6e] [--configs 512x4096x256x2,1024x1024x512x4] \\
        [--grid] [--json]

Needs tokamax (0.0.12, jax 0.12, Python 3.12) and this checkout importable. For tokamax's
PallasMosaicTpuRaggedDot (gmm in an emit_pipeline over pl.ANY operands, scalar prefetch, an
f32[tile_m, tile_n] scratch accumulator) on bf16 lhs [8192, 4096] x rhs [8, 4096, 14336], each
config (tile_m x tile_k x tile_n x input_buffer_count) is, per chip:

- modelled: vmem_lsp.fits(..., compile=False), the layout model's parts (windows, scratch,
  pipeline buffers, its compiler-internal estimate);
- compiled plainly (the chip's default scoped limit, as tokamax's autotuner compiles it): fits,
  or E1001's "Scoped allocation with size";
- compiled with a ballast (bench/model_harness.ballast_patch: an ignored input the size of VMEM,
  vmem_limit_bytes twice it), so that the physical check fails and lists every allocation of the
  kernel; the ballast's entry is taken out.

The compiler's entries are matched to the model's parts by size; what is left over on the
compiler's side is what the model does not hold (on v5e: "register allocator spill slots"), and
on the model's side what it counts that the compiler does not list. Default configs: the two
known misses and one-knob-at-a-time sweeps around them; --grid: tile_m x tile_n x tile_k
{128..1024} x {128..1024} x {512..4096} at two buffers; --kernel plain: the same tiles as a
plain Pallas matmul.

What it found (2026-12-04, libtpu 0.0.50.1; bench/RESULTS.md): every window the compiler lists
is a model part to the byte; beyond them v5e and v5p hold only register allocator spill slots,
about one copy of the bf16 lhs block (tile_m x tile_k x 2) when tile_n > 128, whatever the
buffer count, tokamax's kernel and a plain matmul alike. That term is now the model's
(tpu/layout.lhs_block_bytes); the last column is the model's error against the compiler.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

SHAPE = (8192, 4096, 14336, 8)
MiB = 1 << 20
DEFAULT_CONFIGS = (
    [(512, 4096, 256, 2), (1024, 1024, 512, 4)]
    + [(512, k, 256, 2) for k in (512, 1024, 2048)]  # tile_k
    + [(m, 1024, 512, 2) for m in (128, 256, 512, 1024)]  # tile_m
    + [(512, 1024, n, 2) for n in (128, 256, 1024, 2048)]  # tile_n
    + [(1024, 1024, 512, b) for b in (3,)]  # buffers (2 and 4 above)
    + [(512, 4096, 256, b) for b in (3, 4)]
)


def size(n: int | None) -> str:
    return "-" if n is None else f"{n / MiB:.2f}M"


def model(ba, config, target: str, plain: bool) -> dict:
    """The layout model's verdict and parts (vmem-lsp's worker traces the call; no compile)."""
    import jax
    import jax.numpy as jnp
    from bench_tuners import knobs

    import vmem_lsp
    from vmem_lsp.tuners.tokamax import as_call, configured_op

    if plain:
        tm, tk, tn, _ = knobs(config)
        m, k, n, _ = SHAPE
        lhs, rhs = jax.ShapeDtypeStruct((m, k), jnp.bfloat16), jax.ShapeDtypeStruct((k, n), jnp.bfloat16)
        v = vmem_lsp.fits(plain_matmul, lhs, rhs, target=target, compile=False, tm=tm, tk=tk, tn=tn)
    else:
        call = as_call(lambda c: ba.op.replace(config=c), [config], ba.args, ba.kwargs)
        v = vmem_lsp.fits(configured_op, *call.args, target=target, compile=False, **call.fields[0])
    parts = list(v.parts)
    windows = [(what, n) for what, n in parts if not what.startswith("compiler-internal")]
    return {
        "total": v.used,
        "limit": v.limit,
        "windows": sum(n for _, n in windows),
        "parts": parts,
        "internal": sum(n for what, n in parts if what.startswith("compiler-internal")),
    }


def compile_text(fn, shapes, target: str, patch) -> tuple[str | None, float]:
    """The compiler's error text on jit(fn)(*shapes) (None: it fits) and the seconds, on the
    chip's deviceless topology, pallas_call patched if asked."""
    import jax
    from jax.experimental import pallas as pl
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    from vmem_lsp.tpu.chips import chip

    device = topologies.get_topology_desc(platform="tpu", topology_name=chip(target).topology).devices[0]
    sharding = SingleDeviceSharding(device)
    args = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in shapes]
    original = pl.pallas_call
    jax.clear_caches()  # tokamax's jitted gmm would reuse the other variant's trace
    if patch is not None:
        pl.pallas_call = patch  # tokamax's custom_buffered_pallas_call calls pl.pallas_call late
    started = time.perf_counter()
    try:
        with jax.default_device(device):
            jax.jit(fn).lower(*args).compile()
        return None, time.perf_counter() - started
    except Exception as error:  # the compiler's report is the measurement
        return str(error), time.perf_counter() - started
    finally:
        pl.pallas_call = original


def plain_matmul(lhs, rhs, tm: int, tk: int, tn: int):
    """The same tiles as a plain Pallas TPU matmul (grid over m, n, k; BlockSpec windows; an
    f32[tm, tn] scratch accumulator; no emit_pipeline, no scalar prefetch, no masked store):
    whether the gap is tokamax's or any bf16 matmul's on the chip."""
    import functools

    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    (m, k), n = lhs.shape, rhs.shape[-1]

    def kernel(x_ref, y_ref, o_ref, acc_ref, *, steps):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == steps - 1)
        def _():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    return pl.pallas_call(
        functools.partial(kernel, steps=k // tk),
        out_shape=jax.ShapeDtypeStruct((m, n), lhs.dtype),
        grid=(m // tm, n // tn, k // tk),
        in_specs=[pl.BlockSpec((tm, tk), lambda i, j, l: (i, l)), pl.BlockSpec((tk, tn), lambda i, j, l: (l, j))],
        out_specs=pl.BlockSpec((tm, tn), lambda i, j, l: (i, j)),
        scratch_shapes=[pltpu.VMEM((tm, tn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(lhs, rhs)


def entry_name(a) -> str:
    if a.kind == "spill":
        return "spill slots"
    if a.tag and a.tag.startswith("scoped memory for"):
        return "scoped"
    if a.kind == "scratch":
        return f"scratch {a.window_shape}"
    if a.label and "internal scratch" in a.label:
        return "internal scratch"
    return (a.label or a.tag or a.kind)[:40]


def compiler(ba, config, target: str, plain_kernel: bool) -> dict:
    """The plain verdict and the ballast run's listing."""
    import functools

    import jax
    import jax.numpy as jnp
    import model_harness
    from bench_tuners import knobs

    from vmem_lsp.tpu.chips import chip
    from vmem_lsp.tpu.parse import parse_report

    if plain_kernel:
        tm, tk, tn, _ = knobs(config)
        m, k, n, _ = SHAPE
        fn = functools.partial(plain_matmul, tm=tm, tk=tk, tn=tn)
        shapes = [jax.ShapeDtypeStruct((m, k), jnp.bfloat16), jax.ShapeDtypeStruct((k, n), jnp.bfloat16)]
    else:
        op = ba.op.replace(config=config)
        fn = lambda lhs, rhs: op(lhs, rhs, **ba.kwargs)  # the group sizes as tokamax binds them: constants
        shapes = ba.args
    plain, plain_s = compile_text(fn, shapes, target, None)
    report = parse_report(plain) if plain else None
    found = {
        "fits": plain is None,
        "plain_form": report.form if report else None,
        "plain_used": report.used if report else None,
        "plain_limit": report.limit if report else None,
        "seconds": round(plain_s, 1),
    }
    if report is not None and report.form not in ("scoped", "physical"):
        found["error"] = plain.strip().split("\n")[0][:200]
        return found
    capacity = chip(target).capacity
    text, _ = compile_text(fn, shapes, target, model_harness.ballast_patch(capacity, 2 * capacity))
    listed = parse_report(text or "")
    if listed.form != "physical":
        found["error"] = f"ballast run gave no listing: {(text or 'fits').strip().splitlines()[0][:200]}"
        return found
    # The ballast: the one input window (tokamax's operands are SMEM and pl.ANY), printed as
    # the capacity rounded to two decimals ("127.94M"), so found by its kind, not its size.
    ballast = [a for a in listed.allocations if a.kind == "input_window" and a.size > capacity // 2]
    entries = [a for a in listed.allocations if a not in ballast]
    found.update(
        total=sum(a.size for a in entries),
        used_less_ballast=listed.used - sum(a.size for a in ballast) if listed.used else None,
        entries=[(entry_name(a), a.size) for a in entries],
    )
    return found


def match(model_parts: list[tuple[str, int]], entries: list[tuple[str, int]]) -> tuple[list, list]:
    """(compiler entries no model part has the size of, model parts no entry has the size of)."""
    left = Counter(n for what, n in model_parts if not what.startswith("compiler-internal"))
    beyond = []
    for name, n in entries:
        if left[n] > 0:
            left[n] -= 1
        else:
            beyond.append((name, n))
    unlisted = []
    for what, n in model_parts:
        if not what.startswith("compiler-internal") and left[n] > 0:
            left[n] -= 1
            unlisted.append((what, n))
    return beyond, unlisted


def parse_configs(text: str) -> list[tuple[int, ...]]:
    return [tuple(int(x) for x in c.split("x")) for c in text.split(",") if c]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="v5e,v6e")
    parser.add_argument("--configs", default=None, help="tile_m x tile_k x tile_n x buffers, comma-separated")
    parser.add_argument("--grid", action="store_true", help="tile_m x tile_n x tile_k grid instead, two buffers")
    parser.add_argument(
        "--kernel",
        choices=("tokamax", "plain"),
        default="tokamax",
        help="plain: the same tiles as a plain Pallas matmul",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object a line")
    args = parser.parse_args(argv)
    sys.argv[1:] = []  # tokamax reads absl flags from the command line: ours are not its
    from bench_tuners import KNOBS, bound, knobs

    ba = bound(SHAPE)
    by_knobs = {knobs(c): c for c in ba.autotuning_configs if not getattr(c, "combine_scopes", False)}
    if args.grid:
        tiles = (128, 256, 512, 1024)
        wanted = [(m, k, n, 2) for m, n, k in itertools.product(tiles, tiles, (512, 1024, 2048, 4096))]
    else:
        wanted = parse_configs(args.configs) if args.configs else DEFAULT_CONFIGS
    if not args.json:
        print(f"shape m,k,n,g = {SHAPE}; config = {' x '.join(KNOBS)}")
        print(
            "| config | chip | model total (windows) | compiler (plain) | compiler total (ballast) | "
            "compiler - model windows | beyond the model's windows | model parts not listed | model - compiler |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
    for target in args.targets.split(","):
        for wanted_knobs in wanted:
            config = by_knobs.get(tuple(wanted_knobs))
            if config is None:
                print(f"{wanted_knobs}: not one of tokamax's configs", file=sys.stderr)
                continue
            plain = args.kernel == "plain"
            m = model(ba, config, target, plain)
            c = compiler(ba, config, target, plain)
            beyond, unlisted = match(m["parts"], c.get("entries", []))
            record = {"config": list(wanted_knobs), "target": target, "kernel": args.kernel, "model": m, "compiler": c}
            record.update(beyond=beyond, unlisted=unlisted)
            if args.json:
                print(json.dumps(record), flush=True)
                continue
            said_plain = (
                "fits" if c["fits"] else f"{c['plain_form']} {size(c['plain_used'])} of {size(c['plain_limit'])}"
            )
            gap = c["total"] - m["windows"] if "total" in c else None
            said = ", ".join(f"{what} {size(n)}" for what, n in beyond) or "-"
            missing = ", ".join(f"{what} {size(n)}" for what, n in unlisted) or "-"
            if "error" in c:
                said = c["error"]
            print(
                f"| {'x'.join(map(str, wanted_knobs))} | {target} | {size(m['total'])} ({size(m['windows'])}) | "
                f"{said_plain} | {size(c.get('total'))} | {size(gap)} | {said} | {missing} | "
                f"{size(m['total'] - c['total']) if 'total' in c and m['total'] is not None else '-'} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
