"""`vmem_lsp.fits(..., compile=False)`: the layout model's verdict per config,
after the first trace of the function (issue 20's target: a median under 5 ms).

    .venv/bin/python bench/bench_fits.py [--configs 64] [--runs 1]

Asks for the bundled matmul on v6e with a different (bm, bk, bn) each time, so
that no answer is a repeat; the first call (which starts the worker and imports
jax and the module) is timed apart. With --runs, as many blocks of --configs
new configs follow one another (at most 342 configs in all), each with its
median: the machine's speed moves between blocks. Also prints the CPU time per call of this
process and of the worker: on 2 shared cores the wall time follows other jobs,
the CPU time much less.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from matmul import matmul  # noqa: E402

import vmem_lsp  # noqa: E402
from vmem_lsp import api  # noqa: E402
from vmem_lsp.compile.tracing import forget_own_traces  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process (Linux /proc), 0 where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=64)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    if args.configs * args.runs > 342:
        parser.error("at most 342 configs in all (7 block sizes for each of bm, bk, bn, less the first)")
    x = jax.ShapeDtypeStruct((8192, 8192), jnp.bfloat16)
    sizes = (128, 256, 512, 1024, 2048, 4096, 8192)
    configs = list(itertools.islice(itertools.product(sizes, sizes, sizes), args.configs * args.runs + 1))
    started = time.perf_counter()
    vmem_lsp.fits(matmul, x, x, target="v6e", compile=False, bm=configs[0][0], bk=configs[0][1], bn=configs[0][2])
    first = time.perf_counter() - started
    worker = api.ENGINE.ready().workers.created[0].hello["pid"]
    medians = []
    for run in range(args.runs):
        times = []
        cpu_before, worker_before = time.process_time(), cpu_seconds(worker)
        for bm, bk, bn in configs[1 + run * args.configs : 1 + (run + 1) * args.configs]:
            started = time.perf_counter()
            vmem_lsp.fits(matmul, x, x, target="v6e", compile=False, bm=bm, bk=bk, bn=bn)
            times.append(time.perf_counter() - started)
        ours, theirs = time.process_time() - cpu_before, cpu_seconds(worker) - worker_before
        times.sort()
        medians.append(statistics.median(times))
        print(
            f"{len(times)} configs: median {1000 * statistics.median(times):.2f} ms, "
            f"p90 {1000 * times[int(0.9 * (len(times) - 1))]:.2f} ms, max {1000 * times[-1]:.2f} ms "
            f"(load average {os.getloadavg()[0]:.1f}); CPU per config: this process "
            f"{1000 * ours / len(times):.2f} ms + the worker {1000 * theirs / len(times):.2f} ms"
        )
    # The floor: jax's own trace of the same configs here (the worker must do as much for
    # each), its traces evicted as the worker evicts its own (or they pile up and slow it).
    floor = []
    for bm, bk, bn in configs[1:]:
        started = time.perf_counter()
        matmul.trace(x, x, bm=bm, bk=bk, bn=bn)
        forget_own_traces(matmul)
        floor.append(time.perf_counter() - started)
    print(f"first call (worker start, jax import, first trace): {first:.2f} s")
    print(
        f"median of the {len(medians)} medians: {1000 * statistics.median(medians):.2f} ms; "
        f"highest {1000 * max(medians):.2f} ms"
    )
    print(
        f"jax's own trace of the same configs in this process (the floor): median "
        f"{1000 * statistics.median(floor):.2f} ms"
    )


if __name__ == "__main__":
    main()
