"""A Pallas GPU kernel's shared memory on one GPU target, as a Budget (the
table the hover, the inlay hints and the static tier show): the blocks its
backend stages, their total by the compiler when it refused the kernel, else
by the model (layout.py), and the target's limit per block. While the
user types, the model of the edited blocks scaled by what the last compile
said over the model's figure, as the fix search scales its candidates.
Pure functions over plain data."""

from __future__ import annotations

from dataclasses import replace

from ..budget import Budget, KnownKernel, Part, culprit_indices, edited_operand, overflow_estimate
from ..diagnostics import Diagnostic
from ..results import CapturedCall, ExampleResult
from ..source.model import KernelSite
from .layout import estimated_shared_memory, peak_allocations, scoped_bytes, staged_blocks
from .report import GpuReport, parse_gpu_report
from .targets import gpu

SHARED = "shared"  # Budget.limit_kind of a GPU's shared memory per block
STAGED_NOTE = (
    "Blocks staged in shared memory: Triton stages its dots' input blocks (16-bit operands together, f32 "
    "ones one at a time, a loop's tiles num_stages deep), Mosaic GPU every block in and out. The total is "
    "the compiler's where it refused the kernel, else the model's (gpu/layout.py: within 10% of the "
    "compiler's on 97% of the Triton kernels measured, exact on Mosaic GPU's)."
)


def shared_budget(target: str, parts, total: int, limit: int, source: str, fits: bool) -> Budget:
    """A GPU's Budget: the shared memory a block may use, the hover's note on what is staged."""
    label = gpu(target).label
    return Budget(target, tuple(parts), total, limit, SHARED, limit, source, fits, label, "shared memory", STAGED_NOTE)


def block_label(op, how: str = "") -> str:
    """ "input 1 block f16[1,384,1,128]", and how the backend stages it where it is not the
    whole block: ": tiles f16[128,128] x 2 stages" (Triton), " x 2 steps in flight" (Mosaic GPU)."""
    base = f"{'input' if op.role == 'in' else 'output'} {op.index} block {op.dtype}[{','.join(map(str, op.block_shape or ()))}]"
    if not how:
        return base
    return f"{base} {how}" if how.startswith("x ") else f"{base}: {how}"


def parts_of(call: CapturedCall, backend: str | None, target: str | None = None) -> tuple[Part, ...]:
    """The staged blocks, each with the bytes the model stages of it (the compiler gives only the
    total): the whole block, or Triton's tiles of it x the stages it pipelines them over."""
    return tuple(
        Part("input_window" if op.role == "in" else "output_window", op.index, block_label(op, how), size, None, True)
        for op, size, how in staged_blocks(call, backend, target)
    )


def culprits(call: CapturedCall, backend: str | None, limit: int, scale: float = 1.0, target: str | None = None):
    """The staged blocks that make a kernel over `limit`, each with the bytes the model stages of
    it and how: every one for Mosaic GPU (their sum is the request); for Triton those whose
    staged bytes are over the limit alone (scaled to the compiler's request), else the largest
    (each of them when several tie: flash attention's k and v tiles)."""
    blocks = staged_blocks(call, backend, target)
    if backend == "mosaic_gpu" or not blocks:
        return blocks
    over = [b for b in blocks if b[1] * scale > limit]
    largest = max(b[1] for b in blocks)
    return over or [b for b in blocks if b[1] == largest]


def allocation_culprits(call: CapturedCall, requested: int, available: int) -> list:
    """The shared-memory allocations of a plgpu.kernel's body that make it over: of those
    live at its peak, each large enough to matter, as on TPU (budget.culprit_indices)."""
    live = [e for e in peak_allocations(call) if e.dtype != "barrier"]
    chosen = culprit_indices([scoped_bytes(e) for e in live], requested - available, requested)
    return sorted((live[i] for i in chosen), key=scoped_bytes, reverse=True)


def from_gpu_compile(call: CapturedCall, report: GpuReport | None, target_name: str) -> Budget:
    """What a GPU compile established: the compiler's request when it refused
    the kernel over shared memory, else the model's total of the staged blocks. A call
    traced, not compiled, fits as the model says (its `fits` says nothing)."""
    limit = gpu(target_name).shared_memory_limit
    parts = parts_of(call, call.backend, target_name)
    if report is not None and report.form == "shared_memory" and report.requested:
        return shared_budget(target_name, parts, report.requested, report.available or limit, "compiler", False)
    model = estimated_shared_memory(call, call.backend, target_name)
    return shared_budget(target_name, parts, model, limit, "model", call.fits if call.compiled else model <= limit)


def scale_of(call: CapturedCall, report: GpuReport | None, target_name: str) -> float:
    """The compiler's request over the model's figure, 1 where the compiler gave none."""
    model = estimated_shared_memory(call, call.backend, target_name)
    if report is None or report.form != "shared_memory" or not report.requested or not model:
        return 1.0
    return report.requested / model


def edited_call(site: KernelSite, known: KnownKernel, backend: str | None) -> CapturedCall:
    """The last compile's call with the block shapes as written now."""
    operands = tuple(edited_operand(op, site, known) for op in known.call.operands)
    return replace(known.call, operands=operands, backend=backend)


def estimate_gpu(site: KernelSite, known: KnownKernel, target_name: str) -> Budget:
    """The site's shared memory as written now on a GPU target the last compile taught."""
    backend, scale = known.learned["gpu"][target_name]
    call = edited_call(site, known, backend)
    limit = gpu(target_name).shared_memory_limit
    total = round(estimated_shared_memory(call, backend, target_name) * scale)
    return shared_budget(target_name, parts_of(call, backend, target_name), total, limit, "model", total <= limit)


def learn(call: CapturedCall, result: ExampleResult, state: dict | None) -> tuple[Budget, dict]:
    """What a compile for a GPU established, and, per GPU it compiled for, the backend and the
    compiler's request over the model's figure: an edit is estimated on those GPUs only."""
    report = None if call.fits else parse_gpu_report(call.compiler_text or "")
    taught = {**(state or {}), result.target: (call.backend, scale_of(call, report, result.target))}
    return from_gpu_compile(call, report, result.target), taught


def estimated(site: KernelSite, known: KnownKernel, target: str) -> tuple[Budget | None, list[Diagnostic]]:
    """While typing, a GPU kernel on a GPU it was compiled for: over its shared memory by the
    model, VMEM050 on each staged block that makes it and VMEM051 on the pallas_call, as a
    compile would say; None on a GPU the kernel was never compiled for."""
    if target not in known.learned.get("gpu", {}):
        return None, []
    b = estimate_gpu(site, known, target)
    if b.fits:
        return b, []
    backend, scale = known.learned["gpu"][target]
    over = {
        (op.role, op.index) for op, _, _ in culprits(edited_call(site, known, backend), backend, b.limit, scale, target)
    }
    parts = [p for p in b.parts if ("in" if p.kind == "input_window" else "out", p.index) in over]
    return b, overflow_estimate(site, known, b, parts, ("VMEM050", "VMEM051"))
