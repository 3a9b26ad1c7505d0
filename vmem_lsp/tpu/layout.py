"""The static layout model: what each window and scratch buffer costs in VMEM,
without a compiler. Used to split the compiler's total where its report gives
none (E1001) and for estimates while typing.

Every rule is measured: bench/model_harness.py compiles the kernels of
bench/model_corpus.py for v4, v5e, v5p, v6e and v7x and lists every allocation
(bench/MODEL.md has the agreement table). A comment names the case that
established each rule; the sizes were the same on every chip unless it says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..compile.cut_grids import grid_steps
from ..dtypes import ITEM_BITS
from ..held import held
from ..results import CapturedCall, Operand, Scoped, Scratch, Unseen

LANES = 128
SUBLANES = 8
# One sublane of 32-bit words across the lanes: the smallest unit of a tile.
# copy-r1-bf16-b128-g1: bf16[128] is 256 bytes of data but a 512-byte window.
SUBLANE_BYTES = LANES * 4
# Every window allocation is a whole number of KiB.
# copy-r2-f32-b1x128-g1: f32[1,128] is u8[512] but "Size: 1.0K"; scratch is not rounded (padded-scratch-v6e: 512B).
WINDOW_ALIGNMENT = 1024
# Booleans live in VMEM as 32-bit words: copy-r2-pred-b8x128-g1's window is s32[8,128], 4096 bytes.
VMEM_DTYPE = {"pred": "s32"}
# How the compiler names a scratch buffer's dtype: scratch-u8-s8x128 prints s8[8,128], scratch-pred-* s32[...].
PRINTED_DTYPE = {**VMEM_DTYPE, "u8": "s8"}


@dataclass(frozen=True)
class WindowCost:
    """One VMEM consumer as the model sees it."""

    kind: str  # "input_window" | "output_window" | "scratch" | "pipeline_in" | "pipeline_out" | "run_scoped"
    index: int  # in_specs / out_specs / scratch_shapes index; a scoped buffer's number
    operand: int | None  # the compiler's operand number, for windows
    dtype: str
    shape: tuple[int, ...]  # the block (window) shape
    buffers: int
    bytes: int  # all buffers, padded

    @property
    def buffering(self) -> int | None:
        """The buffers worth saying: a window's; None for a scratch buffer or a
        run_scoped entry, one buffer by nature."""
        return None if self.kind in ("scratch", "run_scoped") else self.buffers


def packing(dtype: str) -> int:
    """Values of `dtype` packed into one 32-bit word (bf16 2, s8 4, s4 8)."""
    return max(1, 32 // ITEM_BITS.get(dtype, 32))


def sublane_rows(dtype: str) -> int:
    """Rows of a full-size tile. The compiler tiles every dtype as T(8,128), packing
    narrow types (bf16 T(8,128)(2,1), s8 T(8,128)(4,1)):
    copy-r2-bf16-b24x200-g1 is 24 rows (12288 bytes), not 32; copy-r2-s8-b24x200-g1 likewise."""
    return SUBLANES


def tile_rows(dtype: str, rows: int) -> int:
    """Rows of the tile the compiler picks for `rows` rows: small arrays get small tiles
    (T(1,128), T(2,128), T(4,128); padded-scratch-v6e: bf16[3,128] T(4,128)(2,1)), but
    never fewer rows than fill one 32-bit sublane (copy-r2-s8-b1x128-g1: 512 bytes;
    copy-r3-s4-b4x3x100-g1: s4 rows padded to 8)."""
    if rows >= SUBLANES:
        return sublane_rows(dtype)
    return min(SUBLANES, max(1 << (rows - 1).bit_length(), packing(dtype)))


def padded_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    """Bytes of one buffer of `shape` in its tiled layout: the last dim padded to 128
    lanes, the second-last to the tile's rows, each leading index its own tile
    (copy-r3-f32-b4x3x100-g1: 4 x T(4,128) = 8192 bytes). A rank-1 array is a run of
    whole 32-bit sublanes (copy-r1-f32-b100-g1: 512 bytes)."""
    dtype = VMEM_DTYPE.get(dtype, dtype)
    bits = ITEM_BITS.get(dtype, 32)
    if len(shape) <= 1:
        n = shape[0] if shape else 1
        return math.ceil(n * bits / 8 / SUBLANE_BYTES) * SUBLANE_BYTES
    *leading, rows, cols = shape
    tile = tile_rows(dtype, rows)
    padded_rows = math.ceil(rows / tile) * tile
    padded_cols = math.ceil(cols / LANES) * LANES
    return math.prod(leading) * padded_rows * padded_cols * bits // 8


def buffer_count(operand: Operand, grid: tuple[int, ...]) -> int:
    """Buffers the compiler gives a window.
    - pl.Buffered(n) as asked (buffering-in-buf1-*, -out-buf1-*: 1; n > 2 is refused by Pallas).
    - One when the grid has one step: grid=(), (1,) and (1, 1) alike (buffering-grid0/1/1x1-*).
    - One for a window whose index map ignores the grid: its block never changes
      (buffering-const-in-*: "single buffered" beside a double-buffered output; an output
      too, const-out-v6e: index map (0, 0) over grid=(8,) "single buffered");
      reading only grid axes of extent 1 is ignoring it (extent1-grid-v6e: grid=(1, 8),
      index map (i, 0) "single buffered", (i, j) "2 buffering levels"; capture._constant_index).
    - Otherwise two, to overlap the next block's copy with compute (buffering-grid4x1-*)."""
    if operand.buffer_count:
        return operand.buffer_count
    if grid_steps(grid) == 1:
        return 1
    if operand.constant_index:
        return 1
    return 2


