"""Map a compiled example back to source: each allocation of a failing
pallas_call to the BlockSpec or scratch entry that caused it, with a message
that says how many bytes, against which limit, on which chip.

Diagnostics leave here as data: each carries its subject (example, call,
part), its facts, and its wording as head + the chip's clause, so chips merge
by subject (diagnostics.merge_targets) and never by text.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import render
from ..budget import culprit_indices
from ..correlate import (
    Anchor,
    Sources,
    call_anchor,
    kernel_label,
    kernel_site,
    line_span,
    scoped_anchor,
    scoped_caller_anchor,
    scoped_entry,
    scratch_anchor,
    scratch_entry,
    spec_anchor,
)
from ..diagnostics import Diagnostic, Related, Subject
from ..render import Wording
from ..results import CapturedCall, ExampleResult, Scoped
from ..source.directives import Example
from ..source.model import Span
from ..source.text import split_lines
from . import layout
from .body_parts import Split, body_parts
from .chips import Chip, chip
from .correlate import operand_for, operand_named, scoped_allocations, scratch_indices
from .parse import error_kind, parse_report
from .parts import Part
from .report import Allocation, Report


@dataclass
class KernelFindings:
    """The diagnostics of one failing pallas_call on one chip."""

    anchor: Anchor
    kernel: str
    parts: list[Part]
    clause: str  # the chip's budget sentence, as the VMEM002 and VMEM004 say it
    facts: dict
    origin: str = "compiler"


RESERVED_SLACK = 1 << 20  # a single allocation's limit this close above the capacity is the same memory


def stated_limit(report: Report, target: Chip) -> tuple[int | None, str | None]:
    """The limit to say, and its printed text: one capacity figure per chip and
    compiler. A single allocation is measured against the whole VMEM (v5p:
    64.00M), the usage reports against what the program may use (63.94M, as
    chips.py has it for that libtpu): the latter is said for both."""
    limit = report.limit
    if (
        report.form == "single_allocation"
        and limit is not None
        and target.capacity
        and target.capacity < limit <= target.capacity + RESERVED_SLACK
    ):
        return target.capacity, render.size(target.capacity)
    return limit, report.limit_text


def report_need(report: Report, target: Chip, limit_source: str | None, asked: int | None = None) -> str:
    """The budget sentence of a compiler report, with the compiler's own figures.
    `asked`: the kernel's vmem_limit_bytes, named when the chip has less."""
    space = (report.memory_space or "vmem").upper()
    if report.form == "single_allocation":
        limit, printed = stated_limit(report, target)
        return render.single_allocation(limit or 0, target.label, space, printed)
    above = asked is not None and target.capacity and asked > target.capacity
    used_limit = report.limit_text or render.size(report.limit or 0)
    return render.needs(
        report.used or 0,
        report.limit or 0,
        target.label,
        scoped=report.limit_kind == "scoped",
        space=space,
        set_in=limit_source,
        over=report.exceeded_by or 0,
        limit_note=render.limit_above_capacity(asked, target.label, target.capacity, used_limit)
        if above and asked is not None
        else None,
        printed=(report.used_text, report.limit_text, report.exceeded_by_text),
        room=raised_limit(report.used or 0, target) if report.limit_kind == "scoped" else None,
    )


def raised_limit(used: int, target: Chip) -> str | None:
    """The vmem_limit_bytes that gives a scoped overflow room, where the chip has it: what the
    raise-the-limit fix writes (tpu/fixes.limit_for)."""
    from .fixes import limit_for  # the fix search imports the mapping's world; only this is needed

    limit = limit_for(used, target.capacity)
    if limit is None:
        return None
    return f"{target.label} has {render.size(target.capacity)}: vmem_limit_bytes={limit // (1 << 20)} MiB gives it room"


