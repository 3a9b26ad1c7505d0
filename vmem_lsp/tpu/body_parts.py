"""The compiler's internal scratch put on the body lines that make it (issue 42).

When a kernel's windows are small and its body's values large, the compiler's total less the
windows is internal scratch: the values the body holds at its peak (the body account, read in
the worker: results.Unseen of kind "held"). Each of the largest becomes a part of its own
(VMEM008) on the line that makes it, with the block dimensions it grows with as related
information; what the values do not explain stays VMEM003 on the pallas_call. The parts never
claim more than the figure they split: the compiler's, or the model's without a compile.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .. import render
from ..budget import SMALL_SHARE
from ..correlate import Anchor, Sources, spec_anchor
from ..diagnostics import Related
from ..held import grown_dims, held
from ..render import Wording
from ..results import CapturedCall, Operand, Origin, Unseen
from ..source.model import Span
from ..source.text import split_lines
from . import layout
from .parts import Part

# A held value's words, as tpu/body.held_values writes them: "f32[4096,4096] from exp across reduce_sum".
# and, when its elementwise chain began elsewhere, "... of dot_general"; the steps of an unrolled
# chain a chip keeps, "7 x f32[2048,8] from select_n across reduce_max".
HELD_WHAT = re.compile(
    r"(?:(?P<copies>\d+) x )?(?P<shape>\S+) from (?P<made_by>\S+) across (?P<op>\S+)(?: of (?P<start>\S+))?"
)
# What the ops a value is live across are called in a kernel's source.
OP_WORDS = {
    "reduce_sum": "sum",
    "reduce_max": "max",
    "reduce_min": "min",
    "reduce_prod": "product",
    "reduce_and": "all",
    "reduce_or": "any",
    "dot_general": "dot",
    "argmax": "argmax",
}

# Why an unrolled chain's steps are each a value (layout.KEEPS_COLUMNS_CHIPS), and the way out measured.
KEPT_STEPS = (
    "each kept until the last on this chip instead of updated in place"
    " (v6e and v7x keep one; a result written to its output ref step by step keeps none)"
)

# The name an assignment gives the value its line makes: `p = jnp.exp(...)`, `s *= scale`.
ASSIGNED = re.compile(r"\s*([A-Za-z_]\w*)\s*(?:[-+*/@%]|//|\*\*)?=(?!=)")


def assigned_name(line_text: str) -> str | None:
    found = ASSIGNED.match(line_text)
    return found.group(1) if found else None


def line_of(sites: Sources, path: str, line: int) -> str:
    text = sites.text(path)
    lines = split_lines(text) if text is not None else []
    return lines[line - 1] if 0 < line <= len(lines) else ""


def statement_span(line: int, text: str) -> Span:
    """The line's code, from its indentation to its end (code points)."""
    stripped = text.rstrip("\r\n")
    start = len(stripped) - len(stripped.lstrip())
    return Span(line, start, line, len(stripped))


def grows_with(value: Unseen, call: CapturedCall, place: Callable[[Operand], Anchor], name: str) -> tuple[Related, ...]:
    """Related information on each BlockSpec whose block dimension the value grows with
    (held.grown_dims): shrinking that block shrinks the value."""
    related = []
    for grown in grown_dims(value, call):
        op, where = grown.operand, place(grown.operand)
        related.append(
            Related(
                where.path,
                where.span,
                f"{name} grows with {render.operand(op.role, op.index)}'s block dimension {grown.dim} "
                f"({grown.block} of {grown.full}): a smaller block makes it smaller",
            )
        )
    return tuple(related)


@dataclass(frozen=True)
class Split:
    """The figure the body's values split: its bytes, what the compiler calls it, and the subject
    of what the values leave of it (a report's spill slots, or internal scratch)."""

    bytes: int
    what: str = "compiler-internal scratch"
    subject: str = "internal"