def in_vmem(memory_space: str | None) -> bool:
    return memory_space in (None, "vmem")


def window_bytes(dtype: str, shape: tuple[int, ...], buffers: int) -> int:
    return math.ceil(padded_bytes(dtype, shape) * buffers / WINDOW_ALIGNMENT) * WINDOW_ALIGNMENT


def window_costs(call: CapturedCall, target: str | None = None) -> list[WindowCost]:
    """Every window and VMEM scratch buffer of `call`, and what its body allocates
    (scoped_costs). Scalar-prefetch, SMEM and ANY operands have no window
    (smem-operand-*, any-dma-*: none listed); nor do semaphores."""
    costs = []
    for op in call.operands:
        if op.role == "prefetch" or not in_vmem(op.memory_space):
            continue
        shape = op.block_shape if op.block_shape is not None else op.full_shape
        buffers = buffer_count(op, call.grid)
        costs.append(
            WindowCost(
                "input_window" if op.role == "in" else "output_window",
                op.index,
                op.operand,
                op.dtype,
                shape,
                buffers,
                window_bytes(op.dtype, shape, buffers),
            )
        )
    for s in call.scratch:
        if in_vmem(s.memory_space) and s.dtype in ITEM_BITS:
            costs.append(WindowCost("scratch", s.index, None, s.dtype, s.shape, 1, padded_bytes(s.dtype, s.shape)))
    return costs + scoped_costs(call)


SCOPED_KINDS = ("pipeline_in", "pipeline_out", "run_scoped")


def scoped_peak(scoped: tuple[Scoped, ...]) -> list[Scoped]:
    """The scoped buffers live at once at the kernel's peak: a run_scoped's
    own buffers and the largest of the scopes inside it. Scopes side by side
    run one after the other and share their memory (pipeline-in-a-row-v6e: two
    emit_pipelines in a row, each with two 64.00M windows, needed 128.00M,
    not 256.00M; pipeline-flat-v6e: one pipeline's windows all at once)."""

    def size(group):
        return sum(padded_bytes(s.dtype, s.shape) for s in group if s.dtype in ITEM_BITS and in_vmem(s.memory_space))

    def peak(scope: int) -> list[Scoped]:
        inner = [peak(child) for child in sorted({s.scope for s in scoped if s.parent == scope})]
        return [s for s in scoped if s.scope == scope] + max(inner, key=size, default=[])

    return peak(-1)


