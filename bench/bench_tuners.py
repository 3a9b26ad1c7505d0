"""What vmem-lsp saves tokamax's autotuner, and whether it ever drops a config that fits (issue 43).

    python bench/bench_tuners.py [--targets v5e,v7x] [--shape 8192,4096,14336,8] [--sample 6] [--json] [--warm]

Needs a Python with tokamax (0.0.12, on jax 0.12: Python 3.12) and vmem-lsp importable (this
checkout on PYTHONPATH). For tokamax's TPU ragged_dot (PallasMosaicTpuRaggedDot) on bf16 lhs [m, k],
rhs [g, k, n], its own autotuning configs (`BoundArguments.autotuning_configs`: tile_m x tile_k x
tile_n x input_buffer_count), per chip:

- pruned: what PruningAutotuner.skipped leaves out (vmem-lsp's sweep: the layout model where it is
  sure, deviceless compiles near the frontier), and the seconds it took;
- compile seconds saved: `--sample` pruned configs compiled directly (jax.jit(...).lower().compile()
  on the chip's deviceless topology, no vmem-lsp), their mean times the configs pruned: what
  tokamax's thread pool would have spent on them before they failed;
- pruning errors: every pruned config on the frontier (no other pruned config is smaller in every
  tile and the buffer count) compiled directly: one that fits is a config vmem-lsp dropped wrongly,
  which must never happen (one the compiler refuses for another reason, a tile Mosaic cannot slice,
  is listed apart: tokamax loses nothing by it);
- kept and over: every kept config on the other side (no kept config is larger in all of them)
  compiled directly: one that overflows is a config tokamax still compiles in vain (no harm done).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KNOBS = ("tile_m", "tile_k", "tile_n", "input_buffer_count")


def bound(shape: tuple[int, int, int, int]):
    """tokamax's bound arguments of its TPU ragged_dot on bf16 [m, k] x [g, k, n]."""
    import jax
    import jax.numpy as jnp
    from tokamax._src.ops.ragged_dot import pallas_mosaic_tpu

    m, k, n, g = shape
    lhs = jax.ShapeDtypeStruct((m, k), jnp.bfloat16)
    rhs = jax.ShapeDtypeStruct((g, k, n), jnp.bfloat16)
    sizes = jax.ShapeDtypeStruct((g,), jnp.int32)
    return pallas_mosaic_tpu.PallasMosaicTpuRaggedDot().bind(lhs, rhs, group_sizes=sizes)


def compile_directly(ba, config, target: str) -> tuple[bool | None, float, str]:
    """(fits, seconds, the error's first line) of tokamax's op with this config, jitted and
    compiled for the chip's deviceless topology: the compiler's word, no vmem-lsp in the way."""
    import jax
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    from vmem_lsp.tpu.chips import chip

    device = topologies.get_topology_desc(platform="tpu", topology_name=chip(target).topology).devices[0]
    sharding = SingleDeviceSharding(device)
    op = ba.op.replace(config=config)
    args = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in ba.args]
    started = time.perf_counter()
    try:  # the group sizes as tokamax binds them: its representative values, constants
        with jax.default_device(device):
            jax.jit(lambda lhs, rhs: op(lhs, rhs, **ba.kwargs)).lower(*args).compile()
        return True, time.perf_counter() - started, ""
    except Exception as error:  # the compiler's refusal is the measurement
        text = str(error)
        memory = "vmem" in text.lower() and ("exceeded" in text or "Ran out of memory" in text)
        return (False if memory else None), time.perf_counter() - started, text.strip().split("\n")[0][:200]


def knobs(config) -> tuple[int, ...]:
    return tuple(getattr(config, name) for name in KNOBS)


def frontier(configs: list, smallest: bool) -> list:
    """The configs no other of the list is below (smallest) or above in every knob."""
    points = [knobs(c) for c in configs]

    def beyond(q: tuple, p: tuple) -> bool:
        return q != p and all((x <= y) if smallest else (x >= y) for x, y in zip(q, p))

    return [c for c, p in zip(configs, points) if not any(beyond(q, p) for q in points)]


def decided_by(why: str) -> str:
    """Who ruled a pruned config out, from DoesNotFit's words (api.why_not)."""
    said = why.split(": ", 1)[-1]
    return (
        "compiler" if said.startswith("the compiler") else "model" if said.startswith("the layout model") else "order"
    )


