"""Map a compiled example back to source: each allocation of a failing
pallas_call to the BlockSpec or scratch entry that caused it, with a message
that says how many bytes, against which limit, on which chip."""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Callable

from . import layout
from .chips import Chip, chip
from .compile.protocol import CapturedCall, ExampleResult, Operand, Origin
from .diagnostics import Diagnostic, Related
from .report.model import Allocation, Report
from .report.parse import format_size, parse_report
from .source.directives import Example
from .source.locate import LocateResult
from .source.model import BlockSpecSite, KernelSite, ScratchSite, Span

SitesOf = Callable[[str], LocateResult]


@dataclass(frozen=True)
class Anchor:
    path: str
    span: Span


def display_path(path: str) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return path
    return path if relative.startswith("..") else relative


def line_span(line: int) -> Span:
    return Span(line, 0, line, 0)


# ---- finding the source of each part ---------------------------------------------

def kernel_site(call: CapturedCall, sites_of: SitesOf) -> KernelSite | None:
    for origin in (call.call_origin, call.invoke_origin):
        if origin is None:
            continue
        found = [s for s in sites_of(origin.file).sites if s.span.contains_line(origin.line)]
        if found:   # the innermost: a partial's site may contain another
            return min(found, key=lambda s: (s.span.end_line - s.span.start_line))
    return None


def call_anchor(call: CapturedCall, site: KernelSite | None, example: Example) -> Anchor:
    if site is not None:
        return Anchor(site.path, site.name_span)
    origin = call.call_origin or call.invoke_origin
    if origin is not None:
        return Anchor(origin.file, line_span(origin.line))
    return Anchor(example.path, example.span)


def at_origin(candidates, origin: Origin):
    exact = [c for c in candidates if c.span.start_line == origin.line
             and (origin.col is None or c.span.start_col == origin.col)]
    if exact:
        return exact[0]
    return next((c for c in candidates if c.span.contains_line(origin.line)), None)


def spec_anchor(op: Operand, site: KernelSite | None, sites_of: SitesOf, fallback: Anchor) -> Anchor:
    """The block-shape expression of the BlockSpec that made this operand."""
    spec: BlockSpecSite | None = None
    if op.origin is not None:
        located = sites_of(op.origin.file).sites
        spec = at_origin([b for s in located for b in (*s.in_specs, *s.out_specs)], op.origin)
        if spec is None:
            return Anchor(op.origin.file, line_span(op.origin.line))
        path = op.origin.file
    elif site is not None:
        specs = site.in_specs if op.role == "in" else site.out_specs
        spec = next((b for b in specs if b.index == op.index), None)
        path = site.path
    if spec is None:
        return fallback
    return Anchor(path, (spec.block_shape or spec).span)


def scratch_anchor(index: int, call: CapturedCall, site: KernelSite | None, sites_of: SitesOf,
                   fallback: Anchor) -> Anchor:
    entry = layout.scratch_of(call, index)
    found: ScratchSite | None = None
    if entry is not None and entry.origin is not None:
        located = sites_of(entry.origin.file).sites
        found = at_origin([x for s in located for x in s.scratch], entry.origin)
        if found is None:
            return Anchor(entry.origin.file, line_span(entry.origin.line))
        return Anchor(entry.origin.file, found.span)
    if site is not None:
        found = next((x for x in site.scratch if x.index == index), None)
        if found is not None:
            return Anchor(site.path, found.span)
    return fallback


def operand_for(call: CapturedCall, allocation: Allocation) -> Operand | None:
    if allocation.operand_index is None:
        return None
    if allocation.kind == "output_window":
        return next((o for o in call.operands if o.role == "out" and o.index == allocation.operand_index), None)
    return next((o for o in call.operands if o.role in ("in", "prefetch")
                 and o.operand == allocation.operand_index), None)


def scratch_index(call: CapturedCall, allocation: Allocation) -> int:
    """The compiler says "scratch operand" without a number: match by the typed
    shape it prints, else the only scratch entry, else the first."""
    if allocation.operand_index is not None:
        return allocation.operand_index
    shape = allocation.window_shape
    for entry in call.scratch:
        if shape is not None and (entry.dtype, entry.shape) == (shape.dtype, shape.dims):
            return entry.index
    return call.scratch[0].index if call.scratch else 0