def held_in_program(call: CapturedCall, report: Report, target: Chip) -> list[tuple[str, int]]:
    """(operand, window bytes) of the windows XLA may drop when it compiles
    the kernel inside the example's program, if dropping them could turn the
    scoped overflow into a fit: operands whose whole arrays fit together in
    what the scoped limit leaves of the chip's VMEM, which XLA can keep there
    outside the limit, with no window (bench/MODEL.md, isolated against whole
    program: an add kernel fed by XLA needed 24.00M of 16.00M on v5e alone and
    16.00M in its program; 15 of 19 such probes flipped on v5e, each by whole
    windows). Empty when the overflow exceeds all such windows together."""
    room = target.capacity - (report.limit or 0)  # only what the program makes or uses can be kept
    costs = {(c.kind, c.index): c.bytes for c in layout.window_costs(call, target.name)}
    candidates = []
    for op in call.operands:
        window = costs.get(("input_window" if op.role == "in" else "output_window", op.index), 0)
        # Inputs only: of the outputs a program uses, paged attention's (4.0K over on v6e) needed
        # as much in its program as alone, while each input made by the program was kept.
        if op.role == "in" and (op.role, op.index) in call.in_program and layout.in_vmem(op.memory_space) and window:
            candidates.append((render.operand(op.role, op.index), window, layout.padded_bytes(op.dtype, op.full_shape)))
    held = []
    for name, window, whole in sorted(candidates, key=lambda c: -c[1]):  # the arrays held must fit together
        if whole <= room:
            held.append((name, window))
            room -= whole
    over = (report.used or 0) - (report.limit or 0)
    return held if held and over <= sum(w for _, w in held) else []


def allocation_name(allocation: Allocation) -> str:
    """An allocation the report does not tie to an operand, by the compiler's
    tag ("scoped memory for ..."). Not its HLO label: that names the tool's
    own jax.jit(lambda ...) wrapper (`_lambda_.1 = custom-call(a_0_.1, ...)`)."""
    if allocation.tag:
        return allocation.tag
    label = allocation.label or ""
    if label and " = " not in label:  # "register allocator spill slots in HLO :: f.1"
        return label
    return f"compiler allocation ({allocation.kind.replace('_', ' ')})"


# ---- one chip's findings -------------------------------------------------------------


def findings_for(
    call: CapturedCall, report: Report, target: Chip, anchor: Anchor, site, sites: Sources
) -> KernelFindings:
    need = report_need(report, target, call.scoped_limit_source, call.vmem_limit_bytes)
    base = {
        "target": target.name,
        "chip": target.label,
        "form": report.form,
        "used": report.used,
        "limit": stated_limit(report, target)[0],
        "reported_limit": report.limit,
        "limit_kind": report.limit_kind,
        "asked": call.vmem_limit_bytes if (call.vmem_limit_bytes or 0) > target.capacity else None,
        "exceeded_by": report.exceeded_by,
        "memory_space": report.memory_space,
    }
    if report.form == "scoped":
        parts = estimated_parts(call, report, target, site, sites, anchor, need, base)
    else:
        scratch = scratch_indices(call, report.allocations)
        scoped = scoped_allocations(call, report.allocations)
        entries = [scoped_entry(call, index) if index is not None else None for index in scoped]
        parts = []
        for number, (a, entry) in enumerate(zip(report.allocations, entries)):
            if entry is not None:
                parts.append(scoped_part(a, entry, sites, anchor, need, base))
            elif a.kind == "spill" and (values := spilled_values(call, a, target, site, sites, anchor, need, base)):
                parts.extend(values)
            else:
                parts.append(reported_part(number, a, scratch[number], call, site, sites, anchor, need, base))
    clause = need
    if report.form == "single_allocation":
        clause += f" ({render.SINGLE_ALLOCATION_NOTE})"
    if report.form == "scoped" and call.in_program and (held := held_in_program(call, report, target)):
        clause += f" ({render.alone_note(held, (report.used or 0) - (report.limit or 0))})"
    name = kernel_label(call)
    return KernelFindings(anchor, name, parts, clause, {**base, "kernel": name})


def spilled_values(call, allocation: Allocation, target: Chip, site, sites: Sources, anchor, need, base) -> list[Part]:
    """The spill slots a report lists, split into the body's values that make them (tpu/body_parts),
    the rest kept as spill slots; empty without a body account."""
    split = Split(allocation.size, "register allocator spill slots", "spill")
    return body_parts(call, split, target.name, site, sites, anchor, need, {**base, "tag": allocation.tag}, False)


