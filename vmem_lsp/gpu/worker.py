"""The GPU family's part of the worker process (family.WorkerSide): a compile-only CUDA
device made from the target's GpuTargetConfig by jax's CUDA plugin, and one pallas_call
compiled alone for it: Mosaic GPU held to the target's shared memory, what MLIR prints kept
with the error, a note of what is compiling for a compile that ends the process (an fp8 dot
below sm_89), ptxas's words on spills when asked; and what the shared-memory model reads of
the kernel (kernel.py).

Imports jax; only the worker process loads this module.
"""

from __future__ import annotations

import re
import time

from jax.experimental import topologies

from ..compile import jax_compat
from ..compile.kernels import (
    error_text,
    first_origin,
    kernel_name,
    lower_and_compile,
    no_phase,
    raised_in_body,
)
from ..compile.tracing import extra, invoked_at
from ..family import Verdict
from ..results import Origin
from . import hooks, ptxas
from .compile import (
    compiled_mosaic_for,
    compiling_where,
    lowers_with_mosaic_gpu,
    mosaic_gpu_limit,
    needs_fresh_process,
    printed_errors,
    with_printed,
)
from .kernel import gpu_kernel_of
from .report import OP_FAMILIES, UNSUPPORTED_OP, op_family
from .targets import gpu, gpu_missing


def install() -> None:
    """Mosaic GPU's BlockSpec and SMEM classes stamped, emit_pipeline's buffers given their specs (hooks.py)."""
    hooks.install()


def devices(target: str) -> tuple:
    """The GPU target's one compile-only device."""
    topology = topologies.get_topology_desc(
        platform="cuda", target_config=gpu(target).target_config(), topology="1x1x1"
    )
    return tuple(topology.devices)


def missing(target: str, said: str) -> str:
    return gpu_missing(target, said)


def fresh_process(device) -> bool:
    """Mosaic GPU compiled for another architecture in this process first (compile.MOSAIC_ARCH)."""
    return needs_fresh_process(device.compute_capability)


def compiler_options(scoped_limit: int | None) -> dict | None:
    return None  # no scoped VMEM on a GPU


def prepare(target: str, spills: bool) -> None:
    ptxas.ASKED[0] = spills
    hooks.TARGET[0] = target


def verdict_key() -> tuple:
    """The target beside the device kind: a probe (h100/request) is the H100's kind with another limit."""
    return (hooks.TARGET[0], *ptxas.key())


def uses_fp8(eqn) -> bool:
    """Whether an equation reads or makes an 8-bit float: what GPUs below sm_89 cannot convert."""
    return any("float8" in str(getattr(v.aval, "dtype", "")) for v in (*eqn.invars, *eqn.outvars))


def converts_fp8(eqn) -> bool:
    """A dot or conversion on 8-bit floats: where the GPU compiler converts them."""
    return eqn.primitive.name in ("dot_general", "convert_element_type") and uses_fp8(eqn)


# What a fatal error's text names -> the body equations it is about: an fp8 conversion
# (below sm_89), an op of a newer architecture's family (jax 0.12's tcgen05 on the H100).
FP8_FATAL = r"\bf8|fp8|float8"


def compiling(eqn, name: str) -> dict:
    """What the client needs if this GPU compile ends the process: the kernel, where it
    was invoked, and the body lines a fatal error may be about, each with the pattern
    of the error's text that points at it (client.fatal_origin; compile.compiling_where)."""

    def pair(origin: Origin | None):
        return [origin.file, origin.line] if origin else None

    body = jax_compat.kernel_body(eqn)
    culprits = [(FP8_FATAL, first_origin(body, converts_fp8) or first_origin(body, uses_fp8))]
    culprits += [(re.escape(family.prefix), op_origin(family.prefix, body)) for family in OP_FAMILIES]
    return {
        "kernel": name,
        "invoked": pair(invoked_at(eqn)),
        "culprits": [[pattern, pair(origin)] for pattern, origin in culprits if origin is not None],
    }


def compile(eqn, device, compiler_options: dict | None, on_phase=no_phase, params: dict | None = None) -> Verdict:
    """XLA's GPU compiler's verdict on one pallas_call for the target's device."""
    params = params or eqn.params
    limit = device.shared_memory_per_block_optin  # the target's: what a block may use
    printed: list[str] = []
    if lowers_with_mosaic_gpu(params.get("compiler_params")):
        compiled_mosaic_for(device.compute_capability)
    started = time.perf_counter()
    try:
        with (
            mosaic_gpu_limit(limit),
            printed_errors(printed),
            compiling_where(compiling(eqn, kernel_name(eqn))),
            ptxas.measuring(device) as spills,
        ):
            lower_and_compile(eqn, device, spills.options(compiler_options), on_phase, params)
        return Verdict(True, None, None, time.perf_counter() - started, None, None, spills.text, spills.missing)
    except Exception as error:  # the compiler's verdict, whatever its type
        text = with_printed(unlowered(eqn, params, error) or error_text(error), printed)
        origin = extra(unsupported_op_origin, None, text, jax_compat.kernel_body(eqn)) or raised_in_body(error)
        return Verdict(False, text, origin, time.perf_counter() - started)


def unlowered(eqn, params: dict, error: Exception) -> str | None:
    """Why jax lowers no pallas_call with these params on GPUs, where it registers no rule for
    them: jax 0.12 dropped pallas_call's Mosaic GPU lowering (Triton's and TPU's are left), and
    says so with a bare `assert rule is not None`."""
    get = getattr(jax_compat.pallas_core, "get_lowering_rule", None)
    compiler_params = params.get("compiler_params")
    if not isinstance(error, AssertionError) or str(error) or get is None or jax_compat.is_mesh_kernel(eqn):
        return None
    if compiler_params is None or not lowers_with_mosaic_gpu(compiler_params):
        return None
    try:
        if get(type(compiler_params), "gpu") is not None:
            return None
    except ValueError as other_platform:  # another platform's params: jax's own words
        return str(other_platform)
    import jax

    return (
        f"jax {jax.__version__} has no pallas_call lowering for Mosaic GPU's CompilerParams on GPUs "
        "(Mosaic GPU kernels are written with plgpu.kernel there; pallas_call lowers with Triton: "
        "compiler_params=pltriton.CompilerParams(...))"
    )


def op_origin(op: str, body) -> Origin | None:
    """The user line of the first body equation that makes `op` (an MLIR/LLVM op name)."""
    family = op_family(op)
    names = family.primitives if family else ()
    if not names:
        return None
    return first_origin(body, lambda eqn: any(name in eqn.primitive.name for name in names))


def unsupported_op_origin(text: str, body) -> Origin | None:
    """The user line of the first body equation that makes the op the architecture lacks."""
    found = UNSUPPORTED_OP.search(text)
    return None if found is None else op_origin(found[1], body)


def count_loops(eqn, estimate: Verdict, prefetch, compile_with) -> Verdict:
    """No estimate of a GPU kernel's speed is made (Family.speed_estimates): nothing to count."""
    return estimate


def call_facts(eqn) -> dict:
    """How the kernel lowers (Triton, Mosaic GPU) and what its params and body tell the
    shared-memory model (layout.GpuKernel: stages, warps, dots)."""
    return {
        "backend": "mosaic_gpu" if lowers_with_mosaic_gpu(eqn.params.get("compiler_params")) else "triton",
        "family_facts": extra(gpu_kernel_of, None, eqn),
    }