# ---- wording ----------------------------------------------------------------------

def buffering(buffers: int | None) -> str:
    return {1: "single buffered", 2: "double buffered"}.get(buffers, f"{buffers} buffers" if buffers else "")


def budget(report: Report, target: Chip, limit_source: str | None = None) -> str:
    """`kernel needs 128.00M of 127.94M VMEM on TPU v6e (over by 64.0K)`; a
    scoped limit that is not the chip's default says where it was set."""
    space = (report.memory_space or "vmem").upper()
    if report.form == "single_allocation":
        return f"one allocation would exceed the {report.limit_text or format_size(report.limit or 0)} of {space} on {target.label}"
    scope = "scoped " if report.limit_kind == "scoped" else ""
    if scope and limit_source:
        space += f" (set in {limit_source})"
    used = report.used_text or format_size(report.used or 0)
    limit = report.limit_text or format_size(report.limit or 0)
    over = report.exceeded_by_text or format_size(report.exceeded_by or 0)
    return f"kernel needs {used} of {limit} {scope}{space} on {target.label} (over by {over})"


def describe_operand(op: Operand) -> str:
    role = {"in": "input", "out": "output", "prefetch": "scalar-prefetch operand"}[op.role]
    return f"{role} {op.index}"


def window_text(dtype: str, shape) -> str:
    return f"{dtype}[{','.join(map(str, shape))}]"


# ---- building diagnostics -------------------------------------------------------

@dataclass
class KernelFindings:
    """The diagnostics of one failing pallas_call before they are linked."""
    anchor: Anchor
    parts: list[tuple[Anchor, str, str, dict]]     # (where, code, message, facts)
    total: str
    facts: dict


def findings_for(call: CapturedCall, report: Report, target: Chip, example: Example,
                 sites_of: SitesOf) -> KernelFindings:
    site = kernel_site(call, sites_of)
    anchor = call_anchor(call, site, example)
    need = budget(report, target, call.scoped_limit_source)
    base = {"target": target.name, "chip": target.label, "form": report.form,
            "used": report.used, "limit": report.limit, "limit_kind": report.limit_kind,
            "exceeded_by": report.exceeded_by, "memory_space": report.memory_space}
    parts = []
    if report.form == "scoped":
        parts = estimated_parts(call, report, target, site, sites_of, anchor, need, base)
    else:
        for allocation in report.allocations:
            parts.append(reported_part(allocation, call, site, sites_of, anchor, need, base))
    name = kernel_label(call)
    total = f"pallas_call {name}: {need}"
    if report.form == "single_allocation":
        total += " (the compiler names only the first allocation that does not fit)"
    return KernelFindings(anchor, parts, total, {**base, "kernel": name})


def reported_part(allocation: Allocation, call, site, sites_of, anchor, need, base):
    size = allocation.size_text or format_size(allocation.size)
    facts = {**base, "kind": allocation.kind, "operand": allocation.operand_index, "size": allocation.size,
             "unpadded_size": allocation.unpadded_size, "buffers": allocation.buffers,
             "window_shape": str(allocation.window_shape) if allocation.window_shape else None,
             "full_shape": str(allocation.full_shape) if allocation.full_shape else None,
             "estimated": False}
    if allocation.kind in ("input_window", "output_window", "smem_prefetch"):
        op = operand_for(call, allocation)
        where = spec_anchor(op, site, sites_of, anchor) if op and op.role != "prefetch" else anchor
        label = describe_operand(op) if op else allocation.kind.replace("_", " ")
        shape = allocation.window_shape or (window_text(op.dtype, op.block_shape or op.full_shape) if op else "")
        how = buffering(allocation.buffers)
        message = f"{label} window {shape} = {size}{', ' + how if how else ''}; {need}"
        facts.update(role=op.role if op else None, index=op.index if op else None)
        return where, "VMEM001", message, facts
    if allocation.kind == "scratch":
        index = scratch_index(call, allocation)
        entry = layout.scratch_of(call, index)
        shape = window_text(entry.dtype, entry.shape) if entry else ""
        message = f"scratch {index} {shape} = {size}; {need}".replace("  ", " ")
        facts.update(role="scratch", index=index)
        return scratch_anchor(index, call, site, sites_of, anchor), "VMEM001", message, facts
    if allocation.kind == "spill":
        message = (f"register allocator spill slots {size}: the kernel body's intermediates grow with "
                   f"the block sizes; {need}")
        return anchor, "VMEM003", message, facts
    message = f"{(allocation.label or allocation.tag or 'allocation').strip()[:120]} = {size}; {need}"
    return anchor, "VMEM003", message, facts


