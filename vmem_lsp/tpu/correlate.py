"""TPU reports x captured calls: which operand, scratch entry or scoped buffer each
allocation the compiler lists belongs to, and which operand a compile error names.
correlate.py matches the sites; this matches libtpu's words. Pure functions."""

from __future__ import annotations

from ..results import CapturedCall, Operand
from . import layout
from .report import Allocation


def operand_for(call: CapturedCall, allocation: Allocation) -> Operand | None:
    """The operand a window allocation belongs to. The compiler counts
    scalar-prefetch operands among the inputs: "operator input N" is the
    call's Nth operand, not in_specs[N]."""
    if allocation.operand_index is None:
        return None
    if allocation.kind == "output_window":
        return next((o for o in call.operands if o.role == "out" and o.index == allocation.operand_index), None)
    return next(
        (o for o in call.operands if o.role in ("in", "prefetch") and o.operand == allocation.operand_index), None
    )


def operand_named(call: CapturedCall, kind: str | None, index: int | None, path: str | None = None) -> Operand | None:
    """The operand a compile error names. jax's "Block spec for args[N]" names it
    by `path`, its place in the call's arguments: the operand the worker saw
    under that path (a tuple of scalar-prefetch arrays before it, as in
    megablox's gmm, makes args[2] the fifth operand). Otherwise "input N"
    counts the call's operands, scalar-prefetch ones first (as "operator input
    N" does), and "output N" / outputs[N] the outputs. Mosaic's "window params
    for input N" ("window_input") counts the windows, the blocked inputs only:
    the Nth in_spec, whatever scalar-prefetch operands come before it."""
    named = next((o for o in call.operands if path is not None and o.path == path), None)
    if named is not None:
        return named
    if kind == "output":
        return next((o for o in call.operands if o.role == "out" and o.index == (index or 0)), None)
    if kind == "window_input" and index is not None:
        return next((o for o in call.operands if o.role == "in" and o.index == index), None)
    if kind == "input" and index is not None:
        return next((o for o in call.operands if o.role in ("in", "prefetch") and o.operand == index), None)
    return None


def scratch_indices(call: CapturedCall, allocations) -> list[int | None]:
    """The scratch_shapes index of each allocation (None where it is no
    scratch). The compiler says "scratch operand" without a number: match by
    the typed shape it prints, each entry once (two f32[4096,4096] buffers
    are scratch 0 and scratch 1, not scratch 0 twice: the parts must add up
    to the total), else the first entry not yet matched, else the first."""
    taken = {a.operand_index for a in allocations if a.kind == "scratch" and a.operand_index is not None}
    indices: list[int | None] = []
    for allocation in allocations:
        if allocation.kind != "scratch" or allocation.operand_index is not None:
            indices.append(allocation.operand_index if allocation.kind == "scratch" else None)
            continue
        free = [e for e in call.scratch if e.index not in taken]
        shape = allocation.window_shape
        alike = [e for e in free if shape is not None and (e.dtype, e.shape) == (shape.dtype, shape.dims)]
        chosen = next(iter(alike or free or call.scratch[:1]), None)
        index = chosen.index if chosen is not None else 0
        taken.add(index)
        indices.append(index)
    return indices


def part_indices(call: CapturedCall, allocations) -> list[int | None]:
    """The in_specs / out_specs / scratch_shapes index of each allocation."""
    scratch = scratch_indices(call, allocations)
    indices = []
    for allocation, index in zip(allocations, scratch):
        op = operand_for(call, allocation) if allocation.kind != "scratch" else None
        indices.append(
            index if allocation.kind == "scratch" else op.index if op is not None else allocation.operand_index
        )
    return indices


SCOPED_TAG = "scoped memory for "


def scoped_allocations(call: CapturedCall, allocations) -> list[int | None]:
    """The scoped buffer (its index) behind each allocation the compiler
    calls "scoped memory for <kernel>": it names no operand, so match sizes,
    each buffer once, among the buffers live at the peak (pipeline-flat-v6e: two
    64.00M allocations, the input and the output windows of the pipeline)."""
    free = [(s.index, layout.padded_bytes(s.dtype, s.shape)) for s in layout.scoped_peak(call.scoped)]
    matched: list[int | None] = []
    for allocation in allocations:
        found = None
        if allocation.kind == "other" and (allocation.tag or "").startswith(SCOPED_TAG):
            found = next((pair for pair in free if pair[1] == allocation.size), None)
            if found is not None:
                free.remove(found)
        matched.append(found[0] if found else None)
    return matched
