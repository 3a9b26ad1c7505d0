"""What a kernel that asks jax which chip it runs on costs (issue 31): its module is
imported again, and jax's traces cleared, before each request for another chip, where
a module that never asks is imported and traced once.

    .venv/bin/python bench/bench_chip_view.py [--runs 3] [--kernels 4] [--body add|flash]

Two modules of --kernels identical pallas_calls (8-row blocks, so every chip fits and
compiles the same work): one picks its rows from `jax.devices()[0].device_kind`, the
other from a constant. Each is checked on v4, v5e, v5p, v6e and v7x by one worker
(`--jobs 1 --no-cache`), the two in turn, --runs times; prints each run and the
medians, and the difference per chip switch (four per run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = "v4,v5e,v5p,v6e,v7x"

HEADER = """import jax
from jax.experimental import pallas as pl

ROWS = {{}}  # a tuning table keyed by device_kind: empty, so every chip runs 8 rows


def rows_for_this_chip():
    return {how}


def add_one_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1
"""

KERNEL = """

# vmem: add_one_{n}(f32[1024, {width}])
def add_one_{n}(x):
    rows = rows_for_this_chip()
    return pl.pallas_call(
        add_one_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // rows,),
        in_specs=[pl.BlockSpec((rows, {width}), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((rows, {width}), lambda i: (i, 0)),
    )(x)
"""

# jax's flash attention, its blocks from the same table: a trace that costs more.
FLASH = """

# vmem: attention_{n}(bf16[1, 8, {length}, 128], bf16[1, 8, {length}, 128], bf16[1, 8, {length}, 128])
def attention_{n}(q, k, v):
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    b = min(rows_for_this_chip() * 16, q.shape[2])
    sizes = fa.BlockSizes(block_q=b, block_k_major=b, block_k=b, block_b=1)
    return fa.flash_attention(q, k, v, block_sizes=sizes)
"""

ASKS = "ROWS.get(jax.devices()[0].device_kind, 8)"
NEVER_ASKS = "ROWS.get('TPU v6 lite', 8)"


def module(how: str, kernels: int, body: str) -> str:
    # A width (a length) per kernel: no two examples are the same compile.
    if body == "flash":
        return HEADER.format(how=how) + "".join(FLASH.format(n=n, length=256 * (n + 1)) for n in range(kernels))
    return HEADER.format(how=how) + "".join(KERNEL.format(n=n, width=128 * (n + 1)) for n in range(kernels))


def timed_check(path: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(
        [
            str(ROOT / ".venv/bin/vmem-lsp"),
            "check",
            path.name,
            "--target",
            TARGETS,
            "--jobs",
            "1",
            "--no-cache",
            "--format",
            "json",
        ],
        cwd=path.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"check {path.name} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout)["summary"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--kernels", type=int, default=4)
    parser.add_argument(
        "--body", choices=("add", "flash"), default="add", help="the kernels: a one-line add, or jax's flash attention"
    )
    args = parser.parse_args()
    times: dict[str, list[float]] = {"asks": [], "never asks": []}
    with tempfile.TemporaryDirectory() as folder:
        paths = {"asks": Path(folder, "asks.py"), "never asks": Path(folder, "never_asks.py")}
        paths["asks"].write_text(module(ASKS, args.kernels, args.body))
        paths["never asks"].write_text(module(NEVER_ASKS, args.kernels, args.body))
        for run in range(args.runs):
            for name, path in paths.items():
                seconds, summary = timed_check(path)
                times[name].append(seconds)
                print(f"run {run + 1} {name:10s} {seconds:6.2f} s  ({summary})", flush=True)
    asks, never = statistics.median(times["asks"]), statistics.median(times["never asks"])
    switches = len(TARGETS.split(",")) - 1
    print(
        f"\n{args.kernels} kernels x 5 chips, one worker: asks {asks:.2f} s, never asks {never:.2f} s (medians "
        f"of {args.runs}); {asks - never:+.2f} s in all, {(asks - never) / switches:+.2f} s per chip switch"
    )


if __name__ == "__main__":
    main()