def cost_place(cost: layout.WindowCost, call: CapturedCall, site, sites_of: SitesOf, anchor: Anchor
               ) -> tuple[Anchor, str, Operand | None]:
    """Where a window or scratch the model priced is marked, and its name."""
    shape = window_text(cost.dtype, cost.shape)
    if cost.kind == "scratch":
        return scratch_anchor(cost.index, call, site, sites_of, anchor), f"scratch {cost.index} {shape}", None
    role = "in" if cost.kind == "input_window" else "out"
    op = next(o for o in call.operands if o.role == role and o.index == cost.index)
    return spec_anchor(op, site, sites_of, anchor), f"{describe_operand(op)} window {shape}", op


def buffering_suffix(cost: layout.WindowCost) -> str:
    how = buffering(cost.buffers) if cost.kind != "scratch" else ""
    return f", {how}" if how else ""


def kernel_label(call: CapturedCall) -> str:
    return call.name.split(" ")[0] if call.name else "pallas_call"


def estimated_parts(call, report, target, site, sites_of, anchor, need, base):
    """E1001 gives only a total: split it with the layout model and say so."""
    costs = layout.window_costs(call, target.name)
    modelled = sum(c.bytes for c in costs)
    remainder = (report.used or 0) - modelled
    parts = []
    for cost in costs:
        facts = {**base, "kind": cost.kind, "index": cost.index, "operand": cost.operand,
                 "size": cost.bytes, "buffers": cost.buffers,
                 "window_shape": window_text(cost.dtype, cost.shape), "estimated": True}
        where, label, op = cost_place(cost, call, site, sites_of, anchor)
        if op is not None:
            facts["full_shape"] = window_text(op.dtype, op.full_shape)
        message = (f"{label} = {format_size(cost.bytes)}{buffering_suffix(cost)}; {need} (sizes "
                   f"estimated by the layout model; the compiler gives only the total)")
        parts.append((where, "VMEM001", message, facts))
    if remainder > 0:
        parts.append((anchor, "VMEM003",
                      f"compiler-internal scratch ~ {format_size(remainder)}: the compiler's total less "
                      f"the model's windows and scratch ({format_size(modelled)}); {need}",
                      {**base, "kind": "internal", "size": remainder, "estimated": True}))
    return parts


def diagnostics_for(example: Example, result: ExampleResult, sites_of: SitesOf) -> list[Diagnostic]:
    """All diagnostics one example's result on one target gives."""
    if result.error:
        return [error_diagnostic(example, result)]
    target = chip(result.target)
    found = []
    for call in result.calls:
        if not call.compiled:
            found.extend(model_verdict(call, target, example, sites_of))
            continue
        if call.fits:
            continue
        report = parse_report(call.compiler_text or "")
        if report.form in ("unknown", "block_shape"):
            found.extend(unknown_report(call, report, target, example, sites_of))
            continue
        found.extend(link(findings_for(call, report, target, example, sites_of), example, target))
    return found


def link(k: KernelFindings, example: Example, target: Chip) -> list[Diagnostic]:
    directive = Related(example.path, example.span, f"example {example.text}")
    at_call = Related(k.anchor.path, k.anchor.span, k.total)
    which = {"example": f"{example.path}:{example.line}"}     # for code actions: the fixes of this example
    k.facts.update(which)
    out = [Diagnostic(where.path, where.span, "error", code, message, target.name,
                      "model" if facts.get("estimated") else "compiler",
                      (at_call, directive), {**facts, **which})
           for where, code, message, facts in k.parts]
    parts = tuple(Related(d.path, d.span, d.message) for d in out)
    out.append(Diagnostic(k.anchor.path, k.anchor.span, "error", "VMEM002", k.total, target.name,
                          "compiler", (*parts, directive), k.facts))
    where = f"{display_path(k.anchor.path)}:{k.anchor.span.start_line}"
    out.append(Diagnostic(example.path, example.span, "error", "VMEM004",
                          f"example does not fit: {k.total.replace(': ', f' at {where}: ', 1)}",
                          target.name, "compiler", (at_call,), k.facts))
    return out


