"""The compiler's cycle estimate of a long grid, taken on two cut grids and
extrapolated (tpu/profile.py, compile/cut_grids.py, what `sweep --rank speed` does), against the
estimate of the whole grid, and what each costs.

    .venv/bin/python bench/bench_speed_estimate.py [--target v6e] [--configs 4096:512:512:512,...]

Each config is the bundled matmul `N:bm:bk:bn` on bf16[N, N] x bf16[N, N]. The whole grid
is estimated in a process of its own (libtpu with the profile flag, then the
compile), the cut grids through an estimating worker as the sweep runs them.
Prints both estimates, their difference, the seconds and the peak memory of each.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WHOLE = r"""
import glob, os, re, sys, time
import jax, jax.numpy as jnp
from jax.sharding import SingleDeviceSharding
sys.path.insert(0, sys.argv[1])
from matmul import matmul
from vmem_lsp.compile.devices import target_device
device = target_device(sys.argv[2])
n, bm, bk, bn = map(int, sys.argv[3:7])
x = jax.ShapeDtypeStruct((n, n), jnp.bfloat16, sharding=SingleDeviceSharding(device))
started = time.perf_counter()
with jax.default_device(device):
    jax.jit(lambda a, b: matmul(a, b, bm=bm, bk=bk, bn=bn)).lower(x, x).compile()
text = "".join(open(f).read() for f in glob.glob(os.path.join(sys.argv[7], "*")))
import resource
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
print(sum(map(int, re.findall(r"estimated_cycles: (\d+)", text))), time.perf_counter() - started, peak)
"""


def whole_grid(target: str, n: int, bm: int, bk: int, bn: int) -> tuple[int, float, float]:
    """(cycles, seconds, peak GB) of the whole grid's estimate."""
    with tempfile.TemporaryDirectory() as folder:
        env = {
            **os.environ,
            "LIBTPU_INIT_ARGS": f"--xla_jf_dump_static_llo_profile_to={folder}",
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
        }
        done = subprocess.run(
            [sys.executable, "-c", WHOLE, str(ROOT / "examples"), target, str(n), str(bm), str(bk), str(bn), folder],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    cycles, seconds, peak = done.stdout.split()
    return int(cycles), float(seconds), float(peak)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="v6e")
    parser.add_argument("--configs", default="4096:512:512:512,8192:1024:1024:1024,4096:256:1024:512")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from vmem_lsp.compile.backend import estimate_runner
    from vmem_lsp.config import Settings
    from vmem_lsp.engine import request_for
    from vmem_lsp.source.directives import find_examples

    settings = Settings(jobs=1)
    runner = estimate_runner(settings)
    path = str(ROOT / "examples" / "matmul.py")
    try:
        for config in args.configs.split(","):
            n, bm, bk, bn = map(int, config.split(":"))
            steps = (n // bm) * (n // bk) * (n // bn)
            text = f"# vmem: matmul(bf16[{n}, {n}], bf16[{n}, {n}], bm={bm}, bk={bk}, bn={bn})\ndef matmul(): pass\n"
            (example,), _ = find_examples(text, path)
            started = time.perf_counter()
            result = runner.check(
                dataclasses.replace(request_for(example, args.target, settings), estimate=True), settings.limits()
            )
            cut_seconds = time.perf_counter() - started
            if result.error or not result.calls:
                print(f"{config} ({steps} steps): the cut estimate failed: {result.error}")
                continue
            cut = result.calls[0].estimated_cycles
            whole, whole_seconds, whole_peak = whole_grid(args.target, n, bm, bk, bn)
            off = (cut - whole) / whole * 100 if cut is not None else float("nan")
            print(
                f"{args.target} {config} ({steps} steps): whole grid {whole:,} cycles in {whole_seconds:.1f} s "
                f"(peak {whole_peak:.1f} GB); cut grids {cut:,} in {cut_seconds:.1f} s; {off:+.2f}%",
                flush=True,
            )
    finally:
        runner.stop()


if __name__ == "__main__":
    main()
