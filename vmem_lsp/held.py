"""The values a kernel body holds at its peak, and the block dimensions they grow with.

A family's body account (TPU: tpu/body.held_values, in the worker) gives each value live at the
body's peak as a results.Unseen of kind "held". Two readers need the same rule for which
BlockSpec dimensions such a value grows with: the diagnostics, which relate each value to the
BlockSpecs to shrink (tpu/body_parts), and the fix search, which tries first the knobs that
shrink those dimensions (fixes/search). Pure functions of what the worker captured.
"""

from __future__ import annotations

from dataclasses import dataclass

from .budget import SMALL_SHARE
from .results import CapturedCall, Operand, Unseen

LANES = 128  # a whole block dimension wider than this is still one a user sizes (block_q of a 2048 sequence)


@dataclass(frozen=True)
class GrownDim:
    """A value's dimension that is a block dimension of an operand's window."""

    operand: Operand
    dim: int  # which dimension of the operand's block
    block: int  # its size in the block
    full: int  # its size in the array


def held(call: CapturedCall, kind: str = "held") -> list[Unseen]:
    """The values live at the body's peak, largest first; none without a body account. `kind`:
    which account, where a family keeps more than one (TPU: "kept" on chips that keep an unrolled
    chain's steps, tpu/layout.account_kind)."""
    return sorted((u for u in call.unseen if u.kind == kind and u.bytes > 0), key=lambda u: -u.bytes)


def grown_dims(value: Unseen, call: CapturedCall) -> list[GrownDim]:
    """Per operand window, the first block dimension that tiles its array (smaller than the
    whole, or whole but wider than the lanes) and equals one of the value's dimensions:
    shrinking that block shrinks the value. A narrow dimension the block keeps whole (a
    head_dim of 128) is not a knob."""
    grown = []
    for op in call.operands:
        if op.role == "prefetch" or op.block_shape is None:
            continue
        for i, (b, f) in enumerate(zip(op.block_shape, op.full_shape)):
            if b is not None and b in value.shape and (1 < b < f or b > LANES):
                grown.append(GrownDim(op, i, b, f))
                break
    return grown


def large_held(call: CapturedCall) -> list[Unseen]:
    """The held values that matter: each at least SMALL_SHARE of all the body holds."""
    values = held(call)
    total = sum(v.bytes for v in values)
    return [v for v in values if v.bytes >= SMALL_SHARE * total]


def body_block_dims(call: CapturedCall) -> dict[tuple[str, int, int], int]:
    """(role, operand index, block dimension) -> block size, of each dimension the body's large
    held values grow with: the dimensions a fix shrinks first."""
    return {
        (g.operand.role, g.operand.index, g.dim): g.block for value in large_held(call) for g in grown_dims(value, call)
    }
