"""A Pallas GPU kernel's shared memory on one GPU target, as a Budget (the
table the hover, the inlay hints and the static tier show): the blocks its
backend stages, their total by the compiler when it refused the kernel, else
by the model (gpu_layout.py), and the target's limit per block. While the
user types, the model of the edited blocks scaled by what the last compile
said over the model's figure, as the fix search scales its candidates.
Pure functions over plain data."""

from __future__ import annotations

from dataclasses import replace

from ..budget import Budget, KnownKernel, Part, edited_operand
from ..results import CapturedCall
from ..source.model import KernelSite
from .layout import block_bytes, estimated_shared_memory, staged
from .report import GpuReport
from .targets import gpu

SHARED = "shared"  # Budget.limit_kind of a GPU's shared memory per block


def parts_of(call: CapturedCall, backend: str | None) -> tuple[Part, ...]:
    """The staged blocks, each with its bytes (the model's: the compiler gives only the total)."""
    return tuple(
        Part(
            "input_window" if op.role == "in" else "output_window",
            op.index,
            f"{'input' if op.role == 'in' else 'output'} {op.index} block "
            f"{op.dtype}[{','.join(map(str, op.block_shape or ()))}]",
            block_bytes(op),
            None,
            True,
        )
        for op in staged(call, backend)
    )


def culprits(call: CapturedCall, backend: str | None, limit: int, scale: float = 1.0) -> list:
    """The staged blocks that make a kernel over `limit`: every one for Mosaic GPU
    (their sum is the request); for Triton, which holds one at a time, those over
    the limit alone (scaled to the compiler's request), else the largest."""
    blocks = staged(call, backend)
    if backend == "mosaic_gpu" or not blocks:
        return blocks
    over = [op for op in blocks if block_bytes(op) * scale > limit]
    return over or [max(blocks, key=block_bytes)]


def from_gpu_compile(call: CapturedCall, report: GpuReport | None, target_name: str) -> Budget:
    """What a GPU compile established: the compiler's request when it refused
    the kernel over shared memory, else the model's total of the staged blocks."""
    limit = gpu(target_name).shared_memory_limit
    parts = parts_of(call, call.gpu_backend)
    if report is not None and report.form == "shared_memory" and report.requested:
        return Budget(target_name, parts, report.requested, report.available or limit, SHARED, limit, "compiler", False)
    model = estimated_shared_memory(call, call.gpu_backend, target_name)
    return Budget(target_name, parts, model, limit, SHARED, limit, "model", call.fits)


def scale_of(call: CapturedCall, report: GpuReport | None, target_name: str) -> float:
    """The compiler's request over the model's figure, 1 where the compiler gave none."""
    model = estimated_shared_memory(call, call.gpu_backend, target_name)
    if report is None or report.form != "shared_memory" or not report.requested or not model:
        return 1.0
    return report.requested / model


def edited_call(site: KernelSite, known: KnownKernel, backend: str | None) -> CapturedCall:
    """The last compile's call with the block shapes as written now."""
    operands = tuple(edited_operand(op, site, known) for op in known.call.operands)
    return replace(known.call, operands=operands, gpu_backend=backend)


def estimate_gpu(site: KernelSite, known: KnownKernel, target_name: str) -> Budget:
    """The site's shared memory as written now on a GPU target the last compile taught."""
    backend, scale = known.gpu[target_name]
    call = edited_call(site, known, backend)
    limit = gpu(target_name).shared_memory_limit
    total = round(estimated_shared_memory(call, backend, target_name) * scale)
    return Budget(target_name, parts_of(call, backend), total, limit, SHARED, limit, "model", total <= limit)