def model_verdict(call: CapturedCall, target: Chip, example: Example, sites_of: SitesOf) -> list[Diagnostic]:
    """Without a compiler (--no-compile, or no libtpu): the layout model's
    verdict, every figure marked as its estimate."""
    from .budget import from_compile
    b = from_compile(call, None, target.name)
    if b.total <= b.limit:
        return []
    site = kernel_site(call, sites_of)
    anchor = call_anchor(call, site, example)
    set_in = f" (set in {call.scoped_limit_source})" if call.scoped_limit_source else ""
    need = (f"kernel needs ~{format_size(b.total)} of {format_size(b.limit)} scoped VMEM{set_in} on {target.label} "
            f"(over by ~{format_size(b.total - b.limit)}; layout model estimate, not compiled)")
    base = {"target": target.name, "chip": target.label, "form": "model", "used": b.total, "limit": b.limit,
            "limit_kind": "scoped", "exceeded_by": b.total - b.limit, "memory_space": "vmem"}
    parts = []
    internal = next((p.bytes for p in b.parts if p.kind == "internal"), 0)
    if internal:
        parts.append((anchor, "VMEM003", f"compiler-internal scratch ~ {format_size(internal)} (the model's estimate "
                      f"of the kernel body's spills and intermediates); {need}",
                      {**base, "kind": "internal", "size": internal, "estimated": True}))
    for cost in layout.window_costs(call, target.name):
        where, label, _ = cost_place(cost, call, site, sites_of, anchor)
        facts = {**base, "kind": cost.kind, "index": cost.index, "size": cost.bytes, "buffers": cost.buffers,
                 "estimated": True}
        parts.append((where, "VMEM001", f"{label} ~ {format_size(cost.bytes)}{buffering_suffix(cost)}; {need}",
                      facts))
    name = kernel_label(call)
    findings = KernelFindings(anchor, parts, f"pallas_call {name}: {need}", {**base, "kernel": name})
    return [replace_origin(d, "model") for d in link(findings, example, target)]


def replace_origin(d: Diagnostic, origin: str) -> Diagnostic:
    return replace(d, origin=origin, facts={**d.facts, "estimated": True})


def unknown_report(call, report, target, example, sites_of) -> list[Diagnostic]:
    anchor = call_anchor(call, kernel_site(call, sites_of), example)
    text = report.text.strip()
    message = f"the compiler rejected this kernel on {target.label}: {text}"
    facts = {"target": target.name, "form": report.form, "text": report.text}
    return [Diagnostic(anchor.path, anchor.span, "error", "VMEM011", message, target.name, "compiler", (), facts),
            Diagnostic(example.path, example.span, "error", "VMEM011",
                       f"example does not compile on {target.label} (see {display_path(anchor.path)}:"
                       f"{anchor.span.start_line}): {text.splitlines()[0] if text else ''}",
                       target.name, "compiler", (Related(anchor.path, anchor.span, "the kernel"),), facts)]


def error_diagnostic(example: Example, result: ExampleResult) -> Diagnostic:
    soft = result.error_kind in ("no_compiler", "no_kernel")
    code = "VMEM012" if result.error_kind == "no_compiler" else "VMEM010"
    related = ()
    if result.error_origin is not None:
        related = (Related(result.error_origin.file, line_span(result.error_origin.line), "raised here"),)
    where = f" on TPU {result.target}" if result.target else ""
    message = f"example not checked{where}: {result.error}"
    if result.error_origin is not None and result.error_kind in ("raised", "import"):
        # Where it raised belongs in the text too, not only in JSON's related locations.
        message += f" (raised at {display_path(result.error_origin.file)}:{result.error_origin.line})"
    return Diagnostic(example.path, example.span, "warning" if soft else "error", code,
                      message, result.target, "compiler", related,
                      {"error_kind": result.error_kind, "target": result.target})
