"""Located sites x captured calls: which pallas_call, BlockSpec and scratch
entry of the source made each kernel, operand and allocation the worker saw.

The one place the two sides meet. Mapping (diagnostics), budget (the parts of
a compiled kernel), views (estimates, hints) and fixes (rewrites) all ask
here, so a rule about origins is written once. Pure functions; nothing here
imports mapping, budget or views.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .results import CapturedCall, Operand, Origin, Scoped
from .source.calls import call_at
from .source.locate import LocateResult
from .source.model import BlockSpecSite, KernelSite, ScratchSite, Span

SitesOf = Callable[[str], LocateResult]
TextOf = Callable[[str], "str | None"]


class Sources(Protocol):
    """The files a mapping reads: their sites, and their texts for what no
    site holds (engine.SourceFiles)."""

    def sites_of(self, path: str) -> LocateResult: ...
    def text(self, path: str) -> str | None: ...


@dataclass(frozen=True)
class Anchor:
    """Where a diagnostic is marked: a file and a span in it."""

    path: str
    span: Span


def line_span(line: int) -> Span:
    return Span(line, 0, line, 0)


def at_origin(candidates, origin: Origin):
    """The located thing an origin (file, line, col) points at: the one that
    starts there, else the first that covers the line."""
    exact = [
        c
        for c in candidates
        if c.span.start_line == origin.line and (origin.col is None or c.span.start_col == origin.col)
    ]
    if exact:
        return exact[0]
    return next((c for c in candidates if c.span.contains_line(origin.line)), None)


def kernel_label(call: CapturedCall) -> str:
    """The kernel's name as messages give it: the user's name, without the compiler's suffix."""
    return call.name.split(" ")[0] if call.name else "pallas_call"


def site_at_line(origin: Origin, sites_of: SitesOf) -> KernelSite | None:
    """The innermost pallas_call site covering the origin's line (a partial's site may contain another)."""
    found = [s for s in sites_of(origin.file).sites if s.span.contains_line(origin.line)]
    return min(found, key=lambda s: s.span.end_line - s.span.start_line) if found else None


def kernel_site(call: CapturedCall, sites_of: SitesOf) -> KernelSite | None:
    """The pallas_call site a captured call came from: by where pallas_call
    was called, else where its result was invoked."""
    for origin in (call.call_origin, call.invoke_origin):
        if origin is not None and (site := site_at_line(origin, sites_of)) is not None:
            return site
    return None


def call_anchor(call: CapturedCall, site: KernelSite | None, fallback: Anchor) -> Anchor:
    """The `pallas_call` token of the site, else the line the call came from."""
    if site is not None:
        return Anchor(site.path, site.name_span)
    origin = call.call_origin or call.invoke_origin
    if origin is not None:
        return Anchor(origin.file, line_span(origin.line))
    return fallback


def spec_for(op: Operand, site: KernelSite | None, sites_of: SitesOf) -> tuple[str, BlockSpecSite] | None:
    """(file, BlockSpec) that made this operand: the BlockSpec constructed at
    the operand's origin (a spec built in a helper or another file), else the
    site's spec of that index."""
    if op.origin is not None:
        located = sites_of(op.origin.file).sites
        found = at_origin([b for s in located for b in (*s.in_specs, *s.out_specs)], op.origin)
        return (op.origin.file, found) if found is not None else None
    if site is not None:
        specs = site.in_specs if op.role == "in" else site.out_specs
        found = next((b for b in specs if b.index == op.index), None)
        return (site.path, found) if found is not None else None
    return None


def spec_anchor(op: Operand, site: KernelSite | None, sites_of: SitesOf, fallback: Anchor) -> Anchor:
    """The block-shape expression of the BlockSpec that made this operand;
    the origin's line when the locator found no BlockSpec there."""
    found = spec_for(op, site, sites_of)
    if found is not None:
        path, spec = found
        return Anchor(path, (spec.block_shape or spec).span)
    if op.origin is not None:
        return Anchor(op.origin.file, line_span(op.origin.line))
    return fallback