def reported_part(
    number: int, allocation: Allocation, scratch: int | None, call, site, sites, anchor, need, base
) -> Part:
    """An allocation the compiler listed, at the BlockSpec or scratch entry that made it."""
    facts = {
        **base,
        "kind": allocation.kind,
        "operand": allocation.operand_index,
        "size": allocation.size,
        "unpadded_size": allocation.unpadded_size,
        "buffers": allocation.buffers,
        "window_shape": str(allocation.window_shape) if allocation.window_shape else None,
        "full_shape": str(allocation.full_shape) if allocation.full_shape else None,
        "estimated": False,
    }
    printed = allocation.size_text
    if allocation.kind in ("input_window", "output_window", "smem_prefetch"):
        op = operand_for(call, allocation)
        where = spec_anchor(op, site, sites.sites_of, anchor) if op and op.role != "prefetch" else anchor
        name = render.operand(op.role, op.index) if op else allocation.kind.replace("_", " ")
        shape = (
            str(allocation.window_shape)
            if allocation.window_shape
            else render.shape(op.dtype, op.block_shape or op.full_shape)
            if op
            else ""
        )
        wording = render.part(
            f"{name} window {shape}", allocation.size, need, buffers=allocation.buffers, printed=printed
        )
        facts.update(role=op.role if op else None, index=op.index if op else None)
        return Part(where, "VMEM001", name, wording, facts)
    if allocation.kind == "scratch" and scratch is not None:  # scratch_indices numbers every scratch allocation
        index = scratch
        entry = scratch_entry(call, index)
        label = render.scratch(index, entry.dtype, entry.shape) if entry else render.scratch(index)
        facts.update(role="scratch", index=index)
        return Part(
            scratch_anchor(index, call, site, sites.sites_of, anchor),
            "VMEM001",
            f"scratch {index}",
            render.part(label, allocation.size, need, printed=printed),
            facts,
        )
    if allocation.kind == "spill":
        return Part(anchor, "VMEM003", "spill", render.spill(allocation.size, need, printed), facts)
    wording = render.allocation(allocation_name(allocation), allocation.size, need, printed)
    return Part(anchor, "VMEM003", f"allocation {number}", wording, facts)


def scoped_part(allocation: Allocation, entry: Scoped, sites, anchor, need, base) -> Part:
    """A "scoped memory for <kernel>" allocation matched to the body's buffer
    (a pipeline window, a run_scoped entry), at the inner BlockSpec or VMEM(...)."""
    index = entry.index
    facts = {
        **base,
        "kind": entry.kind,
        "index": index,
        "window": entry.window,
        "size": allocation.size,
        "buffers": entry.buffers,
        "window_shape": render.shape(entry.dtype, entry.block_shape),
        "estimated": False,
        "tag": allocation.tag,
    }
    label = render.cost_label(entry.kind, index, entry.dtype, entry.block_shape, entry.window)
    buffers = entry.buffers if entry.kind != "run_scoped" else None
    return Part(
        scoped_anchor(entry, sites.sites_of, sites.text, anchor),
        "VMEM001",
        f"scoped {index}",
        render.part(label, allocation.size, need, buffers=buffers, printed=allocation.size_text),
        facts,
        scoped_related(entry, sites, label),
    )


def scoped_related(entry: Scoped, sites: Sources, label: str) -> tuple[Related, ...]:
    """The call of the helper that made a pipeline window's inner BlockSpec,
    as related information: the window is marked where the spec is made (in
    the helper), and this says which call of it gave the window its shape."""
    at = scoped_caller_anchor(entry, sites.text)
    return (Related(at.path, at.span, render.made_by_call(label)),) if at is not None else ()


def cost_place(cost: layout.WindowCost, call: CapturedCall, site, sites: Sources, anchor: Anchor):
    """Where a buffer the model priced is marked, its label and subject, the
    operand of a window, and related information (a helper's call)."""
    label = render.cost_label(cost.kind, cost.index, cost.dtype, cost.shape)
    if cost.kind == "scratch":
        return scratch_anchor(cost.index, call, site, sites.sites_of, anchor), label, f"scratch {cost.index}", None, ()
    if cost.kind in layout.SCOPED_KINDS:
        entry = scoped_entry(call, cost.index)
        if entry is None:
            return anchor, label, f"scoped {cost.index}", None, ()
        label = render.cost_label(cost.kind, cost.index, cost.dtype, cost.shape, entry.window)
        where = scoped_anchor(entry, sites.sites_of, sites.text, anchor)
        return where, label, f"scoped {cost.index}", None, scoped_related(entry, sites, label)
    role = "in" if cost.kind == "input_window" else "out"
    op = next(o for o in call.operands if o.role == role and o.index == cost.index)
    return spec_anchor(op, site, sites.sites_of, anchor), label, render.operand(role, cost.index), op, ()