def measure(shape: tuple[int, int, int, int], target: str, sample: int) -> dict:
    from vmem_lsp.tuners.tokamax import PruningAutotuner

    ba = bound(shape)
    configs = list(ba.autotuning_configs)
    factory = lambda config: ba.op.replace(config=config)
    started = time.perf_counter()
    skipped = PruningAutotuner(targets=target).skipped(factory, set(configs), *ba.args, **ba.kwargs)
    pruning_seconds = time.perf_counter() - started
    pruned = sorted(skipped, key=knobs)
    kept = sorted((c for c in configs if c not in skipped), key=knobs)
    timed = random.Random(0).sample(pruned, min(sample, len(pruned)))
    sample_seconds = [compile_directly(ba, c, target)[1] for c in timed]
    mean = sum(sample_seconds) / len(sample_seconds) if sample_seconds else 0.0
    edge_pruned = frontier(pruned, smallest=True)
    wrong, refused = [], []
    for config in edge_pruned:
        fits, _, error = compile_directly(ba, config, target)
        if fits is True:  # a config vmem-lsp dropped that the compiler takes: must never happen
            wrong.append(config)
        elif fits is None:  # refused for another reason (a tile Mosaic cannot slice): tokamax loses nothing
            refused.append((config, error))
    edge = frontier(kept, smallest=False)
    over = [c for c in edge if compile_directly(ba, c, target)[0] is False]
    return {
        "target": target,
        "shape": list(shape),
        "configs": len(configs),
        "pruned": len(pruned),
        "pruning_seconds": round(pruning_seconds, 1),
        "sampled_compile_seconds": [round(s, 2) for s in sample_seconds],
        "compile_seconds_saved": round(mean * len(pruned), 1),
        "pruned_frontier_compiled": len(edge_pruned),
        "pruning_errors": [str(knobs(c)) for c in wrong],
        "pruned_refused_otherwise": [f"{knobs(c)}: {why}" for c, why in refused],
        "kept_frontier_compiled": len(edge),
        "kept_but_over": [str(knobs(c)) for c in over],
        "decided_by": {
            who: sum(decided_by(skipped[c].why) == who for c in pruned) for who in ("model", "compiler", "order")
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="v5e,v7x")
    parser.add_argument("--shape", default="8192,4096,14336,8", help="m,k,n,g of lhs [m, k] and rhs [g, k, n]")
    parser.add_argument("--sample", type=int, default=6, help="pruned configs compiled to time them")
    parser.add_argument("--json", action="store_true", help="one JSON object a chip, nothing else on stdout")
    parser.add_argument(
        "--warm", action="store_true", help="in this folder, with its .vmem_lsp_cache (default: a fresh one)"
    )
    args = parser.parse_args(argv)
    if not args.warm:  # vmem-lsp's cache is the working folder's: a fresh folder times it cold
        os.chdir(tempfile.mkdtemp(prefix="bench-tuners-"))
    sys.argv[1:] = []  # tokamax reads absl flags from the command line: ours are not its
    shape = tuple(int(x) for x in args.shape.split(","))
    assert len(shape) == 4, "--shape m,k,n,g"
    if not args.json:
        print(
            "| chip | configs | pruned | vmem-lsp s | compile s saved (sample mean x pruned) | frontier compiled: pruned / kept | pruning errors | kept but over |"
        )
        print("|---|---|---|---|---|---|---|---|")
    for target in args.targets.split(","):
        found = measure(shape, target, args.sample)  # type: ignore[arg-type]
        if args.json:
            print(json.dumps(found), flush=True)
            continue
        print(
            f"| {target} | {found['configs']} | {found['pruned']} | {found['pruning_seconds']} | "
            f"{found['compile_seconds_saved']} ({found['sampled_compile_seconds']}) | "
            f"{found['pruned_frontier_compiled']} / {found['kept_frontier_compiled']} | "
            f"{len(found['pruning_errors'])} | {len(found['kept_but_over'])} |",
            flush=True,
        )
        for name in ("pruning_errors", "pruned_refused_otherwise", "kept_but_over"):
            for line in found[name]:
                print(f"  {target} {name}: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