def body_parts(
    call: CapturedCall,
    split: Split,
    target: str | None,
    site,
    sites: Sources,
    anchor: Anchor,
    need: str,
    base: dict,
    estimated: bool,
) -> list[Part]:
    """`split` (the compiler's total less the windows, a report's spill slots, or the model's
    estimate of the body's share) split into the body's held values, largest first, each whole
    while they fit in it, and the rest. A value larger than the whole figure takes all of it
    (the compiler keeps part of it in registers or fuses it). Empty when the body account has
    nothing to say (the caller keeps its single VMEM003). `target`'s account: a chip that keeps
    an unrolled chain's steps holds more (layout.account_kind)."""
    values = held(call, layout.account_kind(call, target))
    small = SMALL_SHARE * (base.get("used") or split.bytes)  # smaller values stay in the rest, as windows do
    chosen: list[Unseen] = []
    for value in values:
        if value.bytes >= small and sum(v.bytes for v in chosen) + value.bytes <= split.bytes:
            chosen.append(value)
    if not chosen and values and values[0].bytes > split.bytes >= small:
        return [held_part(values[0], call, sites, anchor, site, need, base, estimated, within=split)]
    if not chosen:
        return []
    parts = [held_part(value, call, sites, anchor, site, need, base, estimated) for value in chosen]
    rest = split.bytes - sum(v.bytes for v in chosen)
    if rest > 0:
        named = ", ".join(str(p.facts["name"] or p.facts["shape"]) for p in parts)
        head = f"{split.what} ~ {render.size(rest)} besides the kernel body's values ({named})"
        parts.append(
            Part(
                anchor,
                "VMEM003",
                split.subject,
                Wording(head, "; ", need),
                {**base, "kind": split.subject, "size": rest, "estimated": True},
            )
        )
    return parts


def held_part(
    value: Unseen, call: CapturedCall, sites: Sources, anchor: Anchor, site, need, base, estimated, within=None
) -> Part:
    """VMEM008 for one held value, on the line that makes it: "p f32[4096,4096] = 64.00M, a value
    of the kernel body, grown from the dot at line 395, live across the sum at line 453". Its
    subject is its line, so that the chips that hold it merge into one diagnostic. `within`: the
    figure it takes all of, smaller than the value."""
    words = HELD_WHAT.fullmatch(value.what)
    shape, made_by, op, start = (
        (words["shape"], words["made_by"], words["op"], words["start"]) if words else (value.what, "?", "?", None)
    )
    copies = int(words["copies"]) if words and words["copies"] else 1
    text = line_of(sites, value.origin.file, value.origin.line) if value.origin else ""
    name = assigned_name(text)
    label = f"{name} {shape}" if name else f"{shape} from {made_by}"
    where = Anchor(value.origin.file, statement_span(value.origin.line, text)) if value.origin else anchor
    began, peak = line_in_file(value, value.start), line_in_file(value, value.across)
    began = began if value.origin is None or began != value.origin.line else None  # grown from itself: a loop
    grown = f", grown from the {OP_WORDS.get(start or '', start)} at line {began}" if began else ""
    across = f"the {OP_WORDS.get(op, op)} at line {peak}" if peak else f"a {OP_WORDS.get(op, op)}"
    what = "a value of the kernel body" if copies == 1 else f"{copies} steps of an unrolled loop, {KEPT_STEPS}"
    head = f"{label} {'~' if estimated else '='} {render.size(value.bytes)}, {what}{grown}, live across {across}"
    if within is not None:
        head += f" ({within.what} {render.size(within.bytes)} is less: part of it stays in registers or is fused)"
    if estimated:
        head += " (the model's body account, not compiled)"
    facts = {
        **base,
        "kind": "body",
        "size": within.bytes if within is not None else value.bytes,
        "shape": shape,
        **({"copies": copies} if copies > 1 else {}),  # a kept chain's steps
        "made_by": made_by,
        "name": name,
        "across_line": value.across.line if value.across else None,
        "estimated": estimated,
    }
    if within is not None:
        facts["value_bytes"] = value.bytes  # more than the figure it takes all of (facts' size)
    subject = f"body {value.origin.line}" if value.origin else f"body {shape}"

    def place(operand: Operand) -> Anchor:
        return spec_anchor(operand, site, sites.sites_of, anchor)

    return Part(
        where, "VMEM008", subject, Wording(head, "; ", need), facts, grows_with(value, call, place, name or "the value")
    )


def line_in_file(value: Unseen, other: Origin | None) -> int | None:
    """The line of what the value names (its peak's op, where it grew from) when it is in the value's
    own file: only then is "at line N" unambiguous."""
    if other is None or value.origin is None or other.file != value.origin.file:
        return None
    return other.line