def scoped_costs(call: CapturedCall) -> list[WindowCost]:
    """What the body's run_scoped buffers cost at its peak: a pipeline window
    is (buffers, *block) of the block's dtype, padded as a window is
    (pipeline-buffered1-v6e: an inner Buffered(1) input f32[1,2048,8192] 64.00M and
    its double-buffered output 128.00M; run-scoped-v6e: VMEM f32[4096,4104]
    66.00M, its lanes padded to 4224)."""
    return [
        WindowCost(s.kind, s.index, None, s.dtype, s.block_shape, s.buffers, padded_bytes(s.dtype, s.shape))
        for s in scoped_peak(call.scoped)
        if s.dtype in ITEM_BITS and in_vmem(s.memory_space)
    ]


def find_cost(costs: list[WindowCost], kind: str, index: int) -> WindowCost | None:
    return next((c for c in costs if c.kind == kind and c.index == index), None)


def match_scratch(costs: list[WindowCost], shape_text: str) -> WindowCost | None:
    """The scratch cost whose typed shape the compiler printed ("bf16[8,100]{1,0:T(8,128)(2,1)}")."""
    head = shape_text.split("{")[0]
    return next(
        (
            c
            for c in costs
            if c.kind == "scratch" and f"{PRINTED_DTYPE.get(c.dtype, c.dtype)}[{','.join(map(str, c.shape))}]" == head
        ),
        None,
    )


# Register spills of a kernel that accumulates a narrow-typed dot into a 32-bit VMEM
# accumulator: the compiler's "register allocator spill slots" entry grew as about this
# share of the accumulator, less what the vector registers hold (64 x 4 KiB).
# matmul-bf16-{512,1024,2048}^3: v5e/v5p 0.34M/2.47M/9.25M for 1M/4M/16M accumulators;
# v4 0.52M/2.58M/9.41M; v6e 0/2.97M/10.33M; v7x 0/1.95M/12.49M.
SPILL_SHARE = {"v4": 0.65, "v5e": 0.6, "v5p": 0.6, "v6e": 0.7, "v7x": 0.6}
VREG_FILE_BYTES = 64 * 4096
# v6e and v7x did not spill a 1 MiB accumulator at all (matmul-bf16-512^3, jaxmatmul-bf16-512x512x512).
NO_SPILL_UP_TO = {"v6e": 1 << 20, "v7x": 1 << 20}


def accumulator(call: CapturedCall) -> Scratch | None:
    """The largest 32-bit VMEM scratch fed by 16-bit inputs: the pattern of a dot with
    preferred_element_type=f32 accumulating across grid steps. An s8 dot into s32 did not
    spill (matmul-s8-*), nor did an f32 one below 1024^3 (matmul-f32-*)."""
    narrow_inputs = any(
        op.role == "in" and in_vmem(op.memory_space) and ITEM_BITS.get(op.dtype, 32) == 16 for op in call.operands
    )
    # Or blocks an emit_pipeline brings in (pipeline-matmul-bf16-1024x1024x1024: 2.36M of spills on v5e, 2.46M on v4)
    narrow_inputs = narrow_inputs or any(
        s.kind == "pipeline_in" and ITEM_BITS.get(s.dtype, 32) == 16 for s in call.scoped
    )
    wide_scratch = [
        s for s in call.scratch if in_vmem(s.memory_space) and s.dtype is not None and ITEM_BITS.get(s.dtype, 0) == 32
    ]
    if not (narrow_inputs and wide_scratch):
        return None
    return max(wide_scratch, key=lambda s: padded_bytes(s.dtype or "f32", s.shape))


def accumulator_bytes(call: CapturedCall) -> int:
    found = accumulator(call)
    return padded_bytes(found.dtype or "f32", found.shape) if found else 0