def estimated_parts(call, report, target, site, sites, anchor, need, base) -> list[Part]:
    """E1001 gives only a total: split it with the layout model and say so."""
    costs = layout.window_costs(call, target.name)
    modelled = sum(c.bytes for c in costs)
    remainder = (report.used or 0) - modelled
    parts = []
    for cost in costs:
        facts = {
            **base,
            "kind": cost.kind,
            "index": cost.index,
            "operand": cost.operand,
            "size": cost.bytes,
            "buffers": cost.buffers,
            "window_shape": render.shape(cost.dtype, cost.shape),
            "estimated": True,
        }
        where, label, subject, op, related = cost_place(cost, call, site, sites, anchor)
        if op is not None:
            facts["full_shape"] = render.shape(op.dtype, op.full_shape)
        parts.append(
            Part(
                where,
                "VMEM001",
                subject,
                render.part(label, cost.bytes, need, buffers=cost.buffering, note=render.ESTIMATED_SPLIT),
                facts,
                related,
            )
        )
    if remainder > 0:
        wording = render.internal_remainder(remainder, modelled, need)
        parts.extend(internal_parts(call, remainder, target, site, sites, anchor, need, base, False, wording))
    return parts


def internal_parts(
    call, internal: int, target: Chip, site, sites: Sources, anchor: Anchor, need, base, estimated: bool, whole: Wording
) -> list[Part]:
    """The compiler's internal scratch (or the model's estimate of it) on the body lines whose
    values make it (tpu/body_parts), the rest on the pallas_call; without a body account, one
    VMEM003 on the pallas_call worded `whole`."""
    return body_parts(call, Split(internal), target.name, site, sites, anchor, need, base, estimated) or [
        Part(anchor, "VMEM003", "internal", whole, {**base, "kind": "internal", "size": internal, "estimated": True})
    ]


def model_findings(call: CapturedCall, target: Chip, anchor: Anchor, site, sites: Sources) -> KernelFindings | None:
    """Without a compiler (--no-compile, or no libtpu): the layout model's
    verdict, every figure marked as its estimate. None when it fits."""
    from .budget import from_compile

    b = from_compile(call, None, target)
    if b.total <= b.limit:
        return None
    need = render.needs(
        b.total,
        b.limit,
        target.label,
        scoped=True,
        set_in=call.scoped_limit_source,
        over=b.total - b.limit,
        approx=True,
        note=render.NOT_COMPILED,
    )
    base = {
        "target": target.name,
        "chip": target.label,
        "form": "model",
        "used": b.total,
        "limit": b.limit,
        "limit_kind": "scoped",
        "exceeded_by": b.total - b.limit,
        "memory_space": "vmem",
    }
    internal = next((p.bytes for p in b.parts if p.kind == "internal"), 0)
    wording = render.internal_estimate(internal, need)
    parts = internal_parts(call, internal, target, site, sites, anchor, need, base, True, wording) if internal else []
    for cost in layout.window_costs(call, target.name):
        where, label, subject, _, related = cost_place(cost, call, site, sites, anchor)
        parts.append(
            Part(
                where,
                "VMEM001",
                subject,
                render.part(label, cost.bytes, need, buffers=cost.buffering, approx=True),
                {
                    **base,
                    "kind": cost.kind,
                    "index": cost.index,
                    "size": cost.bytes,
                    "buffers": cost.buffers,
                    "estimated": True,
                },
                related,
            )
        )
    name = kernel_label(call)
    return KernelFindings(anchor, name, parts, need, {**base, "kernel": name}, origin="model")


# ---- an example's diagnostics on one chip -------------------------------------------------


