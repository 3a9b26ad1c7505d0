"""A folder of 20 kernels x 3 chips, checked with a pool of 1 worker and of
all cores, cold and warm cache; and the per-compile overhead of a worker over
SSH (a real sshd on 127.0.0.1) against a local one.

    .venv/bin/python bench/bench_remote.py        (SSH part needs root and openssh-server)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = "v5e,v6e,v7x"

KERNEL = """import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] * {scale} + y_ref[...]


# vmem: run({dtype}[{rows}, {cols}], {dtype}[{rows}, {cols}])
def run(x, y):
    rows, cols = x.shape
    spec = pl.BlockSpec(({block}, cols), lambda i: (i, 0))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(rows // {block},), in_specs=[spec, spec], out_specs=spec)(x, y)
"""


def make_folder(folder: Path) -> None:
    for i in range(20):
        dtype = ("f32", "bf16")[i % 2]
        block = (256, 512, 1024, 2048)[i % 4]
        (folder / f"k{i:02}.py").write_text(
            KERNEL.format(scale=i + 1, dtype=dtype, rows=8192, cols=(512, 1024, 2048)[i % 3], block=block)
        )


def timed(folder: Path, cache: Path, *extra: str) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "vmem_lsp",
            "check",
            str(folder),
            "--target",
            TARGETS,
            "--cache-dir",
            str(cache),
            *extra,
        ],
        capture_output=True,
        text=True,
    )
    return time.perf_counter() - started, done.stdout.strip().splitlines()[-1]


def main() -> None:
    cores = os.cpu_count() or 1
    print(f"machine: {cores} cores; {time.strftime('%Y-%m-%d')}; 20 kernels x {TARGETS}")
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work) / "kernels"
        folder.mkdir()
        make_folder(folder)
        figures = {}
        for jobs in (1, cores):
            cache = Path(work) / f"cache-{jobs}"
            cold, summary = timed(folder, cache, "--jobs", str(jobs))
            warm, _ = timed(folder, cache, "--jobs", str(jobs))
            figures[jobs] = cold
            print(f"pool of {jobs}: cold {cold:.1f} s, warm {warm:.2f} s  ({summary})")
        print(f"speedup with {cores} workers: {figures[1] / figures[cores]:.2f}x")
        ssh_overhead(Path(work), folder)


def ssh_overhead(work: Path, folder: Path) -> None:
    if os.geteuid() != 0 or not os.path.exists("/usr/sbin/sshd"):
        print("SSH: skipped (needs root and openssh-server)")
        return
    sys.path.insert(0, str(ROOT / "tests"))
    from support.sshd import Sshd

    (work / "ssh").mkdir()
    server = Sshd(work / "ssh")
    try:
        local, _ = timed(folder, work / "cache-local", "--jobs", "1")
        remote, summary = timed(folder, work / "cache-ssh", "--jobs", "1", "--worker", server.command())
        compiles = 20 * len(TARGETS.split(","))
        print(
            f"local worker: {local:.1f} s; over SSH: {remote:.1f} s ({summary}); "
            f"overhead {(remote - local) / compiles * 1000:.0f} ms per compile"
        )
    finally:
        server.kill()


if __name__ == "__main__":
    main()