# v4, v5e and v5p (a 128-wide MXU): a 16-bit dot into a 32-bit accumulator wider than one MXU
# pass also spills about one copy of its 16-bit lhs block [accumulator rows, k], whatever the
# buffer count (bench/probe_tokamax_gap.py --grid, tokamax's gmm over tile_m, tile_n 128..1024,
# tile_k 512..4096: 512x4096x256 spilled 4.20M beside a 4M lhs block, 1024x4096x256 8.45M
# beside 8M; at tile_n 128 at most 0.36M; a plain Pallas matmul of the same tiles alike). With
# the larger of this term and the accumulator's share, the model was at most 0.83M under the
# compiler on those 64 configs (7.10M without); added to it, 0.31M, but a plain matmul of
# 1024x512x1024 tiles (spills 0.84M) was then 2.31M over, where the share alone is 1.31M over.
# v6e spilled no such term (at most 1.34M, flat in tile_k). v4 spills it as well (2026-12-05, the
# plain matmul over the same 64 tiles, `--kernel plain --grid --targets v4`: 1024x2048x256 4.05M
# beside a 4M lhs block, 1024x4096x512 8.96M beside 8M; at tile_n 128 at most 0.48M): with the
# term the model is at most 0.96M under the compiler there (8.09M without), mean error 0.20M (1.18M).
LHS_SPILL_CHIPS = frozenset({"v4", "v5e", "v5p"})


def lhs_block_bytes(call: CapturedCall) -> int:
    """Bytes of the 16-bit input block that feeds the accumulator's rows (the dot's lhs, a
    window or an emit_pipeline's block), when the accumulator is wider than one MXU pass (one
    tile of LANES on these chips)."""
    acc = accumulator(call)
    if acc is None or len(acc.shape) < 2 or acc.shape[-1] <= LANES:
        return 0
    rows = acc.shape[-2]
    blocks = [
        (op.dtype, op.block_shape)
        for op in call.operands
        if op.role == "in" and in_vmem(op.memory_space) and op.block_shape is not None
    ]
    blocks += [(s.dtype, s.shape[1:]) for s in call.scoped if s.kind == "pipeline_in"]
    return max(
        (
            padded_bytes(dtype, shape)
            for dtype, shape in blocks
            if ITEM_BITS.get(dtype, 32) == 16 and len(shape) >= 2 and shape[-2] == rows
        ),
        default=0,
    )


def attention_scores_bytes(call: CapturedCall) -> int:
    """Bytes of one f32 score block q @ k.T of an attention kernel, recognised by its windows:
    q, k and v of one last dim with k and v alike, and a 32-bit scratch (the running max,
    sum and accumulator). flash-{bf16,f32}-b{256..2048}: the compiler's total less the
    windows and scratch was 0.3M/1.0M/4.2M/16.5M, one f32[block_q, block_k] each."""
    windows = [
        block
        for op in call.operands
        if op.role == "in" and in_vmem(op.memory_space) and (block := op.block_shape) is not None and len(block) >= 2
    ]
    wide_scratch = any(in_vmem(s.memory_space) and ITEM_BITS.get(s.dtype or "", 0) == 32 for s in call.scratch)
    if len(windows) < 3 or not wide_scratch:
        return 0
    q, k, v = windows[:3]
    if not (k == v and q[-1] == k[-1]):
        return 0
    return q[-2] * k[-2] * 4


# What the compiler spills of the body's values live at once across a whole-value op
# (a reduction, a dot, a roll: capture.live_values), as a share of their peak bytes
# (bench/MODEL.md, "Body temporaries"). The least share of the fitted families on v5e and
# v6e, mask-bandmax-f32-b1024x1024 on v5e (1.31M of 4.00M live), sizes the estimate, so that
# it stays under the compiler; the most on any chip, router-grouped-bf16-e256-t256-h2048 on
# v5p (3.93M of 1.38M: a router's top-k is dozens of reductions over the same tile), bounds
# what the estimate may miss, so that a "fits" near the limit says it is a lower bound.
LIVE_SPILL_LEAST = 0.3
LIVE_SPILL_MOST = 3.0
# An attention kernel's live values are its score block and their exponentials, which
# attention_scores_bytes sizes: flash-* spilled at most 0.95 of the live peak on every chip
# (flash-f32-b2048-causal on v7x: 17.15M of 18.00M), so its "fits" is a lower bound only beyond that.
LIVE_SPILL_MOST_ATTENTION = 1.0


# Chips whose compiler keeps each step of an unrolled column chain until the chain ends (a
# router's top-k slots, a sum of per-step maxima: tpu/body._column_chains), so that their body
# account is the one of kind "kept" (bench/probe_column_chains.py, probe_router_spills.py: about one
# padded column per step past the first on v4, v5e and v5p; v6e and v7x fold each in at once).
KEEPS_COLUMNS_CHIPS = frozenset({"v4", "v5e", "v5p"})


