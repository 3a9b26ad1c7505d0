"""The static layout model: what each window and scratch buffer costs in VMEM,
without a compiler. Used to split the compiler's total where its report gives
none (E1001) and, later, for estimates while typing.

Every rule here is a hypothesis to be measured against the compiler.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .compile.protocol import CapturedCall, Operand, Scratch

ITEM_BITS = {
    "f64": 64, "s64": 64, "u64": 64,
    "f32": 32, "s32": 32, "u32": 32,
    "bf16": 16, "f16": 16, "s16": 16, "u16": 16,
    "s8": 8, "u8": 8, "pred": 8, "f8e4m3fn": 8, "f8e5m2": 8, "f8e4m3b11fnuz": 8,
    "s4": 4, "u4": 4,
}
LANES = 128


@dataclass(frozen=True)
class WindowCost:
    """One VMEM consumer as the model sees it."""
    kind: str                 # "input_window" | "output_window" | "scratch"
    index: int                # in_specs / out_specs / scratch_shapes index
    operand: int | None       # the compiler's operand number, for windows
    dtype: str
    shape: tuple[int, ...]    # the block (window) shape
    buffers: int
    bytes: int                # all buffers, padded


def sublane_rows(dtype: str) -> int:
    """Rows of one (rows, 128) VMEM tile: 8 for 32-bit types, more for packed
    narrower ones (the compiler prints bf16 tiles as T(8,128)(2,1))."""
    bits = ITEM_BITS.get(dtype, 32)
    return 8 * max(1, 32 // min(bits, 32))


def padded_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    """Bytes of one buffer of `shape` once its last two dims are tile-padded."""
    bits = ITEM_BITS.get(dtype, 32)
    dims = list(shape) or [1]
    dims[-1] = math.ceil(dims[-1] / LANES) * LANES
    if len(dims) >= 2:
        rows = sublane_rows(dtype)
        dims[-2] = math.ceil(dims[-2] / rows) * rows
    return math.prod(dims) * bits // 8


def grid_steps(grid: tuple[int, ...]) -> int:
    return math.prod(g if g > 0 else 2 for g in grid)


def buffer_count(operand: Operand, grid: tuple[int, ...]) -> int:
    """Two buffers to overlap the next block's copy with compute, unless the
    user asked otherwise or there is only one step (the seed report: grid=(),
    'single buffered')."""
    if operand.buffer_count:
        return operand.buffer_count
    return 1 if grid_steps(grid) == 1 else 2


def in_vmem(memory_space: str | None) -> bool:
    return memory_space in (None, "vmem")


def window_costs(call: CapturedCall) -> list[WindowCost]:
    costs = []
    for op in call.operands:
        if op.role == "prefetch" or not in_vmem(op.memory_space):
            continue
        shape = op.block_shape if op.block_shape is not None else op.full_shape
        buffers = buffer_count(op, call.grid)
        costs.append(WindowCost("input_window" if op.role == "in" else "output_window", op.index,
                                op.operand, op.dtype, shape, buffers,
                                padded_bytes(op.dtype, shape) * buffers))
    for s in call.scratch:
        if in_vmem(s.memory_space) and s.dtype in ITEM_BITS:
            costs.append(WindowCost("scratch", s.index, None, s.dtype, s.shape, 1,
                                    padded_bytes(s.dtype, s.shape)))
    return costs


def find_cost(costs: list[WindowCost], kind: str, index: int) -> WindowCost | None:
    return next((c for c in costs if c.kind == kind and c.index == index), None)


def scratch_of(call: CapturedCall, index: int) -> Scratch | None:
    return next((s for s in call.scratch if s.index == index), None)
