"""What `vmem-lsp doctor` tries for GPU targets: a tiny Triton kernel compiled per GPU (docs/gpu.md),
or one line saying jax's CUDA plugin is not installed where the worker runs (GPU targets are optional)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..checkup import KERNEL, Check, compile_error
from ..family import TinyCompiles
from .targets import GPUS

if TYPE_CHECKING:
    from ..results import PhaseLimits

# The GPU targets' tiny kernel: Triton's (Mosaic GPU, jax's default on a GPU, has no sm_80 copy).
GPU_KERNEL = (
    KERNEL.replace("one tiny kernel, compiled once per chip", "one tiny Triton kernel, once per GPU")
    .replace(
        "from jax.experimental import pallas as pl\n",
        "from jax.experimental import pallas as pl\nfrom jax.experimental.pallas import triton as pltriton\n",
    )
    .replace(
        "out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)",
        "out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), compiler_params=pltriton.CompilerParams())(x)",
    )
)


def gpu_checks(tiny: TinyCompiles, limits: PhaseLimits) -> list[Check]:
    """One tiny Triton compile per GPU target (docs/gpu.md); one line when jax's CUDA
    plugin is not installed where the worker runs: GPU targets are optional."""
    results = tiny(list(GPUS), GPU_KERNEL)
    if all(r.error_kind == "no_compiler" for _, r, _ in results):
        return [
            Check(
                "gpus",
                "gpus",
                "info",
                f"GPU targets ({', '.join(GPUS)}): {results[0][1].error}",
                "pip install 'vmem-lsp[gpu]' where the worker runs, to check Pallas GPU kernels",
            )
        ]
    checks = []
    for name, result, seconds in results:
        why = compile_error(result)
        status, said = (
            ("ok", f"compiled in {seconds:.1f} s ({result.device_kind})") if why is None else ("problem", why)
        )
        fix = None if why is None else "pip install 'vmem-lsp[gpu]' (the CUDA plugin of this jax, and ptxas)"
        first = said.strip().splitlines()[0] if said.strip() else said
        checks.append(Check("gpus", name, status, f"{name}: {first}", fix, round(seconds, 2)))
    return checks
