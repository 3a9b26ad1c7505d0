"""What a Pallas GPU kernel's blocks take of shared memory, by model: the
blocks each backend stages there (measured against the compiler's requests,
tests/test_gpu_reports.py). Pure. Used to place the compiler's total on the
BlockSpecs (gpu_diagnostics.py) and to rank shrink fixes before the compiler
verifies them (fixes/search.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..dtypes import ITEM_BITS
from ..results import CapturedCall, Operand, Scoped
from .targets import gpu


@dataclass(frozen=True)
class GpuDot:
    """One dot_general of a GPU kernel's body, as the shared-memory model
    reads it. Each operand comes from "block" (an input's whole block, read outside any
    loop), "slice" (part of an input's block, outside any loop), "loop" (read from an
    input inside a loop: Triton pipelines it over num_stages), "gather" (read inside a
    loop at indices read in that loop: paged attention's pages) or "value" (computed)."""

    lhs: tuple[int, ...]  # the operands' shapes as the dot takes them
    rhs: tuple[int, ...]
    dtype: str  # the lhs's dtype, compiler spelling ("bf16")
    m: int  # the result's rows: the lhs's non-contracting size
    in_loop: bool  # a loop of the body (fori_loop) runs it
    lhs_from: str = "value"
    rhs_from: str = "value"
    lhs_input: int | None = None  # which input (in_specs index) it reads, when it reads one
    rhs_input: int | None = None
    rhs_dtype: str | None = None  # the rhs's dtype when it is not the lhs's
    rhs_transposed: bool = False  # the rhs contracts its last dimension (x @ y.T)
    loop: int = 0  # which top-level loop of the body runs it (1, 2, ...; 0: none, or not recorded)
    n: int = 0  # the result's columns: the rhs's non-contracting size (0: not recorded)
    lhs_transposed: bool = False  # the lhs is transposed since it was read or computed (p.T @ do)
    at: int = 0  # where the dot is in the body (equations walked before it; 0: not recorded)
    lhs_at: int = 0  # where the read that made each operand is (0: not a read, or not recorded)
    rhs_at: int = 0


@dataclass(frozen=True)
class GpuKernel:
    """What a GPU kernel's compiler params and body tell this model of its shared memory
    (kernel.py reads it in the worker: CapturedCall.family_facts on a GPU target)."""

    stages: int  # Triton num_stages (jax's default on CUDA: 3); Mosaic GPU max_concurrent_steps (1)
    warps: int  # Triton num_warps (4); Mosaic GPU: 4 (a warpgroup)
    sequential: tuple[int, ...] = ()  # Mosaic GPU: the grid axes it pipelines over ("sequential")
    reduction_scratch: int = 0  # Mosaic GPU: reduction_scratch_bytes, reserved when the body reduces
    reduced: int = 0  # the most elements a reduction of the body keeps (a row sum of (64, 256): 64)
    dots: tuple[GpuDot, ...] = ()
    mesh: bool = False  # a plgpu.kernel: what it stages is its body's run_scoped shared memory
    # Every primitive of the body, by name (None: not read, a kernel made by hand): what the
    # model has no rule for makes its figure a lower bound (unsized).
    primitives: tuple[str, ...] | None = None


def decode_facts(data: dict | None) -> GpuKernel | None:
    """A GpuKernel back from the worker's JSON (its tuples are lists there)."""
    if not data:
        return None
    dots = tuple(GpuDot(**{**g, "lhs": tuple(g["lhs"]), "rhs": tuple(g["rhs"])}) for g in data.get("dots", ()))
    primitives = data.get("primitives")
    return GpuKernel(
        **{
            **data,
            "sequential": tuple(data.get("sequential", ())),
            "dots": dots,
            "primitives": tuple(primitives) if primitives is not None else None,
        }
    )


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


# ---- the measured model: estimated_shared_memory ---------------------------------------------
#
# Every term below was measured against XLA's GPU compiler (jax 0.10.2, jax-cuda12-plugin
# 0.10.2) by bench/bench_gpu_smem_model.py, which compiles each kernel for a copy of the
# target whose shared-memory limit is 1 byte, so that the compiler states its request for
# kernels that fit too ("requested N, available: 1"); the figures are in bench/RESULTS.md
# ("Triton and Mosaic GPU shared memory: the model against the compiler (issue 33)").

MOSAIC_ALIGNMENT = 1024  # Mosaic GPU rounds each shared buffer up to 1 KiB (pallas/mosaic_gpu/core.SMEM_ALIGNMENT)
MBARRIER_BYTES = 8  # one mbarrier: Mosaic GPU's pipeline has one per step in flight; Triton's tcgen05 dots on sm_100
WGMMA_ROWS = 64  # a dot of fewer rows does not use Hopper's wgmma (nor Blackwell's tcgen05): it stays Ampere's mma
DEFAULT_CAPABILITY = (9, 0)  # when no target is named: the H100's


@dataclass(frozen=True)
class StagedBlock:
    """What the model stages in shared memory of one block of a kernel at its peak: its bytes
    there and how, "" for the whole block (a dot's operand outside any loop, a Mosaic GPU
    block), else "tiles f16[128,64] x 2 stages" and the like (Triton's tiles of a block)."""

    role: str  # "in" | "out"
    index: int
    bytes: int
    how: str = ""


@dataclass(frozen=True)
class SharedEstimate:
    """The model's shared memory of one kernel: the total, the terms it adds up (bytes) and,
    for the blocks among them, what each block stages (VMEM050 says it)."""

    total: int
    terms: tuple[tuple[str, int], ...]
    blocks: tuple[StagedBlock, ...] = ()


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


def _operand_bytes(call: CapturedCall, dot: GpuDot, side: str) -> int:
    """One dot operand's bytes in the dot's dtype. An input's whole block is read from the
    call's operands, so a block edited since the compile (gpu_budget.edited_call) counts as
    written now; a slice, a loop's tile or a value has the shape the trace saw."""
    shape = dot.lhs if side == "lhs" else dot.rhs
    source = dot.lhs_from if side == "lhs" else dot.rhs_from
    index = dot.lhs_input if side == "lhs" else dot.rhs_input
    dtype = dot.dtype if side == "lhs" else dot.rhs_dtype or dot.dtype
    if source == "block" and index is not None:
        block = next((op for op in call.operands if op.role == "in" and op.index == index), None)
        if block is not None and block.block_shape is not None:
            shape = block.block_shape
    return math.prod(d if d > 0 else 1 for d in shape) * ITEM_BITS.get(dtype, 32) // 8


def _mosaic_gpu(call: CapturedCall, kernel: GpuKernel | None) -> SharedEstimate:
    """Mosaic GPU's request is exact arithmetic (measured equal on every kernel of the bench):
    its pipeline allocates (depth, *block) for each input and output block in shared memory,
    each rounded up to 1 KiB, plus one mbarrier per step in flight when an input is staged;
    the user's SMEM scratch, each rounded up; and reduction_scratch_bytes when the body
    reduces. The depth is max_concurrent_steps, cut to the steps of the grid's sequential
    axes (1 when every axis is parallel, the default)."""
    stages = kernel.stages if kernel is not None else 1
    sequential = kernel.sequential if kernel is not None else ()
    steps = math.prod(call.grid[a] for a in sequential if a < len(call.grid)) if sequential else 1
    depth = max(1, min(stages, steps) if steps > 0 else stages)  # -1: a grid known at run time
    terms: list[tuple[str, int]] = []
    blocks: list[StagedBlock] = []
    ins = 0
    for op in call.operands:
        if op.role not in ("in", "out") or op.block_shape is None or op.memory_space not in (None, "smem"):
            continue
        ins += op.role == "in"
        what = f"{op.role} {op.index} block x {depth}" if depth > 1 else f"{op.role} {op.index} block"
        terms.append((what, _align(depth * block_bytes(op), MOSAIC_ALIGNMENT)))
        blocks.append(StagedBlock(op.role, op.index, terms[-1][1], f"x {depth} steps in flight" if depth > 1 else ""))
    for s in call.scratch:
        if s.memory_space == "smem":
            size = math.prod(s.shape) * ITEM_BITS.get(s.dtype or "", 8) // 8
            terms.append((f"scratch {s.index}", _align(size, MOSAIC_ALIGNMENT)))
    for entry in peak_allocations(call):
        terms.append((f"{entry.dtype}[{','.join(map(str, entry.shape))}] (line {line_of(entry)})", scoped_bytes(entry)))
    if kernel is not None and kernel.reduced and kernel.reduction_scratch:
        terms.append(("reduction scratch", _align(kernel.reduction_scratch, MOSAIC_ALIGNMENT)))
    if ins:
        terms.append(("barriers", MBARRIER_BYTES * depth))
    return SharedEstimate(sum(b for _, b in terms), tuple(terms), tuple(blocks))


def scoped_bytes(entry: Scoped) -> int:
    """One allocation of a kernel body's shared memory as Mosaic GPU lays it out: a buffer
    rounded up to 1 KiB, an mbarrier 8 bytes each (measured: ragged_dot_mgpu's 6-step
    pipeline of two f16 tiles, 294912 + 48 bytes)."""
    if entry.dtype == "barrier":
        return MBARRIER_BYTES * math.prod(entry.shape or (1,))
    return _align(math.prod(entry.shape) * ITEM_BITS.get(entry.dtype, 32) // 8, MOSAIC_ALIGNMENT)


def allocation_label(entry: Scoped) -> str:
    """An allocation of a plgpu.kernel's body as a VMEM050 names it: "pipeline buffers 6 x
    f16[192,64]" (emit_pipeline's (steps, *block)), "shared memory f32[128,128]"."""
    if entry.window is not None and len(entry.shape) > 1:
        return f"pipeline buffers {entry.shape[0]} x {entry.dtype}[{','.join(str(d) for d in entry.shape[1:])}]"
    return f"shared memory {entry.dtype}[{','.join(str(d) for d in entry.shape)}]"


def line_of(entry: Scoped) -> str:
    return str(entry.origin.line) if entry.origin is not None else "?"


def peak_allocations(call: CapturedCall) -> list[Scoped]:
    """The shared-memory allocations of a kernel body (run_scoped: plgpu.SMEM, a pipeline's
    buffers) live together at its peak: those of the nested scopes whose sum is largest (a
    scope's allocations are freed when it ends, so two scopes one after the other share)."""
    entries = [e for e in call.scoped if e.memory_space == "smem"]
    if not entries:
        return []
    parents = {e.scope: e.parent for e in call.scoped}
    own: dict[int, int] = {}
    for e in entries:
        own[e.scope] = own.get(e.scope, 0) + scoped_bytes(e)

    def chain(scope: int) -> list[int]:
        found = []
        while scope >= 0 and scope not in found:
            found.append(scope)
            scope = parents.get(scope, -1)
        return found

    peak = max(own, key=lambda scope: sum(own.get(s, 0) for s in chain(scope)))
    live = set(chain(peak))
    return [e for e in entries if e.scope in live]


def _triton(call: CapturedCall, kernel: GpuKernel, capability: tuple[int, int]) -> SharedEstimate:
    """Triton's request, from the dots of the body (each rule measured, bench/RESULTS.md).
    A and B are a dot's operands' bytes; "narrow" is 16 bits or fewer; sm_90+ dots of 64
    rows or more use wgmma (sm_100: tcgen05), the others Ampere's mma.

    - A dot outside any loop converts its operands through shared memory: narrow ones both
      at once (A + B), f32 ones one at a time (max(A, B)); on sm_100 an f32 dot of 64 rows
      or more stages B alone. On sm_80/89 a narrow transposed B (x @ y.T) counts a quarter.
      An input block no dot reads (a bias added to the result) is converted beside it: up
      to 4096 of its elements on sm_90, a quarter of it on sm_100, up to 2048 elements for
      a narrow dot on sm_80/89 (nothing for f32 there); f32: max(A, B + that).
    - Each loop of the body (fori_loop) on its own, the space reused from one to the next:
      - the blocks its dots read before the loop (attention's q), held across it;
      - the tiles its dots read from an input in the loop, pipelined: num_stages copies for
        wgmma's narrow dots, num_stages - 1 otherwise; a tile read once and taken by two
        dots (the backward's q) counted once; a tile gathered at indices read in the loop
        (paged attention's pages, by the page table) one copy; for an f32 dot on sm_90+,
        one more copy of its right-hand tile (on sm_100 when its lhs is pipelined too);
      - what a dot converts through shared memory while it runs, the largest of its dots:
        a computed lhs transposed (the backward's p.T @ do), or on mma when the result has
        fewer rows than columns (Triton lays the warps along the columns, so the chained
        dot's accumulator is not in the operand's layout: flash attention's p with block_q <
        head_dim); a computed rhs on wgmma; with num_stages 1 nothing is pipelined and each
        dot converts its loop tiles too (narrow: together; f32: one at a time; sm_100's f32
        tcgen05 dot: B alone), wgmma's narrow dots all the tiles read and not yet used by
        their last dot (held from their read on). Gathered tiles with num_stages 1 are left
        out (the compiler converts them in pieces, measured at a quarter to all of a tile).
    - The largest of those; sm_100's tcgen05 mbarriers on top (8 bytes, 16 when pipelined).
    - A kernel with no dot: its reductions' cross-warp scratch, kept elements x 4 bytes x
      num_warps / 2 (within 2x, at most 4 KiB measured); elementwise: 0.
    """
    stages = max(1, kernel.stages)
    hopper = capability >= (9, 0)
    blackwell = capability >= (10, 0)
    outside = [d for d in kernel.dots if not d.in_loop]
    loops: dict[int, list[GpuDot]] = {}
    for d in kernel.dots:
        if d.in_loop:
            loops.setdefault(d.loop, []).append(d)
    read = {i for d in kernel.dots for i in (d.lhs_input, d.rhs_input) if i is not None}
    beside = [op for op in call.operands if op.role == "in" and op.index not in read and op.block_shape is not None]

    def narrow(d: GpuDot) -> bool:
        return ITEM_BITS.get(d.dtype, 32) <= 16

    def wgmma(d: GpuDot) -> bool:
        return hopper and d.m >= WGMMA_ROWS

    def lhs(d: GpuDot) -> int:
        return _operand_bytes(call, d, "lhs")

    def rhs(d: GpuDot) -> int:
        return _operand_bytes(call, d, "rhs")

    def beside_of(d: GpuDot, op) -> int:
        size, elements = block_bytes(op), math.prod(op.block_shape or (1,)) or 1
        if blackwell:
            return size // 4
        if hopper:
            return min(elements, 4096) * size // elements
        return min(elements, 2048) * size // elements if narrow(d) else 0

    def converted_beside(d: GpuDot) -> int:
        return sum(beside_of(d, op) for op in beside)

    def alone(d: GpuDot) -> int:
        a, b, z = lhs(d), rhs(d), converted_beside(d)
        if d.rhs_transposed and narrow(d) and not hopper:
            b //= 4
        if narrow(d):
            return a + b + z
        return b + z if blackwell and wgmma(d) else max(a, b + z)

    def how(d: GpuDot, side: str, source: str, copies: int = 0) -> str:
        """How the model stages one operand of a dot that reads an input ("" the whole block)."""
        dtype = d.dtype if side == "lhs" else d.rhs_dtype or d.dtype
        index = d.lhs_input if side == "lhs" else d.rhs_input
        shape = d.lhs if side == "lhs" else d.rhs
        block = next((op.block_shape for op in call.operands if op.role == "in" and op.index == index), None)
        if block and len(shape) == 2 and shape[-1] != block[-1] and shape[0] == block[-1]:
            shape = shape[::-1]  # the tile as read (k), not as the dot takes it (k.T)
        tile = f"{dtype}[{','.join(str(n) for n in shape)}]"
        stages_said = f"x {copies} stage{'s' if copies != 1 else ''}"
        if source == "slice":
            return f"a slice {tile}" + (" held across the loop" if d.in_loop else "")
        if source == "gather":
            return f"tiles {tile} {stages_said}, gathered at indices read in the loop"
        if source == "loop":
            return f"tiles {tile} {stages_said}" if copies else f"a tile {tile} at a time"
        return ""

    def alone_blocks(d: GpuDot) -> dict[int, tuple[int, str]]:
        """The blocks a dot outside any loop stages, each with its own bytes (f32 ones are
        staged one at a time: each is its own peak)."""
        found: dict[int, tuple[int, str]] = {}
        for side, index, source in (("lhs", d.lhs_input, d.lhs_from), ("rhs", d.rhs_input, d.rhs_from)):
            size = lhs(d) if side == "lhs" else rhs(d)
            if side == "rhs" and d.rhs_transposed and narrow(d) and not hopper:
                size //= 4
            if side == "lhs" and blackwell and wgmma(d) and not narrow(d):
                continue  # sm_100's f32 tcgen05 dot stages B alone
            if index is not None and source in ("block", "slice"):
                found[index] = (size, how(d, side, source))
        for op in beside:
            if (size := beside_of(d, op)) > 0:
                found[op.index] = (size, "converted beside the dot")
        return found

    def converted(d: GpuDot, live: int) -> int:
        """What a loop's dot converts through shared memory while it runs; `live`: the loop
        tiles read and not yet used by their last dot where this one runs, which wgmma's
        narrow dots hold in shared memory from their read on when nothing is pipelined."""
        if stages == 1 and blackwell and wgmma(d) and not narrow(d):
            return rhs(d)
        parts = []
        if d.lhs_from == "value" and (d.lhs_transposed or (not wgmma(d) and 0 < d.m < d.n)):
            parts.append(lhs(d))
        if d.rhs_from == "value" and wgmma(d):
            parts.append(rhs(d))
        if stages == 1 and wgmma(d) and narrow(d):
            parts.append(live)
        elif stages == 1:
            parts += [size for size, f in ((lhs(d), d.lhs_from), (rhs(d), d.rhs_from)) if f == "loop"]
        return sum(parts) if narrow(d) else max(parts, default=0)

    def in_loop(dots: list[GpuDot]) -> tuple[int, dict[int, tuple[int, str]]]:
        """A loop's shared memory, and what each input block takes of it."""
        held: dict[tuple, int] = {}  # read before the loop, by input
        tiles: dict[tuple, int] = {}  # read in it, by input: bytes x copies
        lives: dict[tuple, tuple[int, int, int]] = {}  # read in it, by input: (read at, last used at, bytes)
        found: dict[int, tuple[int, str]] = {}
        extra = during = 0
        for d in dots:
            for size, source, index, side, at in (
                (lhs(d), d.lhs_from, d.lhs_input, "lhs", d.lhs_at),
                (rhs(d), d.rhs_from, d.rhs_input, "rhs", d.rhs_at),
            ):
                key = (source, index) if index is not None else (source, id(d), side)
                if source in ("block", "slice") and not (stages == 1 and blackwell and wgmma(d) and not narrow(d)):
                    held[key] = max(held.get(key, 0), size)
                    staged = size
                    copies = 0
                elif source in ("loop", "gather") and stages > 1:
                    copies = 1 if source == "gather" else stages if wgmma(d) and narrow(d) else stages - 1
                    tiles[key] = max(tiles.get(key, 0), copies * size)
                    staged = copies * size
                elif source == "loop":
                    read, last, was = lives.get(key, (at, d.at, 0))
                    lives[key] = (min(read, at), max(last, d.at), max(was, size))
                    staged, copies = size, 0
                else:
                    continue
                if index is not None and staged > found.get(index, (0, ""))[0]:
                    found[index] = (staged, how(d, side, source, copies))
            if stages > 1 and wgmma(d) and not narrow(d) and d.rhs_from == "loop":
                if not blackwell or d.lhs_from == "loop":
                    extra = max(extra, rhs(d))
        for d in dots:
            live = sum(size for read, last, size in lives.values() if read <= d.at <= last)
            during = max(during, converted(d, live))
        return sum(held.values()) + sum(tiles.values()) + extra + during, found

    terms: list[tuple[str, int]] = []
    candidates: list[tuple[str, int, dict[int, tuple[int, str]]]] = []
    if outside:
        widest = max(outside, key=alone)
        candidates.append(("dot operands", alone(widest), alone_blocks(widest)))
    for number, dots in sorted(loops.items()):
        what = f"loop {number} tiles x {stages} stages" if len(loops) > 1 else f"loop tiles x {stages} stages"
        candidates.append((what, *in_loop(dots)))
    if not kernel.dots and kernel.reduced:
        candidates.append(("reduction scratch", kernel.reduced * 4 * max(1, kernel.warps) // 2, {}))
    blocks: tuple[StagedBlock, ...] = ()
    if candidates:
        what, size, found = max(candidates, key=lambda t: t[1])
        terms.append((what, size))
        blocks = tuple(StagedBlock("in", index, b, h) for index, (b, h) in sorted(found.items()))
    if blackwell and any(wgmma(d) for d in kernel.dots):
        terms.append(("barriers", MBARRIER_BYTES * (2 if loops and stages > 1 else 1)))
    return SharedEstimate(sum(b for _, b in terms), tuple(terms), blocks)


def shared_memory_estimate(call: CapturedCall, backend: str | None, target: str | None = None) -> SharedEstimate:
    """The model's shared memory of a Pallas GPU kernel, with its terms; see
    estimated_shared_memory for what it is and how far it may be off."""
    backend = backend or call.backend or "triton"
    kernel = call.family_facts
    if backend == "mosaic_gpu":
        return _mosaic_gpu(call, kernel)
    if kernel is None:  # not captured (a result from before the field): the largest input block
        size = staged_bytes(call, backend)
        return SharedEstimate(size, (("largest input block", size),) if size else ())
    capability = gpu(target).capability if target else DEFAULT_CAPABILITY
    return _triton(call, kernel, capability)


def staged_blocks(call: CapturedCall, backend: str | None, target: str | None = None) -> list[tuple[Operand, int, str]]:
    """The blocks the model stages in shared memory, each with its bytes there and how ("" the
    whole block; Triton's tiles of a block read in a loop: "tiles f16[128,64] x 2 stages"); a
    call with no captured kernel (an older result), or whose model stages no block of its own
    (reductions), gets `staged`'s blocks whole."""
    estimate = shared_memory_estimate(call, backend, target)
    ops = {(op.role, op.index): op for op in staged(call, backend or call.backend)}
    found = [(ops[(b.role, b.index)], b.bytes, b.how) for b in estimate.blocks if (b.role, b.index) in ops]
    return found or [(op, block_bytes(op), "") for op in ops.values()]


def estimated_shared_memory(call: CapturedCall, backend: str | None, target: str | None = None) -> int:
    """The bytes of shared memory the GPU compiler will request for this kernel's
    block (what "requested N" says when it refuses one), without compiling: blocks x
    dtype x stages where stages apply, Mosaic GPU's alignment and barriers, Triton's
    per-architecture rules (`target`: a GPU target of gpus.py; None: the H100's sm_90).
    Reads `call.operands` (edited block shapes count as written) and `call.family_facts`
    (stages, warps, dots, captured by the worker on a GPU target).

    Error, measured against the compiler on 320 kernels x 5 targets (jax 0.10.2, plugin
    0.10.2; bench/bench_gpu_smem_model.py, the table in bench/RESULTS.md):
    - Mosaic GPU (180 pairs): exact on every one (copies, adds, reductions, SMEM scratch,
      1 to 8 pipeline steps, blocks of 512 B to 128 KiB, sm_80 to sm_100);
    - Triton, requests of 4 KiB or more (1,355 pairs): never above the compiler (but for
      an sm_100 mbarrier's 8 bytes); median 0%; 97.6% within 10%; the worst -75% (an
      sm_90 f32 loop with num_stages=1 and K tiles of 16). Of 32 KiB or more (701): 99.3%
      within 10%, the worst -50% (sm_90 f32 with num_stages=1 or num_warps=8, whose
      epilogue conversion outweighs the tiles);
    - Triton requests under 4 KiB (reductions, 55 pairs): within 1 KiB;
    - jax's own Triton kernels as jax's tests call them (tests/data/gpu_corpus, 29 kernels
      x h100, a100, l4, b200): median 0%, 97% within 10%, never above, the worst -23% (the
      attention backward on sm_100); on a wider grid of them (bench/jax_gpu_grid, 1,068
      pairs) 93% within 10%, the worst -67% (paged attention with num_stages 1).
    Kernels unlike those measured (fp8, batched dots) may be further off.
    A kernel the worker captured no gpu_kernel for (an older result) gets the largest
    input block, the model before this one.
    """
    return shared_memory_estimate(call, backend, target).total


# ---- how sure the model is: unsized, most_requested ---------------------------------------------
#
# Without a compile (check --no-compile) the model is the verdict, so what it was not measured on
# must not pass as a fit. Two things make its figure unsure:
# - a body with an operation it has no rule for (a transpose, a reshape, a sort, Mosaic GPU's own
#   copies and wgmma, a dot in a Mosaic GPU body), a batched or 8-bit dot, a body the worker did
#   not read: what those take of shared memory is not counted, the figure is a lower bound;
# - its measured error: Triton's request may be above the figure (never below it), by up to 75%
#   of the request from 4 KiB, 50% from 32 KiB, 1 KiB under 4 KiB (bench/RESULTS.md). jax's own
#   attention (jax.experimental.pallas.ops.gpu.attention.mha), whose key tiles are transposed
#   before their dot, is 25% to 45% under.

REDUCTIONS = ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or", "argmax", "argmin")

# What takes no shared memory of its own in either backend's lowering: elementwise math and
# logic in registers, loads and stores of refs (global memory or the staged blocks counted
# already), broadcasts, indices, and control flow (their bodies are read too).
WITHOUT_SHARED_MEMORY = frozenset(
    {
        *("add", "sub", "mul", "div", "rem", "pow", "integer_pow", "max", "min", "neg", "sign", "abs"),
        *("floor", "ceil", "round", "is_finite", "exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic"),
        *("sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh"),
        *("sqrt", "rsqrt", "cbrt", "square", "erf", "erfc", "erf_inv", "clamp", "nextafter", "copy", "copy_p"),
        *("not", "and", "or", "xor", "shift_left", "shift_right_logical", "shift_right_arithmetic"),
        *("population_count", "clz", "eq", "ne", "lt", "le", "gt", "ge", "select_n"),
        *("convert_element_type", "bitcast_convert_type", "reduce_precision", "iota", "broadcast_in_dim"),
        *("squeeze", "expand_dims", "program_id", "num_programs", "multiple_of", "max_contiguous"),
        *("get", "swap", "masked_load", "masked_swap", "load", "store"),
        *("scan", "while", "cond", "jit", "pjit", "closed_call", "remat", "checkpoint"),
        *("custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr"),
    }
)

# What each backend's model has a rule for, beside those: Triton's dots and reductions, Mosaic
# GPU's reductions (its measured kernels have no dot).
SIZED = {
    "triton": WITHOUT_SHARED_MEMORY | {"dot_general", *REDUCTIONS},
    "mosaic_gpu": WITHOUT_SHARED_MEMORY | set(REDUCTIONS),
}
BACKEND_NAMES = {"triton": "Triton", "mosaic_gpu": "Mosaic GPU"}

# Triton's request against the model's figure, as measured: from LARGE bytes at most 1 / (1 - 0.50)
# of it, from SMALL at most 1 / (1 - 0.75), below SMALL at most SMALL_SLACK more.
TRITON_UNDER, TRITON_UNDER_LARGE, TRITON_LARGE = 0.75, 0.50, 32768
TRITON_SMALL, TRITON_SMALL_SLACK = 4096, 1024


def unsized(call: CapturedCall, backend: str | None) -> str | None:
    """Why the model's figure of this kernel is only a lower bound (what of it the model has no
    rule for, in words), or None when every part of it is of a kind it was measured on."""
    backend = backend or call.backend or "triton"
    kernel = call.family_facts
    name = BACKEND_NAMES.get(backend, backend)
    if kernel is not None and kernel.mesh:
        return (
            "the model counts only what a plgpu.kernel's body allocates (its plgpu.SMEM, its pipelines' "
            "buffers), not what its own ops take"
        )
    if kernel is None or kernel.primitives is None:
        return "the worker did not read the kernel body, so only its blocks are counted"
    unknown = sorted(set(kernel.primitives) - SIZED.get(backend, WITHOUT_SHARED_MEMORY))
    if unknown:
        listed = ", ".join(unknown[:4]) + (f" and {len(unknown) - 4} more" if len(unknown) > 4 else "")
        return f"the model has no rule for {listed} in a {name} kernel body"
    for dot in kernel.dots:
        if len(dot.lhs) != 2 or len(dot.rhs) != 2:
            return f"the model was not measured on batched dots (a dot of {len(dot.lhs)}-d operands)"
        if min(ITEM_BITS.get(dot.dtype, 32), ITEM_BITS.get(dot.rhs_dtype or dot.dtype, 32)) < 16:
            return f"the model was not measured on 8-bit dots ({dot.dtype})"
    return None


def most_requested(call: CapturedCall, backend: str | None, estimate: int) -> int:
    """The largest request the compiler may make of a kernel the model puts at `estimate`, by
    the model's measured error: Mosaic GPU's is exact; Triton's may be above it (never below)."""
    if (backend or call.backend or "triton") == "mosaic_gpu":
        return estimate
    return max(
        math.ceil(estimate / (1 - TRITON_UNDER_LARGE)),
        min(math.ceil(estimate / (1 - TRITON_UNDER)), TRITON_LARGE - 1),
        min(estimate + TRITON_SMALL_SLACK, TRITON_SMALL - 1),
    )
