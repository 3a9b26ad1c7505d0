"""A sweep's configs on a GPU: the staged blocks' bytes against the target's shared memory,
for the table and monotonicity; the compiler decides every config (the model has no measured
error on GPUs yet), and its requested and available bytes are the figures of one that overflows."""

from __future__ import annotations

from collections.abc import Sequence

from ..family import SweepSize
from ..results import CapturedCall, ExampleResult
from ..sweep.decide import Config, Verdict, error_verdict
from .layout import block_bytes, estimated_shared_memory, staged
from .report import parse_gpu_report
from .targets import gpu


def size(calls: Sequence[CapturedCall], target: str) -> SweepSize:
    total = max((estimated_shared_memory(c, c.backend, target) for c in calls), default=0)
    costs = tuple(
        (c.name, tuple(sorted(("block", op.role, op.index, block_bytes(op)) for op in staged(c, "mosaic_gpu"))))
        for c in calls
    )
    return SweepSize(total, gpu(target).shared_memory_limit, None, costs)


def verdict(item: Config, result: ExampleResult) -> Verdict:
    """What the GPU compiler said: fits, over its shared memory (its requested and
    available bytes), or another error."""
    failing = [c for c in result.calls if not c.fits]
    if not failing:
        return Verdict(item.config, item.target, True, item.model_total, item.model_limit, "compiler", "compiled")
    report = parse_gpu_report(failing[0].compiler_text or "")
    if report.form != "shared_memory":
        return error_verdict(item, failing[0].compiler_text)
    return Verdict(item.config, item.target, False, report.requested, report.available, "compiler", "compiled")
