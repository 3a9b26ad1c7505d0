"""A sweep's configs on a TPU chip: the layout model's figures of a traced config and
whether it may decide alone (its total further from the limit than its measured error for
that chip and kind of kernel, tpu/model_error.py, and every block tiles legally), and what
the compiler's report says of a compiled one."""

from __future__ import annotations

from collections.abc import Sequence

from ..family import SweepSize
from ..results import CapturedCall, ExampleResult
from ..sweep.decide import Config, Verdict, error_verdict, tightest
from . import layout
from .budget import from_compile
from .model_error import bound, kind_of, model_decides
from .parse import parse_report

VMEM_FORMS = ("physical", "scoped", "single_allocation")


def legal_blocks(call: CapturedCall) -> bool:
    """Every VMEM window tiles as the TPU lowering requires (the model cannot
    see a block shape error; a compile can)."""
    for op in call.operands:
        if op.block_shape is None or not layout.in_vmem(op.memory_space) or op.role == "prefetch":
            continue
        if len(op.block_shape) == 1:
            if op.block_shape[0] != op.full_shape[0] and op.block_shape[0] % 1024:
                return False
            continue
        for size, tile, full in zip(op.block_shape[-2:], layout.tile(op.dtype), op.full_shape[-2:]):
            if size is not None and size != full and size % tile:
                return False
    return True


def exact_bytes(b) -> int:
    """The parts of a model budget it sizes exactly: windows, scratch, scoped buffers, not its internal guess."""
    return sum(p.bytes for p in b.parts if p.kind != "internal")


def costs_of(call: CapturedCall, target: str) -> tuple:
    return tuple(sorted((c.kind, c.index, c.bytes) for c in layout.window_costs(call, target)))


def decides(call: CapturedCall, budget, target: str, libtpu: str | None) -> bool | None:
    """model_decides for one call. A pipeline's windows are not exact: its emit_pipeline buffers,
    which the compiler was measured to size below the model by up to the kind's `high` (v7x: 6.7%
    of the limit; tokamax's ragged_dot with its k axis in one step, 0.88M to 1.75M of 32M less):
    it is over only beyond that."""
    kind = kind_of(call, target)
    found = bound(kind, target, libtpu)
    slack = max(found.high, 0.0) if found is not None and kind == "pipeline" else 0.0
    return model_decides(budget.total, exact_bytes(budget), budget.limit, found, slack)


def size(calls: Sequence[CapturedCall], target: str, libtpu: str | None) -> SweepSize:
    """The model's total, limit and verdict for a traced config, by the bounds and figures
    of the compiler that traced it."""
    budgets = [from_compile(c, None, target, libtpu) for c in calls]
    worst = tightest(budgets)
    says = [None if not legal_blocks(c) else decides(c, b, target, libtpu) for c, b in zip(calls, budgets)]
    decided = False if any(s is False for s in says) else True if says and all(s is True for s in says) else None
    kind = kind_of(calls[0], target) if calls else ""
    why = f"{'under' if decided else 'over'} by more than its error ({kind} kernels)" if decided is not None else ""
    return SweepSize(worst.total, worst.limit, decided, tuple((c.name, costs_of(c, target)) for c in calls), why)


def verdict(item: Config, result: ExampleResult) -> Verdict:
    """What libtpu said: fits (the model's figures), overflows (the report's), or another error."""
    failing = [c for c in result.calls if not c.fits]
    if not failing:
        worst = tightest(from_compile(c, None, item.target, result.libtpu) for c in result.calls)
        return Verdict(item.config, item.target, True, worst.total, worst.limit, "compiler", "compiled")
    reports = [(c, parse_report(c.compiler_text or "")) for c in failing]
    vmem = [(c, r) for c, r in reports if r.form in VMEM_FORMS]
    if len(vmem) < len(reports):
        return error_verdict(item, next(c.compiler_text for c, r in reports if r.form not in VMEM_FORMS))
    call, report = vmem[0]
    b = from_compile(call, report, item.target, result.libtpu)
    return Verdict(item.config, item.target, False, b.total, b.limit, "compiler", "compiled")