def spec_in_site(site: KernelSite, call: CapturedCall, role: str, index: int) -> BlockSpecSite | None:
    """The BlockSpec of the site's own spec tuple behind operand (role, index):
    by the operand's origin when it lies in the site's file, else by index.
    What a rewrite edits and what an estimate re-reads."""
    specs = site.in_specs if role == "in" else site.out_specs
    op = next((o for o in call.operands if o.role == role and o.index == index), None)
    if op is not None and op.origin is not None and op.origin.file == site.path:
        found = at_origin(specs, op.origin)
        if found is not None:
            return found
    return next((s for s in specs if s.index == index), None)


def spec_ordinals(call: CapturedCall, site: KernelSite) -> dict:
    """(role, index) -> position of the BlockSpec that made it in the site's
    spec tuple: how an estimate finds an operand's spec again after edits."""
    ordinals = {}
    for op in call.operands:
        if op.role == "prefetch":
            continue
        spec = spec_in_site(site, call, op.role, op.index)
        if spec is not None:
            ordinals[(op.role, op.index)] = (site.in_specs if op.role == "in" else site.out_specs).index(spec)
    return ordinals


def scratch_entry(call: CapturedCall, index: int):
    return next((s for s in call.scratch if s.index == index), None)


def scratch_anchor(
    index: int, call: CapturedCall, site: KernelSite | None, sites_of: SitesOf, fallback: Anchor
) -> Anchor:
    """The scratch_shapes entry `index`: where the worker saw it constructed,
    else the site's entry of that index."""
    entry = scratch_entry(call, index)
    if entry is not None and entry.origin is not None:
        located = sites_of(entry.origin.file).sites
        found: ScratchSite | None = at_origin([x for s in located for x in s.scratch], entry.origin)
        return Anchor(entry.origin.file, found.span if found is not None else line_span(entry.origin.line))
    if site is not None:
        found = next((x for x in site.scratch if x.index == index), None)
        if found is not None:
            return Anchor(site.path, found.span)
    return fallback


# ---- what the kernel body allocates: pipeline windows, run_scoped entries ------------------


def scoped_anchor(entry: Scoped, sites_of: SitesOf, text_of: TextOf | None, fallback: Anchor) -> Anchor:
    """Where a scoped buffer is marked: the block shape of the inner BlockSpec
    that made a pipeline window (a located one, else the BlockSpec call the
    worker saw at that line and column, in a helper or a library alike), the
    VMEM(...) of a run_scoped entry; the origin's line when neither is found."""
    origin = entry.origin
    if origin is None:
        return fallback
    if entry.kind != "run_scoped":
        located = [b for s in sites_of(origin.file).sites for b in (*s.in_specs, *s.out_specs)]
        spec = at_origin(located, origin) if origin.col is not None else None
        if spec is not None:
            return Anchor(origin.file, (spec.block_shape or spec).span)
    return call_anchor_at(origin, text_of, first_argument=entry.kind != "run_scoped")


def call_anchor_at(origin: Origin, text_of: TextOf | None, first_argument: bool = False) -> Anchor:
    """The call the worker saw made at `origin` (its first argument, a block
    shape, when asked and written), else the origin's line."""
    text = text_of(origin.file) if text_of is not None else None
    found = call_at(text, origin.line, origin.col) if text else None
    if found is not None:
        call, first = found
        return Anchor(origin.file, first if first_argument and first is not None else call)
    return Anchor(origin.file, line_span(origin.line))


def scoped_caller_anchor(entry: Scoped, text_of: TextOf | None) -> Anchor | None:
    """The call in user code of the helper that made a pipeline window's
    inner BlockSpec (`specs.tiles(bm, bk)` in the kernel body): where the
    window got its shape. None for a spec made where it is passed."""
    if entry.caller is None or entry.kind == "run_scoped":
        return None
    return call_anchor_at(entry.caller, text_of)


def scoped_entry(call: CapturedCall, index: int) -> Scoped | None:
    return next((s for s in call.scoped if s.index == index), None)