def account_kind(call: CapturedCall, target: str | None) -> str:
    """The kind of Unseen that is `call`'s body account on `target`: "kept" where the chip keeps a
    column chain's steps and the body has one, else "held"."""
    kept = target in KEEPS_COLUMNS_CHIPS and any(u.kind == "kept" for u in call.unseen)
    return "kept" if kept else "held"


def live_bytes(call: CapturedCall) -> int:
    """Peak bytes of the body's values live across a whole-value op; 0 when none are."""
    return max((u.bytes for u in call.unseen if u.kind == "live"), default=0)


def temporaries_estimate(call: CapturedCall, target: str | None = None) -> int:
    """The spill slots of the body's temporaries, at the least share the corpus measured, and on a
    chip that keeps an unrolled chain's steps, the steps it keeps beyond the plain account's peak
    (values it holds, not spills at a share: account_kind)."""
    kept = 0
    if account_kind(call, target) == "kept":
        kept = max(0, sum(u.bytes for u in held(call, "kept")) - sum(u.bytes for u in held(call)))
    return int(LIVE_SPILL_LEAST * live_bytes(call)) + kept


def internal_estimate(call: CapturedCall, target: str | None = None) -> int:
    """VMEM the compiler adds that no BlockSpec or scratch entry names: register spills of the
    kernel body. The model recognises the narrow-dot-into-f32 accumulator pattern, whose spills
    grow with the accumulator (SPILL_SHARE; on v5e and v5p with its lhs block where larger), the
    attention pattern, whose score block lives in VMEM, and values live across a reduction, a
    dot or a roll, at the least share measured (temporaries_estimate; unseen_could_overflow
    says when the most could overflow). The
    largest of the three, since they are one body's spills counted three ways."""
    share = SPILL_SHARE.get(target or "", max(SPILL_SHARE.values()))
    accumulator = accumulator_bytes(call)
    if accumulator <= NO_SPILL_UP_TO.get(target or "", 0):
        accumulator = 0
    spills = max(0, int(share * accumulator) - VREG_FILE_BYTES)
    if target in LHS_SPILL_CHIPS or target is None:  # whichever is larger: both size the same spills
        spills = max(spills, lhs_block_bytes(call))
    return max(spills, attention_scores_bytes(call), temporaries_estimate(call, target))


def total_estimate(call: CapturedCall, target: str | None = None) -> int:
    """The model's VMEM total for `call`: its windows and scratch plus the compiler's own share."""
    return sum(c.bytes for c in window_costs(call, target)) + internal_estimate(call, target)


def unseen_could_overflow(call: CapturedCall, total: int, limit: int, target: str | None = None) -> Unseen | None:
    """What the model cannot size in the body, when it could turn the model's
    "fits" into an overflow: the largest value the compiler stages in VMEM
    (capture.large_values: a big dot result, matmul-bf16-1024^3: 2.36M beside
    the windows), counted only for the patterns internal_estimate knows; else
    the body's live values, when their spills at the most share measured
    (LIVE_SPILL_MOST) exceed what internal_estimate counted by more than the
    headroom; of the two, the one that could add more. None when the verdict stands either
    way: quiet when all is well."""
    if total > limit or not call.unseen:
        return None
    staged = [u for u in call.unseen if u.kind == "staged"]
    largest = max(staged, key=lambda u: u.bytes, default=None)
    live = next((u for u in call.unseen if u.kind == "live"), None)
    most = LIVE_SPILL_MOST_ATTENTION if attention_scores_bytes(call) else LIVE_SPILL_MOST
    unsized = int(most * live.bytes) - internal_estimate(call, target) if live is not None else 0
    if largest is not None and total + largest.bytes > limit and largest.bytes >= unsized:
        return largest
    return live if live is not None and total + unsized > limit else None


def tile(dtype: str) -> tuple[int, int]:
    """The (sublanes, lanes) tile of a dtype in VMEM: 8 rows of 32-bit words,
    packed (bf16 16 rows, int8 32), 128 lanes."""
    return 8 * packing(dtype), 128
