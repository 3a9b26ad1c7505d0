"""A kernel's VMEM budget on one TPU chip: what each window and scratch buffer takes, the
compiler-internal remainder, the total against the limit.

Two sources: a compile (the compiler's figures where its report lists them, the layout
model's split where it gives only a total) and, while the user types, an estimate from the
last compile's shapes with the edited literals (VMEM001/002 over the limit, VMEM006 when
what the model cannot place could overflow it, VMEM005 near it). Pure functions over plain data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import render
from ..budget import (
    Budget,
    KnownKernel,
    Part,
    edited_operand,
    headroom_warning,
    literal_limit,
    literal_shape,
    needs_text,
    overflow_estimate,
)
from ..correlate import scoped_entry
from ..diagnostics import Diagnostic
from ..results import CapturedCall, ExampleResult, Unseen
from ..source.model import KernelSite, Span
from . import layout
from .chips import Chip, chip
from .correlate import part_indices
from .parse import parse_report
from .report import Report


def part_for_cost(cost: layout.WindowCost, call: CapturedCall) -> Part:
    """A priced buffer as the budget table lists it, labelled as its diagnostic
    is (a pipeline window by its place in its pipeline: "pipeline input 0 window")."""
    entry = scoped_entry(call, cost.index) if cost.kind in layout.SCOPED_KINDS and cost.index is not None else None
    label = render.cost_label(cost.kind, cost.index, cost.dtype, cost.shape, entry.window if entry else None)
    return Part(cost.kind, cost.index, label, cost.bytes, cost.buffering, True)


def scoped_limit(call: CapturedCall, target: Chip) -> int:
    """The kernel's own vmem_limit_bytes, else the limit the compile ran under
    (a setting, LIBTPU_INIT_ARGS), else the chip's default."""
    return min(call.vmem_limit_bytes or call.scoped_limit or target.scoped_limit, target.capacity)


def budget(target: Chip, parts, total: int, limit: int, kind: str, source: str, fits: bool) -> Budget:
    return Budget(target.name, tuple(parts), total, limit, kind, target.capacity, source, fits, target.label, "VMEM")


def from_compile(
    call: CapturedCall, report: Report | None, target_name: str | Chip, libtpu: str | None = None
) -> Budget:
    """The budget a compile established: exact where the report lists allocations. The chip's
    figures are `libtpu`'s (or those of the Chip given)."""
    target = target_name if isinstance(target_name, Chip) else chip(target_name, libtpu)
    costs = [part_for_cost(c, call) for c in layout.window_costs(call, target.name)]
    modelled = sum(p.bytes for p in costs)
    if report is None or report.form not in ("physical", "scoped", "single_allocation"):
        internal = layout.internal_estimate(call, target.name)
        parts = (*costs, *((internal_part(internal, "compiler-internal (model estimate)"),) if internal else ()))
        return budget(target, parts, modelled + internal, scoped_limit(call, target), "scoped", "model", report is None)
    if report.form == "physical":
        listed = tuple(
            Part(a.kind, index, render.allocation_label(a), a.size, a.buffers, False)
            for a, index in zip(report.allocations, part_indices(call, report.allocations))
        )
        total = report.used or sum(p.bytes for p in listed)
        return budget(target, listed, total, report.limit or target.capacity, "physical", "compiler", False)
    if report.form == "scoped":
        remainder = (report.used or modelled) - modelled
        unlisted = (internal_part(remainder, "compiler-internal"),) if remainder > 0 else ()
        limit = report.limit or scoped_limit(call, target)
        return budget(target, (*costs, *unlisted), report.used or modelled, limit, "scoped", "compiler", False)
    return budget(target, costs, modelled, report.limit or target.capacity, "physical", "model", False)


def internal_part(size: int, label: str) -> Part:
    return Part("internal", None, label, size, None, True)


# ---- estimates while typing ---------------------------------------------------------


@dataclass(frozen=True)
class Learned:
    """What compiles on TPU chips taught of a kernel: the compiler-internal bytes each chip
    added last, and the libtpu that compiled it (its chip figures bound the estimate)."""

    internal: dict = field(default_factory=dict)  # chip -> compiler-internal bytes last seen
    libtpu: str | None = None


def learn(call: CapturedCall, result: ExampleResult, state: Learned | None) -> tuple[Budget, Learned]:
    """The budget a compile on a chip established, and what it adds to what earlier ones taught."""
    report = None if call.fits else parse_report(call.compiler_text or "")
    compiled = from_compile(call, report, result.target, result.libtpu)
    internal = dict(state.internal) if state else {}
    if (part := next((p for p in compiled.parts if p.kind == "internal"), None)) is not None:
        internal[result.target] = part.bytes
    return compiled, Learned(internal, result.libtpu)


def estimate(site: KernelSite, known: KnownKernel, target_name: str) -> Budget:
    """The budget of the site as it is written now, from the last compile's
    dtypes and array shapes and the literals the user has since typed."""
    state = known.learned.get("tpu") or Learned()
    target = chip(target_name, state.libtpu)
    call = known.call
    operands = tuple(edited_operand(op, site, known) for op in call.operands)
    limit = literal_limit(site) or call.vmem_limit_bytes
    grid = literal_shape(site.grid, known.names) if site.grid is not None else None
    edited = CapturedCall(
        **{
            **vars(call),
            "operands": operands,
            "vmem_limit_bytes": limit,
            "grid": grid if grid is not None else call.grid,
        }
    )
    parts = [part_for_cost(c, edited) for c in layout.window_costs(edited, target.name)]
    internal = state.internal.get(target.name)
    label = "compiler-internal (last compile)"
    if internal is None:
        internal, label = layout.internal_estimate(edited, target.name), "compiler-internal (model estimate)"
    if internal:
        parts.append(internal_part(internal, label))
    total = sum(p.bytes for p in parts)
    scoped = scoped_limit(edited, target)
    limit, kind = (scoped, "scoped") if scoped < target.capacity else (target.capacity, "physical")
    return budget(target, parts, total, limit, kind, "model", total <= limit)


def estimated(
    site: KernelSite, known: KnownKernel, target: str, headroom: float
) -> tuple[Budget | None, list[Diagnostic]]:
    """A site as typed now on a chip: errors where it would not fit, a warning where what the
    model cannot place could overflow it, or where it fits with less than `headroom` free.
    None for a kernel never compiled or traced for a TPU chip (a GPU kernel)."""
    if "tpu" not in known.learned:
        return None, []
    b = estimate(site, known, target)
    if not b.fits:
        return b, overflow_estimate(
            site, known, b, [p for p in b.parts if p.kind != "internal"], ("VMEM001", "VMEM002")
        )
    if (unseen := layout.unseen_could_overflow(known.call, b.total, b.limit, target)) is not None:
        return b, [lower_bound_warning(site, b, unseen)]
    if b.headroom() < headroom:
        return b, [headroom_warning(site, b, estimated=True)]
    return b, []


def lower_bound_warning(site: KernelSite, b: Budget, unseen: Unseen) -> Diagnostic:
    """VMEM006 while typing: on the line that computes the value when it is in this file."""
    here = unseen.origin is not None and unseen.origin.file == site.path
    span = Span(unseen.origin.line, 0, unseen.origin.line, 0) if here and unseen.origin else site.name_span
    wording = render.lower_bound(unseen.what, unseen.bytes, needs_text(b))
    return Diagnostic(
        site.path,
        span,
        "warning",
        "VMEM006",
        wording.text(),
        b.target,
        "model",
        facts={"estimated": True, "total": b.total, "limit": b.limit, "unseen": unseen.what},
    )
