"""Capture the compiler's static cycle estimates (the profile libtpu writes with
--xla_jf_dump_static_llo_profile_to) for the parser's tests: a few kernels on
every chip, each chip in a process of its own, since the profile can abort
libtpu. Writes tests/data/static_profiles/<libtpu>/<chip>-<kernel>.textproto,
and <chip>.aborted (the end of the process's stderr) where libtpu aborted.

    .venv/bin/python scripts/capture_static_profiles.py [--chips v5e,v6e,v7x]

Run it in each jax of the supported range (VIRTUAL_ENV=... PYTHONPATH=.).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "static_profiles"

# (name, block rows, block cols) of a bf16 matmul of [2048, 1024] x [1024, 2048]; an add; and
# jax's flash attention with two batch rows a block, which libtpu estimates at 0 cycles (its
# op's estimate then holds a nested hlo_instruction message).
CONFIGS = [("matmul-128", 128, 128), ("matmul-512", 512, 512), ("add", None, None), ("flash-batch2", "flash", None)]

ONE_CHIP = r"""
import glob, os, shutil, sys
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.sharding import SingleDeviceSharding
from vmem_lsp.compile.devices import target_device

folder, out, chip = sys.argv[1], sys.argv[2], sys.argv[3]
configs = eval(sys.argv[4])

def matmul_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)

def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]

def matmul(x, y, bm, bn):
    return pl.pallas_call(matmul_kernel, out_shape=jax.ShapeDtypeStruct((x.shape[0], y.shape[1]), x.dtype),
        grid=(x.shape[0] // bm, y.shape[1] // bn),
        in_specs=[pl.BlockSpec((bm, x.shape[1]), lambda i, j: (i, 0)),
                  pl.BlockSpec((x.shape[1], bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)))(x, y)

def add(x, y):
    return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(8,),
        in_specs=[pl.BlockSpec((256, 1024), lambda i: (i, 0))] * 2,
        out_specs=pl.BlockSpec((256, 1024), lambda i: (i, 0)))(x, y)

device = target_device(chip)
sharding = SingleDeviceSharding(device)
for name, bm, bn in configs:
    for stale in glob.glob(os.path.join(folder, "*")):
        os.remove(stale)
    with jax.default_device(device):
        if bm == "flash":
            from jax.experimental.pallas.ops.tpu.flash_attention import BlockSizes, flash_attention

            q = jax.ShapeDtypeStruct((2, 2, 1024, 128), jnp.bfloat16, sharding=sharding)
            sizes = BlockSizes(block_q=512, block_k_major=512, block_k=512, block_b=2)
            jax.jit(lambda q, k, v: flash_attention(q, k, v, block_sizes=sizes)).lower(q, q, q).compile()
        elif bm is None:
            x = jax.ShapeDtypeStruct((2048, 1024), jnp.float32, sharding=sharding)
            jax.jit(add).lower(x, x).compile()
        else:
            x = jax.ShapeDtypeStruct((2048, 1024), jnp.bfloat16, sharding=sharding)
            y = jax.ShapeDtypeStruct((1024, 2048), jnp.bfloat16, sharding=sharding)
            jax.jit(lambda x, y: matmul(x, y, bm, bn)).lower(x, y).compile()
    written = sorted(glob.glob(os.path.join(folder, "*_static_llo_profile.textproto")))
    if not written:
        print(f"{chip} {name}: no profile written", flush=True)
    for n, path in enumerate(written):
        shutil.copy(path, os.path.join(out, f"{chip}-{name}{f'-{n}' if n else ''}.textproto"))
        print(f"{chip} {name}: {os.path.basename(path)}", flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chips", default="v4,v5e,v5p,v6e,v7x")
    args = parser.parse_args()
    from vmem_lsp.versions import installed

    libtpu = installed().get("libtpu") or "unknown"
    out = OUT / libtpu
    out.mkdir(parents=True, exist_ok=True)
    for chip in args.chips.split(","):
        folder = tempfile.mkdtemp(prefix="vmem-lsp-profile-")
        env = {
            **os.environ,
            "LIBTPU_INIT_ARGS": f"--xla_jf_dump_static_llo_profile_to={folder}",
            "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "JAX_PLATFORMS": "cpu",  # with jax's CUDA plugin installed, no GPU looked for
        }
        done = subprocess.run(
            [sys.executable, "-c", ONE_CHIP, folder, str(out), chip, repr(CONFIGS)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        shutil.rmtree(folder, ignore_errors=True)
        print(done.stdout, end="")
        if done.returncode != 0:
            lines = done.stderr.splitlines()
            failed = [line for line in lines if "Check failed" in line or "LLO_CHECK" in line] or lines[-8:]
            (out / f"{chip}.aborted").write_text(f"exit {done.returncode}\n" + "\n".join(failed[:5]) + "\n")
            print(f"{chip}: libtpu exited {done.returncode}: {failed[:1]}")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
