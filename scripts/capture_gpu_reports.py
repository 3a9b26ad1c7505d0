"""Capture the real GPU compiler's texts that the GPU report parser is tested against.

Usage: JAX_PLATFORMS=cpu python scripts/capture_gpu_reports.py [--out OUTDIR] [CASE ...]

Needs the CUDA plugin of the running jax (`pip install 'jax[cuda12-local]==<jax version>'`,
no NVIDIA wheels and no GPU). Each case compiles one Pallas kernel for a GPU target of
vmem_lsp/gpu/targets.py through a compile-only device (`topologies.get_topology_desc(platform="cuda",
target_config=...)`), in a child process of its own: some compiler errors end the process
(an LLVM fatal error for an fp8 dot below sm_89). It writes OUTDIR/CASE.txt: three `#` header
lines (target, versions, the kernel), then the exception text verbatim, "(compiled: no error)",
or "(process exited with N)" and the child's last stderr lines; MLIR's "error:" lines
printed beside an exception follow a "--- stderr ---" line. OUTDIR is by default
tests/data/reports/gpu/<plugin version>.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
REPORTS = ROOT / "tests" / "data" / "reports" / "gpu"
NO_ERROR = "(compiled: no error)"
STDERR = "--- stderr ---"  # what the compiler printed beside the exception, when it named an error


@dataclass(frozen=True)
class Case:
    name: str
    target: str  # a key of vmem_lsp.gpus.GPUS
    what: str  # the kernel, for the header
    make: Callable[[], Callable]  # the function to jit, built in the child
    args: tuple[tuple[tuple[int, ...], str], ...]  # (shape, dtype name) per argument


def triton_matmul(block: int, dtype: str = "float32") -> Callable:
    """A Pallas Triton matmul whose whole K is one block: the dot's operands are
    staged in shared memory, block x K each."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plt

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)

    def f(x, y):
        (m, k), (_, n) = x.shape, y.shape
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
            grid=(m // block, n // block),
            in_specs=[
                pl.BlockSpec((block, k), lambda i, j: (i, 0)),
                pl.BlockSpec((k, block), lambda i, j: (0, j)),
            ],
            out_specs=pl.BlockSpec((block, block), lambda i, j: (i, j)),
            compiler_params=plt.CompilerParams(num_warps=4, num_stages=3),
        )(x, y)

    return f


def mosaic_copy(block: int) -> Callable:
    """A Mosaic GPU copy (its compiler params say so: jax 0.10's default GPU backend, not
    0.12's): its blocks are staged in shared memory, in and out."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    def f(x):
        n, m = x.shape
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((n, m), jnp.float32),
            grid=(n // block,),
            in_specs=[pl.BlockSpec((block, m), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((block, m), lambda i: (i, 0)),
            compiler_params=plgpu.CompilerParams(),
        )(x)

    return f


def fp8_dot() -> Callable:
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plt

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    def f(x, y):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((64, 64), jnp.float32),
            compiler_params=plt.CompilerParams(num_warps=4, num_stages=1),
        )(x, y)

    return f


def blackwell_matmul() -> Callable:
    """jax's own Blackwell matmul (plgpu.kernel, tcgen05 MMAs), as its test calls it: on the
    H100 jax 0.10's Mosaic GPU says its op is not supported on sm_90a; jax 0.12's ends the
    process in LLVM's instruction selection."""
    from jax.experimental.pallas.ops.gpu import blackwell_matmul_mgpu

    def f(a, b):
        config = blackwell_matmul_mgpu.TuningConfig(
            tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2, collective=False
        )
        return blackwell_matmul_mgpu.matmul_kernel(a, b, config)

    return f


