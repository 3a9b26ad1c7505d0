"""How fast a config may run on a TPU chip at best, before the compiler's cycle estimate: a
roofline per grid step from the chip's published peaks (chips.PEAKS), the body's matrix work
and its windows' copies, that screens which configs `sweep --rank speed` estimates."""

from __future__ import annotations

from ..results import CapturedCall, ExampleResult
from .chips import PEAKS, Peak
from .layout import grid_steps, in_vmem, padded_bytes

# What a grid step costs beyond its work (the pipeline's bookkeeping, a DMA's
# issue): measured on the deviceless compiler's estimates (../shared/notes).
STEP_SECONDS = 0.35e-6


def roofline_seconds(call: CapturedCall, peak: Peak) -> float:
    """One pallas_call's time at best: per grid step the larger of its matrix
    work at peak FLOP/s and its windows' copies at HBM bandwidth, plus a step's
    overhead; a window whose block never moves is copied once."""
    steps = grid_steps(call.grid)
    each_step = once = 0
    for op in call.operands:
        if op.role == "prefetch" or not in_vmem(op.memory_space):
            continue
        moved = padded_bytes(op.dtype, op.block_shape if op.block_shape is not None else op.full_shape)
        if op.constant_index:
            once += moved
        else:
            each_step += moved
    compute = (call.flops_per_step or 0) / peak.flops
    return steps * (max(compute, each_step / peak.hbm) + STEP_SECONDS) + once / peak.hbm


def example_seconds(traced: ExampleResult, target: str) -> float | None:
    """The roofline of every pallas_call an example reaches on `target`; None for a chip without figures."""
    peak = PEAKS.get(target)
    if peak is None:
        return None
    return sum(roofline_seconds(call, peak) for call in traced.calls)
