"""What a Pallas GPU kernel's blocks take of shared memory, by model: the
blocks each backend stages there (measured against the compiler's requests,
tests/test_gpu_reports.py). Pure. Used to place the compiler's total on the
BlockSpecs (gpu_diagnostics.py) and to rank shrink fixes before the compiler
verifies them (fixes/search.py)."""

from __future__ import annotations

import math

from .dtypes import ITEM_BITS
from .results import CapturedCall, Operand

# The blocks each backend stages in shared memory, as captured: Triton loads a dot's
# operands through it, one at a time (the request is the largest input block); Mosaic
# GPU pipelines every block in and out (the request is their sum, plus a barrier's bytes).
STAGED_ROLES = {"triton": ("in",), "mosaic_gpu": ("in", "out")}


def block_bytes(op: Operand) -> int:
    """A block's bytes as a GPU holds it: unpadded (no TPU tiles)."""
    shape = op.block_shape if op.block_shape is not None else op.full_shape
    return math.prod(d if d else 1 for d in shape) * ITEM_BITS.get(op.dtype, 32) // 8


def staged(call: CapturedCall, backend: str | None) -> list[Operand]:
    """The operands whose blocks `backend` stages in shared memory."""
    roles = STAGED_ROLES.get(backend or "triton", ("in",))
    return [op for op in call.operands if op.role in roles and op.block_shape is not None]


def staged_bytes(call: CapturedCall, backend: str | None) -> int:
    """The model's shared memory of a kernel: Triton's largest staged block, Mosaic GPU's sum."""
    sizes = [block_bytes(op) for op in staged(call, backend)]
    if not sizes:
        return 0
    return sum(sizes) if backend == "mosaic_gpu" else max(sizes)