def diagnostics(example: Example, result: ExampleResult, sites: Sources) -> list[Diagnostic]:
    """All diagnostics one example's result (no error) on one chip gives."""
    target = chip(result.target, result.libtpu)
    found = []
    for number, call in enumerate(result.calls):
        site = kernel_site(call, sites.sites_of)
        anchor = call_anchor(call, site, Anchor(example.path, example.span))
        if call.other_platform:  # said by the core, as for every family (unchecked.other_platform)
            continue
        if call.interpret:
            found.append(interpreted(call, target, anchor, example, number))
            continue
        if call.compiled and call.fits:
            found.append(fitting(call, target, anchor, example, number))
            continue
        if not call.compiled:
            findings = model_findings(call, target, anchor, site, sites)
            if findings is not None:
                found.extend(link(findings, example, number, target))
            else:
                found.extend(
                    lower_bound(call, target, anchor, example, number)
                    or [fitting(call, target, anchor, example, number)]
                )
            continue
        report = parse_report(call.compiler_text or "")
        if report.form == "block_shape":
            found.extend(block_shape_error(call, report, target, anchor, site, sites, example, number))
            continue
        if report.form == "unknown":
            found.extend(unknown_report(call, anchor, report, target, example, number, sites))
            continue
        found.extend(link(findings_for(call, report, target, anchor, site, sites), example, number, target))
    return found


def limit_source(call: CapturedCall) -> str | None:
    """Where the scoped limit a kernel was checked against was set, in words; None: the chip's default."""
    if call.vmem_limit_bytes:
        return "set by vmem_limit_bytes"
    if call.scoped_limit_source:
        return f"set in {call.scoped_limit_source}"
    return None


def fitting(call: CapturedCall, target: Chip, anchor: Anchor, example: Example, number: int) -> Diagnostic:
    """VMEM007, information: a kernel that fits, with what was checked (its grid, blocks and
    buffering) and the layout model's figures (a kernel that fits gets none from the compiler).
    JSON always has it; text shows it with --show-fits; the editor has its hover instead."""
    from .budget import from_compile

    b = from_compile(call, None, target)
    scoped = b.limit_kind == "scoped"
    costs = layout.window_costs(call, target.name)
    blocks = [(c.kind, render.fit_label(c.kind, c.index, c.dtype, c.shape), c.buffering) for c in costs]
    clause = render.fit_clause(
        b.total, b.limit, target.label, scoped=scoped, limit_from=limit_source(call), estimated=True
    )
    wording = render.fits(kernel_label(call), call.grid, blocks, clause)
    facts = {
        "target": target.name,
        "chip": target.label,
        "fits": True,
        "compiled": call.compiled,
        "estimated": True,
        "used": b.total,
        "limit": b.limit,
        "limit_kind": b.limit_kind,
        "limit_from": limit_source(call) or "the chip's default",
        "capacity": target.capacity,
        "grid": list(call.grid),
        "blocks": [
            {
                "kind": c.kind,
                "index": c.index,
                "dtype": c.dtype,
                "shape": list(c.shape),
                "buffers": c.buffers,
                "bytes": c.bytes,
            }
            for c in costs
        ],
        "kernel": kernel_label(call),
        "example": str(example.key),
    }
    return Diagnostic(
        anchor.path,
        anchor.span,
        "information",
        "VMEM007",
        wording.text(),
        target.name,
        "compiler" if call.compiled else "model",
        (Related(example.path, example.span, f"example {example.text}"),),
        facts,
        Subject(example.key, number, "fits"),
        wording,
    )


def interpreted(call: CapturedCall, target: Chip, anchor: Anchor, example: Example, number: int) -> Diagnostic:
    """VMEM014: the example ran the kernel in interpret mode, which only the CPU runs."""
    message = render.interpret_mode(kernel_label(call))
    return Diagnostic(
        anchor.path,
        anchor.span,
        "warning",
        "VMEM014",
        message,
        target.name,
        "compiler",
        (Related(example.path, example.span, f"example {example.text}"),),
        {"target": target.name, "kernel": kernel_label(call), "example": str(example.key)},
        Subject(example.key, number, "interpret"),
        Wording(message, "", "", ""),
    )


