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
    input inside a loop: Triton pipelines it over num_stages) or "value" (computed)."""

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
class SharedEstimate:
    """The model's shared memory of one kernel: the total and the terms it adds up (bytes)."""

    total: int
    terms: tuple[tuple[str, int], ...]


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
    ins = 0
    for op in call.operands:
        if op.role not in ("in", "out") or op.block_shape is None or op.memory_space not in (None, "smem"):
            continue
        ins += op.role == "in"
        what = f"{op.role} {op.index} block x {depth}" if depth > 1 else f"{op.role} {op.index} block"
        terms.append((what, _align(depth * block_bytes(op), MOSAIC_ALIGNMENT)))
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
    return SharedEstimate(sum(b for _, b in terms), tuple(terms))


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
    - A loop's dots (fori_loop over K) have the tiles they read from an input in the loop
      pipelined: num_stages copies for wgmma's narrow dots, num_stages - 1 otherwise, plus
      the blocks they read before the loop (attention's q), plus, for an f32 dot on sm_90+,
      one more copy of its right-hand tile (on sm_100 when its lhs is pipelined too). With
      num_stages 1 and no wgmma nothing is pipelined: the largest dot's blocks read before
      the loop plus its other operands (narrow: both; f32: one at a time; sm_100: B).
    - The largest of those (the compiler reuses the space); sm_100's tcgen05 mbarriers on
      top (8 bytes, 16 when pipelined).
    - A kernel with no dot: its reductions' cross-warp scratch, kept elements x 4 bytes x
      num_warps / 2 (within 2x, at most 4 KiB measured); elementwise: 0.
    """
    stages = max(1, kernel.stages)
    hopper = capability >= (9, 0)
    blackwell = capability >= (10, 0)
    outside = [d for d in kernel.dots if not d.in_loop]
    looped = [d for d in kernel.dots if d.in_loop]
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

    def converted_beside(d: GpuDot) -> int:
        total = 0
        for op in beside:
            size, elements = block_bytes(op), math.prod(op.block_shape or (1,)) or 1
            if blackwell:
                total += size // 4
            elif hopper:
                total += min(elements, 4096) * size // elements
            elif narrow(d):
                total += min(elements, 2048) * size // elements
        return total

    def alone(d: GpuDot) -> int:
        a, b, z = lhs(d), rhs(d), converted_beside(d)
        if d.rhs_transposed and narrow(d) and not hopper:
            b //= 4
        if narrow(d):
            return a + b + z
        return b + z if blackwell and wgmma(d) else max(a, b + z)

    def before(d: GpuDot) -> int:
        """The blocks a loop's dot reads before the loop."""
        return sum(s for s, f in ((lhs(d), d.lhs_from), (rhs(d), d.rhs_from)) if f in ("block", "slice"))

    def unpipelined(d: GpuDot) -> int:
        """A loop's dot with nothing pipelined: what it read before the loop stays while its
        other operands are converted (narrow: together; f32: one at a time); sm_100's f32
        tcgen05 dot: B alone."""
        if blackwell and wgmma(d) and not narrow(d):
            return rhs(d)
        others = [s for s, f in ((lhs(d), d.lhs_from), (rhs(d), d.rhs_from)) if f not in ("block", "slice")]
        return before(d) + (sum(others) if narrow(d) else max(others, default=0))

    terms: list[tuple[str, int]] = []
    candidates: list[tuple[str, int]] = []
    if outside:
        candidates.append(("dot operands", max(alone(d) for d in outside)))
    if looped and stages == 1 and not any(wgmma(d) and narrow(d) for d in looped):
        candidates.append(("loop dot operands", max(unpipelined(d) for d in looped)))
    elif looped:
        pipelined = extra = 0
        for d in looped:
            copies = stages if wgmma(d) and narrow(d) else stages - 1
            pipelined += copies * sum(s for s, f in ((lhs(d), d.lhs_from), (rhs(d), d.rhs_from)) if f == "loop")
            if wgmma(d) and not narrow(d) and d.rhs_from == "loop" and (not blackwell or d.lhs_from == "loop"):
                extra = max(extra, rhs(d))
        candidates.append((f"loop tiles x {stages} stages", pipelined + sum(before(d) for d in looped) + extra))
    if not kernel.dots and kernel.reduced:
        candidates.append(("reduction scratch", kernel.reduced * 4 * max(1, kernel.warps) // 2))
    if candidates:
        terms.append(max(candidates, key=lambda t: t[1]))
    if blackwell and any(wgmma(d) for d in kernel.dots):
        terms.append(("barriers", MBARRIER_BYTES * (2 if looped and stages > 1 else 1)))
    return SharedEstimate(sum(b for _, b in terms), tuple(terms))


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
      an sm_100 mbarrier's 8 bytes); median 0%; 96.8% within 10%; the worst -75% (an
      sm_90 f32 loop with num_stages=1 and K tiles of 16). Of 32 KiB or more (701): 99.3%
      within 10%, the worst -50% (sm_90 f32 with num_stages=1 or num_warps=8, whose
      epilogue conversion outweighs the tiles);
    - Triton requests under 4 KiB (reductions, 55 pairs): within 1 KiB.
    Kernels unlike those measured (other dot shapes, several loops, fp8) may be further off.
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