MATMUL = (((1024, 512), "float32"), ((512, 1024), "float32"))
CASES = {
    c.name: c
    for c in [
        *(
            Case(
                f"triton-smem-{target}",
                target,
                "f32 matmul, Triton, blocks (128, 512) x (512, 128)",
                lambda: triton_matmul(128),
                MATMUL,
            )
            for target in ("h100", "h200", "a100", "l4", "b200")
        ),
        Case(
            "triton-fits-h100",
            "h100",
            "f32 matmul, Triton, blocks (64, 512) x (512, 64)",
            lambda: triton_matmul(64),
            MATMUL,
        ),
        Case(
            "triton-smem-64-l4",
            "l4",
            "f32 matmul, Triton, blocks (64, 512) x (512, 64)",
            lambda: triton_matmul(64),
            MATMUL,
        ),
        Case(
            "triton-tmem-b200",
            "b200",
            "f32 matmul, Triton, blocks (64, 512) x (512, 64)",
            lambda: triton_matmul(64),
            MATMUL,
        ),
        Case(
            "mosaic-smem-h100",
            "h100",
            "f32 copy, Mosaic GPU, block (512, 128)",
            lambda: mosaic_copy(512),
            (((4096, 128), "float32"),),
        ),
        Case(
            "mosaic-smem-a100",
            "a100",
            "f32 copy, Mosaic GPU, block (512, 128)",
            lambda: mosaic_copy(512),
            (((4096, 128), "float32"),),
        ),
        Case(
            "mosaic-fits-h100",
            "h100",
            "f32 copy, Mosaic GPU, block (64, 128)",
            lambda: mosaic_copy(64),
            (((4096, 128), "float32"),),
        ),
        Case(
            "mosaic-sm80-a100",
            "a100",
            "f32 copy, Mosaic GPU, block (64, 128)",
            lambda: mosaic_copy(64),
            (((4096, 128), "float32"),),
        ),
        Case(
            "fp8-dot-a100",
            "a100",
            "f8e4m3fn dot, Triton, one (64, 64) block",
            fp8_dot,
            (((64, 64), "float8_e4m3fn"),) * 2,
        ),
        Case(
            "mosaic-tcgen05-h100",
            "h100",
            "jax's Blackwell matmul (tcgen05), Mosaic GPU, tiles (128, 128, 64)",
            blackwell_matmul,
            (((1024, 1024), "float16"),) * 2,
        ),
        Case(
            "fp8-dot-h100",
            "h100",
            "f8e4m3fn dot, Triton, one (64, 64) block",
            fp8_dot,
            (((64, 64), "float8_e4m3fn"),) * 2,
        ),
    ]
}


def compile_case(case: Case) -> str:
    """The compiler's text for the case (in the child process)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    from vmem_lsp.gpu.targets import gpu

    topology = topologies.get_topology_desc(
        platform="cuda", target_config=gpu(case.target).target_config(), topology="1x1x1"
    )
    # As the worker compiles (compile/kernels.lower_and_compile): on the topology's device, its
    # default (jax 0.12 asks a pallas_call on GPU for a device, not a mesh's sharding alone).
    device = topology.devices[0]
    sharding = SingleDeviceSharding(device)
    args = [jax.ShapeDtypeStruct(shape, jnp.dtype(dtype), sharding=sharding) for shape, dtype in case.args]
    try:
        with jax.default_device(device):
            jax.jit(case.make()).lower(*args).compile()
    except Exception as error:  # the text is what is captured
        return str(error)
    return NO_ERROR


def header(case: Case) -> str:
    from vmem_lsp.gpu.targets import gpu

    target = gpu(case.target)
    return (
        f"# target: {case.target} ({target.device_kind}), {target.sm}\n"
        f"# versions: jax {version('jax')}, jax-cuda12-plugin {version('jax-cuda12-plugin')}\n"
        f"# kernel: {case.what}\n"
    )


def in_child(name: str) -> str:
    """Run one case in a child process: its text, or how the child died."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, __file__, "--child", name], capture_output=True, text=True, env=env, timeout=600
    )
    said = [
        line for line in done.stderr.splitlines() if line.strip() and "cudart_stub" not in line and "absl::" not in line
    ]
    if done.returncode != 0:
        return f"(process exited with {done.returncode})\n" + "\n".join(said[-5:])
    errors = [line for line in said if " error: " in line]  # MLIR's diagnostics: the op and its place
    return done.stdout.rstrip("\n") + (f"\n{STDERR}\n" + "\n".join(errors) if errors else "")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("cases", nargs="*", choices=[[], *CASES], default=[])
    args = parser.parse_args(argv)
    if args.child:
        print(compile_case(CASES[args.child]))
        return 0
    out = args.out or REPORTS / version("jax-cuda12-plugin")
    out.mkdir(parents=True, exist_ok=True)
    for name in args.cases or list(CASES):
        text = in_child(name)
        (out / f"{name}.txt").write_text(header(CASES[name]) + text + "\n")
        print(f"{name}: {text.splitlines()[0][:120] if text else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