def lower_bound(call: CapturedCall, target: Chip, anchor: Anchor, example: Example, number: int) -> list[Diagnostic]:
    """The model's "fits" with a warning where the body computes a value it
    cannot place that could make it overflow: never a silent pass. On the
    line that computes it, else the pallas_call."""
    from .budget import from_compile

    b = from_compile(call, None, target)
    unseen = layout.unseen_could_overflow(call, b.total, b.limit, target.name)
    if unseen is None:
        return []
    need = render.needs(
        b.total, b.limit, target.label, scoped=b.limit_kind == "scoped", set_in=call.scoped_limit_source, approx=True
    )
    where = Anchor(unseen.origin.file, line_span(unseen.origin.line)) if unseen.origin is not None else anchor
    wording = render.lower_bound(unseen.what, unseen.bytes, need)
    return [
        Diagnostic(
            where.path,
            where.span,
            "warning",
            "VMEM006",
            wording.text(),
            target.name,
            "model",
            (Related(anchor.path, anchor.span, f"pallas_call {kernel_label(call)}"),),
            {
                "target": target.name,
                "estimated": True,
                "used": b.total,
                "limit": b.limit,
                "unseen": unseen.what,
                "unseen_size": unseen.bytes,
                "example": str(example.key),
            },
            Subject(example.key, number, "unseen"),
            wording,
        )
    ]


def culprits(parts: list[Part], over: int | None, used: int | None) -> set[int]:
    """The parts that make the overflow (budget.culprit_indices over their sizes)."""
    return culprit_indices([p.facts.get("size") for p in parts], over, used)


def link(k: KernelFindings, example: Example, call: int, target: Chip) -> list[Diagnostic]:
    """The parts that make the overflow (culprits), the kernel's total (VMEM002)
    and the example's verdict (VMEM004), each pointing at the others. The
    other parts are related information of the total, not errors of their own."""
    directive = Related(example.path, example.span, f"example {example.text}")
    total = render.kernel_total(k.kernel, k.clause)
    at_call = Related(k.anchor.path, k.anchor.span, total.text())
    which = {"example": str(example.key)}
    k.facts.update(which)
    subject = lambda part: Subject(example.key, call, part)
    chosen = culprits(k.parts, k.facts.get("exceeded_by"), k.facts.get("used"))
    small = tuple(
        Related(p.where.path, p.where.span, f"{p.wording.text()} (too small to close the gap alone)")
        for n, p in enumerate(k.parts)
        if n not in chosen
    )
    out = [
        Diagnostic(
            p.where.path,
            p.where.span,
            "error",
            p.code,
            p.wording.text(),
            target.name,
            "model" if p.facts.get("estimated") else "compiler",
            (at_call, directive, *p.related),
            {**p.facts, **which},
            subject(p.subject),
            p.wording,
        )
        for n, p in enumerate(k.parts)
        if n in chosen
    ]
    parts = (*(Related(d.path, d.span, d.message) for d in out), *small)
    out.append(
        Diagnostic(
            k.anchor.path,
            k.anchor.span,
            "error",
            "VMEM002",
            total.text(),
            target.name,
            "compiler",
            (*parts, directive),
            k.facts,
            subject("kernel"),
            total,
        )
    )
    verdict = render.example_total(
        k.kernel, render.at_from(k.anchor.path, k.anchor.span.start_line, example.path), k.clause
    )
    out.append(
        Diagnostic(
            example.path,
            example.span,
            "error",
            "VMEM004",
            verdict.text(),
            target.name,
            "compiler",
            (at_call,),
            k.facts,
            subject("example"),
            verdict,
        )
    )
    if k.origin == "model":
        out = [replace(d, origin="model", facts={**d.facts, "estimated": True}) for d in out]
    return out


def block_shape_error(
    call: CapturedCall,
    report: Report,
    target: Chip,
    anchor: Anchor,
    site,
    sites: Sources,
    example: Example,
    number: int,
) -> list[Diagnostic]:
    """VMEM030 on the BlockSpec of the operand the compiler names (jax's
    "Block spec for args[0]", Mosaic's "Failed to set window params for input
    0"), one per cause across chips, and the directive's summary. The
    compiler's whole text stays in the facts."""
    op = operand_named(call, report.operand_kind, report.operand_index, report.operand_path)
    text = report.text.strip()
    first = text.splitlines()[0] if text else ""
    if op is not None and op.role != "prefetch" and op.block_shape is not None:
        where = spec_anchor(op, site, sites.sites_of, anchor)
        label = render.operand(op.role, op.index)
        head = block_not_tiling(label, op.block_shape, op.dtype, op.full_shape)
        short = render.block_summary(label, op.block_shape, render.at(where.path, where.span.start_line))
        part = label
    else:
        where, head, part = anchor, render.block_rejected(first), "block"
        short = f"example does not compile: {head} at {render.at(where.path, where.span.start_line)}"
    facts = {
        "target": target.name,
        "form": report.form,
        "error_code": report.error_code,
        "text": report.text,
        "operand": part,
        "example": str(example.key),
    }
    at_spec = render.fails_on(head, target.label)
    summary = render.fails_on(short, target.label)
    directive = Related(example.path, example.span, f"example {example.text}")
    return [
        Diagnostic(
            where.path,
            where.span,
            "error",
            "VMEM030",
            at_spec.text(),
            target.name,
            "compiler",
            (directive, Related(anchor.path, anchor.span, f"pallas_call {kernel_label(call)}")),
            facts,
            Subject(example.key, number, f"block {part}"),
            at_spec,
        ),
        Diagnostic(
            example.path,
            example.span,
            "error",
            "VMEM030",
            summary.text(),
            target.name,
            "compiler",
            (Related(where.path, where.span, head),),
            facts,
            Subject(example.key, number, "example"),
            summary,
        ),
    ]


# The code of a compile error on a kernel-body line, by its kind (report.parse.error_kind).
# Alignment is the third form of block shape vs tiling (E2003), on the index that is not aligned.
BODY_CODES = {"alignment": "VMEM030", "dtype": "VMEM032", "memory_space": "VMEM033", "partitioning": "VMEM034"}


def unknown_report(
    call: CapturedCall, anchor: Anchor, report: Report, target: Chip, example: Example, number: int, sites: Sources
) -> list[Diagnostic]:
    """A compile error that is no VMEM report: VMEM031 on the kernel-body
    line it is about (the worker's call.error_origin: Mosaic's loc(...), or
    the line of the primitive the lowering does not implement), else VMEM011
    at the pallas_call; the compiler's text whole, once for all chips."""
    text = report.text.strip()
    facts = {
        "target": target.name,
        "form": report.form,
        "error_code": report.error_code,
        "text": report.text,
        "example": str(example.key),
    }
    origin = call.error_origin
    kind = error_kind(text)
    facts["kind"] = kind
    if origin is not None:
        where = Anchor(origin.file, line_text_span(sites.text(origin.file), origin.line))
        head, code = render.body_rejected(text, kind), BODY_CODES.get(kind, "VMEM031")
    elif kind == "partitioning":
        where, head, code = anchor, render.body_rejected(text, kind), "VMEM034"
    else:
        where, head, code = anchor, render.rejected_whole(text), "VMEM011"
    at_line = render.fails_on(head, target.label)
    summary = render.fails_on(
        render.example_rejected_at(render.at(where.path, where.span.start_line), render.key_line(text)), target.label
    )
    whole = (Related(where.path, where.span, f"{target.label}: {text}"),) if code != "VMEM011" else ()
    return [
        Diagnostic(
            where.path,
            where.span,
            "error",
            code,
            at_line.text(),
            target.name,
            "compiler",
            (Related(anchor.path, anchor.span, f"pallas_call {kernel_label(call)}"), *whole),
            facts,
            Subject(example.key, number, "rejected"),
            at_line,
        ),
        Diagnostic(
            example.path,
            example.span,
            "error",
            code,
            summary.text(),
            target.name,
            "compiler",
            (Related(where.path, where.span, "where the compiler rejects it"),),
            facts,
            Subject(example.key, number, "example"),
            summary,
        ),
    ]


def line_text_span(text: str | None, line: int) -> Span:
    """A line's written text, from its first non-blank character: where a body error is marked."""
    lines = split_lines(text or "")
    if not 0 < line <= len(lines):
        return line_span(line)
    written = lines[line - 1]
    return Span(line, len(written) - len(written.lstrip()), line, len(written.rstrip()))


def block_not_tiling(label: str, block, dtype: str, full) -> str:
    """VMEM030's head for an operand the error names."""
    rows, lanes = layout.tile(dtype)
    written = f"{label} block ({', '.join(map(str, block))}) of {render.shape(dtype, full)} does not tile"
    if len(block) == 1:  # err-block-rank1-v6e
        return (
            f"{written}: a rank-1 block must be the whole array, a multiple of 1024, or a power of 2 of "
            f"at least {lanes}"
        )
    return (
        f"{written}: its last two dimensions must be multiples of ({rows}, {lanes}) for {dtype}, or the "
        f"array's whole dimensions"
    )
