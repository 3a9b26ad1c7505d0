"""Capturing an example's calls, inside the worker: each pallas_call the
trace reached is described (operands, scratch, scoped buffers, values the
layout model cannot place, as `results.CapturedCall`) and compiled alone for
a TPU target with no TPU attached; verdicts are kept by what decides them,
so an edit elsewhere in the file compiles nothing again.

Imports jax; only the worker process loads this module.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import time
import traceback
from dataclasses import dataclass, replace
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import SingleDeviceSharding

from ..dtypes import COMPILER_DTYPES
from ..gpu import ptxas as gpu_spills
from ..gpu.compile import (
    compiled_mosaic_for,
    compiling_where,
    lowers_with_mosaic_gpu,
    mosaic_gpu_limit,
    printed_errors,
    with_printed,
)
from ..gpu.kernel import gpu_kernel_of
from ..gpu.targets import is_gpu
from ..results import CapturedCall, Operand, Origin, Scoped, Scratch, Unseen
from ..tpu import layout
from ..tpu import profile as speed
from . import jax_compat
from .devices import target_device, trace_device
from .provenance import (
    PROVENANCE,
    SCOPED,
    Provenance,
    ScopedRecord,
    is_user_file,
    recording,
    scoped_record,
    traceback_origin,
)
from .request_limits import OverTime
from .tracing import IN_PROGRAM, extra, trace_example


def compiler_dtype(dtype) -> str:
    name = jnp.dtype(dtype).name if not hasattr(dtype, "name") else dtype.name
    return COMPILER_DTYPES.get(name, name)


def _block_sizes(block_shape) -> tuple[int, ...]:
    sizes = []
    for dim in block_shape:
        size = getattr(dim, "block_size", dim)
        sizes.append(int(size) if isinstance(size, int) else 1)
    return tuple(sizes)


def _memory_space(aval) -> str | None:
    space = getattr(aval, "memory_space", None)
    if space is None:
        return None
    name = str(getattr(space, "value", space)).lower()
    return None if name in ("default", "none") else name


def _constant_index(block_mapping, grid) -> bool:
    """The index map gives one block for the whole grid: no output depends on a
    grid axis of extent above 1 (or known only at run time). Literals, closed-over
    constants, axes of extent 1 and scalar-prefetch refs (read, never written,
    during the grid) do not change from step to step.

    The case that decided it (extent1-grid-v6e, the same on v5e; bench/RESULTS.md):
    with grid=(1, 8), an input whose index map is `lambda i, j: (i, 0)` is
    "single buffered", the output's `(i, j)` "has 2 buffering levels", and
    `(i * 2, 0)` and a prefetched table's `(idx[i], 0)` are single buffered too:
    the compiler sees the iteration bounds, not only literal indices."""
    jaxpr = block_mapping.index_map_jaxpr.jaxpr
    varying = {id(v) for v, extent in zip(jaxpr.invars, grid) if not (isinstance(extent, int) and extent == 1)}
    for eqn in jaxpr.eqns:
        if any(id(v) in varying for v in eqn.invars if not isinstance(v, jax_compat.Literal)):
            varying.update(id(v) for v in eqn.outvars)
    return not any(id(v) in varying for v in jaxpr.outvars if not isinstance(v, jax_compat.Literal))


def _vmem_limit(compiler_params) -> int | None:
    params = compiler_params
    if isinstance(params, dict):
        params = params.get("mosaic_tpu", params.get("mosaic", None))
    if isinstance(params, dict):
        return params.get("vmem_limit_bytes")
    return getattr(params, "vmem_limit_bytes", None)


# The modules of jax whose compiler params name a GPU backend (jax 0.9 on: classes) and the
# keys of older params dicts, for each platform.
GPU_PARAMS = ("triton", "mosaic_gpu")
TPU_PARAMS = ("mosaic", "mosaic_tpu")


def params_platform(compiler_params) -> str | None:
    """ "gpu" or "tpu" when a kernel's compiler params are for one platform (pltriton,
    plgpu, pltpu); None when it gives none, and lowers for any."""
    if not compiler_params:
        return None
    if isinstance(compiler_params, dict):
        keys = set(compiler_params)
        return "gpu" if keys & set(GPU_PARAMS) else "tpu" if keys & set(TPU_PARAMS) else None
    module = type(compiler_params).__module__
    if any(f".{name}." in f"{module}." for name in GPU_PARAMS):
        return "gpu"
    if any(f".{name}." in f"{module}." for name in TPU_PARAMS):
        return "tpu"
    return None


def gpu_backend_of(compiler_params) -> str:
    return "mosaic_gpu" if lowers_with_mosaic_gpu(compiler_params) else "triton"


def _pick(origins, index):
    return origins[index] if index < len(origins) else None


def describe(eqn, provenance: Provenance | None) -> dict:
    """The call's operands and scratch, numbered as the compiler numbers them:
    scalar-prefetch operands first, then the inputs; outputs on their own."""
    mapping = eqn.params["grid_mapping"]
    prov = provenance or Provenance(None, (), (), ())
    prefetch = mapping.num_index_operands
    # pallas_call's operands are *dynamic_grid_sizes, *prefetch, *inputs; the
    # custom call does not take the dynamic grid sizes.
    dynamic = len(eqn.invars) - prefetch - mapping.num_inputs
    operands = [
        Operand("prefetch", i, i, compiler_dtype(v.aval.dtype), tuple(v.aval.shape), None, "smem", None, True, None)
        for i, v in enumerate(eqn.invars[dynamic : dynamic + prefetch])
    ]
    for n, bm in enumerate(mapping.block_mappings):
        is_input = n < mapping.num_inputs
        index = n if is_input else n - mapping.num_inputs
        operands.append(
            Operand(
                role="in" if is_input else "out",
                index=index,
                operand=prefetch + index if is_input else index,
                dtype=compiler_dtype(jax_compat.array_aval(bm).dtype),
                full_shape=tuple(jax_compat.array_aval(bm).shape),
                block_shape=_block_sizes(bm.block_shape),
                memory_space=_memory_space(jax_compat.block_aval(bm)),
                buffer_count=getattr(bm.pipeline_mode, "buffer_count", None),
                constant_index=_constant_index(bm, mapping.grid),
                origin=_pick(prov.in_origins if is_input else prov.out_origins, index),
                path=getattr(bm, "origin", None) or None,
            )
        )
    scratch = [
        Scratch(
            i,
            compiler_dtype(a.dtype) if hasattr(a.dtype, "name") else str(a.dtype),
            tuple(int(d) for d in a.shape),
            _memory_space(a),
            _pick(prov.scratch_origins, i),
        )
        for i, a in enumerate(jax_compat.scratch_avals(eqn))
    ]
    grid = tuple(int(g) if isinstance(g, int) else -1 for g in mapping.grid)
    return dict(
        grid=grid,
        num_scalar_prefetch=prefetch,
        operands=tuple(operands),
        scratch=tuple(scratch),
        vmem_limit_bytes=_vmem_limit(eqn.params.get("compiler_params")),
        scoped=extra(scoped_buffers, (), eqn.params["jaxpr"]),
        unseen=extra(large_values, (), eqn.params["jaxpr"]),
        flops_per_step=extra(body_flops, None, eqn.params["jaxpr"]),
        loops_unknown=extra(has_unknown_loops, False, eqn.params["jaxpr"]),
        steps_vary=extra(has_conditional_work, False, eqn.params["jaxpr"]),
    )


def has_unknown_loops(kernel_jaxpr) -> bool:
    """Whether the kernel body runs a loop whose trip count is not known when it
    compiles (a while loop: a fori_loop over traced bounds, a loop over the
    scalar-prefetched lengths of ragged attention). The compiler's static
    estimate counts such a body once (bench/RANK.md), so its cycles do not
    follow the block sizes that change the trip count."""

    def walk(jaxpr) -> bool:
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "while" or any(walk(sub) for sub in jax_compat.jaxprs_in_params(eqn.params)):
                return True
        return False

    return walk(kernel_jaxpr)


def has_conditional_work(kernel_jaxpr) -> bool:
    """Whether the kernel body does matrix work under a condition (a `pl.when` or
    `lax.cond` with a dot inside: causal attention skips the blocks above the
    diagonal), so its grid steps do not all cost alike. A matmul's `pl.when`
    that zeroes or stores its accumulator has no dot, and does not count."""

    def has_dot(jaxpr) -> bool:
        return any(
            eqn.primitive.name == "dot_general" or any(has_dot(sub) for sub in jax_compat.jaxprs_in_params(eqn.params))
            for eqn in jaxpr.eqns
        )

    def walk(jaxpr) -> bool:
        for eqn in jaxpr.eqns:
            subs = jax_compat.jaxprs_in_params(eqn.params)
            if eqn.primitive.name == "cond" and any(has_dot(sub) for sub in subs):
                return True
            if any(walk(sub) for sub in subs):
                return True
        return False

    return walk(kernel_jaxpr)


def body_flops(kernel_jaxpr) -> int:
    """The matrix work of one grid step: 2*M*N*K for each dot_general of the
    kernel body, a scan's body as many times as it runs (a while loop's once:
    its trip count is not known). Elementwise work is left out: the roofline
    that reads this (sweep/rank.py) weighs the MXU against HBM traffic."""

    def walk(jaxpr) -> int:
        total = 0
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general":
                (contracting, _), _ = eqn.params["dimension_numbers"]
                lhs, out = eqn.invars[0].aval, eqn.outvars[0].aval
                depth = math.prod(int(lhs.shape[d]) for d in contracting)
                total += 2 * math.prod(int(d) for d in out.shape) * depth
                continue
            times = int(eqn.params.get("length", 1)) if eqn.primitive.name == "scan" else 1
            total += times * sum(walk(sub) for sub in jax_compat.jaxprs_in_params(eqn.params))
        return total

    return walk(kernel_jaxpr)


def scoped_buffers(kernel_jaxpr) -> tuple[Scoped, ...]:
    """The VMEM buffers the kernel body allocates with run_scoped, at any
    depth (a pipeline inside a pipeline), in trace order, each with what made
    it. The compiler's report (pipeline-flat-v6e, emit_pipeline of a copy)
    lists one "scoped memory for ..." allocation per inner BlockSpec, of the
    run_scoped ref's (buffers, *block) shape."""
    found: list[Scoped] = []
    scopes = [0]

    def walk(jaxpr, parent):
        for eqn in jaxpr.eqns:
            if jax_compat.run_scoped_p is not None and eqn.primitive is jax_compat.run_scoped_p:
                scope = scopes[0]
                scopes[0] += 1
                body = eqn.params["jaxpr"]
                refs = [v.aval for v in body.invars]
                where = traceback_origin(eqn.source_info.traceback)
                entries = SCOPED.get((where.file, where.line, len(refs))) if where is not None else None
                for n, aval in enumerate(refs):
                    space = _memory_space(aval)
                    inner = getattr(aval, "inner_aval", aval)
                    if space not in (None, "vmem") or not hasattr(inner, "shape"):
                        continue
                    known, record = scoped_record(aval)
                    if not known:
                        record = entries[n] if entries else None
                    record = record or ScopedRecord("run_scoped", where, 1)
                    found.append(
                        Scoped(
                            record.kind,
                            len(found),
                            compiler_dtype(inner.dtype),
                            tuple(int(d) for d in inner.shape),
                            record.buffers,
                            space,
                            record.origin,
                            scope,
                            parent,
                            record.window,
                            record.caller,
                        )
                    )
                walk(body, scope)
                continue
            for sub in jax_compat.jaxprs_in_params(eqn.params):
                walk(sub, parent)

    walk(kernel_jaxpr, -1)
    return tuple(found)


# Values up to this size stay in the vector registers (64 x 4 KiB).
VREG_FILE_BYTES = 64 * 4096


# Primitives whose big results the compiler stages in VMEM: a dot's result
# (matmul-bf16-1024^3: internal scratch beside its f32[1024,1024] dot)
# and a transpose. A load, a store or an elementwise op of a block streams
# through the registers (pipeline-flat-v6e: a copy of f32[1024,8192] blocks needed
# nothing beyond its pipeline windows).
STAGED_IN_VMEM = ("dot_general", "transpose")


def large_values(kernel_jaxpr, most: int = 3) -> tuple[Unseen, ...]:
    """The largest results of STAGED_IN_VMEM primitives in the kernel body
    that do not fit the vector registers, biggest first, then the body's
    values live across a whole-value op at their peak (live_values): VMEM the
    compiler adds (internal scratch) that no spec names and the model can only
    bound."""
    found = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            for var in eqn.outvars if eqn.primitive.name in STAGED_IN_VMEM else ():
                aval = var.aval
                if not hasattr(aval, "shape") or not hasattr(aval, "dtype") or hasattr(aval, "inner_aval"):
                    continue
                try:
                    size = int(jnp.dtype(aval.dtype).itemsize) * math.prod(int(d) for d in aval.shape)
                except TypeError:
                    continue
                if size > VREG_FILE_BYTES:
                    what = f"{compiler_dtype(aval.dtype)}[{','.join(str(int(d)) for d in aval.shape)}] from {eqn.primitive.name}"
                    found.append(Unseen(what, size, traceback_origin(eqn.source_info.traceback)))
            for sub in jax_compat.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(kernel_jaxpr)
    unique: dict[tuple, Unseen] = {}
    for u in sorted(found, key=lambda u: -u.bytes):
        unique.setdefault((u.what, u.origin), u)
    live = live_values(kernel_jaxpr)
    return tuple(list(unique.values())[:most]) + ((live,) if live is not None else ())


# Primitives that need the whole of a value before their result exists (a
# reduction, a dot, a roll or transpose of a block): what the body computed
# before one and uses after it cannot stream through the registers and is
# spilled to VMEM. softmax-f32-b1024x2048: exp(x - max) is live across the
# sum, 3.08M of spill slots on v5e; chain-gelu4-* and mask-causal-* (elementwise
# chains and iota masks of 8 MiB blocks, no such op) spilled nothing.
WHOLE_VALUE_OPS = (
    "reduce_max",
    "reduce_min",
    "reduce_sum",
    "reduce_prod",
    "reduce_and",
    "reduce_or",
    "argmax",
    "argmin",
    "dot_general",
    "roll",
    "transpose",
)
# What the compiler reads again from its window instead of keeping: a load.
# rmsnorm-f32-b1024x2048: the loaded x is live across its mean, and nothing
# spilled; rmsnorm-bf16-*'s f32 cast of the same x spilled 2.84M.
RELOADED = ("get",)
# Calls whose body is the caller's code (jnp.where is a jit of select_n):
# their equations are read in line, in order.
INLINED = ("pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call", "remat", "checkpoint")


def _vmem_bytes(aval) -> int:
    """The tiled VMEM bytes of a vector value (layout.padded_bytes); 0 for
    scalars (scalar registers), refs and shapes known only at run time."""
    if not hasattr(aval, "shape") or not hasattr(aval, "dtype") or hasattr(aval, "inner_aval") or not aval.shape:
        return 0
    try:
        shape = tuple(int(d) for d in aval.shape)
        return layout.padded_bytes(compiler_dtype(aval.dtype), shape)
    except (TypeError, ValueError):
        return 0


@dataclass(frozen=True)
class _Op:
    """One equation of a body read in line: what it reads and makes (by identity)."""

    eqn: Any  # a jax JaxprEqn
    reads: tuple[int, ...]
    makes: tuple[int, ...]
    whole: bool  # a WHOLE_VALUE_OPS primitive, or a region (a loop, a branch, a scope)


def _in_line(jaxpr, ops: list[_Op], names: dict[int, int], regions: list) -> None:
    """`jaxpr`'s equations in program order with INLINED calls opened;
    the bodies of other regions go to `regions`, read on their own."""

    def name(v) -> int | None:
        return None if isinstance(v, jax_compat.Literal) else names.get(id(v), id(v))

    for eqn in jaxpr.eqns:
        subs = jax_compat.jaxprs_in_params(eqn.params)
        if eqn.primitive.name in INLINED and len(subs) == 1 and len(subs[0].invars) == len(eqn.invars):
            inner = subs[0]
            for param, arg in zip(inner.invars, eqn.invars):
                if (n := name(arg)) is not None:
                    names[id(param)] = n
            _in_line(inner, ops, names, regions)
            for result, out in zip(inner.outvars, eqn.outvars):
                if (n := name(result)) is not None:
                    names[id(out)] = n
            continue
        regions.extend(subs)
        reads = tuple(n for v in eqn.invars if (n := name(v)) is not None)
        ops.append(
            _Op(eqn, reads, tuple(id(v) for v in eqn.outvars), bool(subs) or eqn.primitive.name in WHOLE_VALUE_OPS)
        )


@dataclass(frozen=True)
class _Peak:
    """The body's values live across one whole-value op, where they weigh most."""

    bytes: int
    avals: tuple  # of the live values
    eqn: Any  # the op they are live across


def _live_peak(jaxpr) -> _Peak | None:
    """The computed values live across one whole-value op at the body's peak,
    this body's regions included (each read on its own); None when nothing is."""
    ops: list[_Op] = []
    regions: list = []
    _in_line(jaxpr, ops, {}, regions)
    made: dict[int, tuple[int, int, Any]] = {}  # value -> (op index, bytes, aval)
    last: dict[int, int] = {}
    for i, op in enumerate(ops):
        for n in op.reads:
            last[n] = i
        if op.eqn.primitive.name not in RELOADED:
            for v, n in zip(op.eqn.outvars, op.makes):
                if size := _vmem_bytes(v.aval):
                    made[n] = (i, size, v.aval)
    # bytes made before op i and read after it, as a difference array over the ops
    change = [0] * (len(ops) + 1)
    for n, (at, size, _) in made.items():
        if last.get(n, at) > at + 1:
            change[at + 1] += size
            change[last[n]] -= size
    best: tuple[int, int] | None = None
    running = 0
    for i, op in enumerate(ops):
        running += change[i]
        if op.whole and running and (best is None or running > best[0]):
            best = (running, i)
    peaks = [p for sub in regions if (p := _live_peak(sub)) is not None]
    if best is not None:
        size, at = best
        live = tuple(aval for n, (i, _, aval) in made.items() if i < at < last.get(n, i))
        peaks.append(_Peak(size, live, ops[at].eqn))
    return max(peaks, key=lambda p: p.bytes, default=None)


def live_values(kernel_jaxpr) -> Unseen | None:
    """The body's values live at once across a whole-value op, at their peak
    (bench/MODEL.md, "Body temporaries"), as one Unseen of kind "live": the
    layout model sizes their spill slots within measured bounds."""
    peak = _live_peak(kernel_jaxpr)
    if peak is None:
        return None
    largest = max(peak.avals, key=_vmem_bytes)
    shape = f"{compiler_dtype(largest.dtype)}[{','.join(str(int(d)) for d in largest.shape)}]"
    count = f"{len(peak.avals)} temporar{'ies' if len(peak.avals) != 1 else 'y'}"
    what = f"{count} live at once across a {peak.eqn.primitive.name} (the largest {shape}), together"
    return Unseen(what, peak.bytes, traceback_origin(peak.eqn.source_info.traceback), "live")


MLIR_LOCATION = re.compile(r'"([^"]+\.py)":(\d+):(\d+)')
# "...lowering for tc: sort"; jax 0.8 names the core "KernelType.TC"
UNIMPLEMENTED = re.compile(r"Unimplemented primitive in Pallas TPU lowering(?: for [\w.]+)?: (\w+)")


def body_origin(text: str | None, kernel_jaxpr) -> Origin | None:
    """The kernel-body line a compile error is about: Mosaic's
    loc("file":line:col) when it names a user file, else, for a primitive the
    lowering does not implement ("...for tc: sort"), the user line of the
    first equation of that primitive in the kernel's jaxpr (the message
    itself names no line)."""
    if not text:
        return None
    for file, line, _col in MLIR_LOCATION.findall(text):
        if is_user_file(file) and os.path.isabs(file):
            return Origin(file, int(line), None)
    found = UNIMPLEMENTED.search(text)
    if found is None:
        return None
    return first_origin(kernel_jaxpr, lambda eqn: eqn.primitive.name == found[1])


def first_origin(jaxpr, matches, around: Origin | None = None) -> Origin | None:
    """The user line of the first equation, nested ones included, that `matches`."""
    for eqn in jaxpr.eqns:
        # An equation inside a jitted helper (jnp.sort is one) keeps only jax's
        # frames: the user line is that of the call around it.
        here = traceback_origin(eqn.source_info.traceback) or around
        if matches(eqn):
            return here
        for sub in jax_compat.jaxprs_in_params(eqn.params):
            if (origin := first_origin(sub, matches, here)) is not None:
                return origin
    return None


def uses_fp8(eqn) -> bool:
    """Whether an equation reads or makes an 8-bit float: what GPUs below sm_89 cannot convert."""
    return any("float8" in str(getattr(v.aval, "dtype", "")) for v in (*eqn.invars, *eqn.outvars))


def converts_fp8(eqn) -> bool:
    """A dot or conversion on 8-bit floats: where the GPU compiler converts them."""
    return eqn.primitive.name in ("dot_general", "convert_element_type") and uses_fp8(eqn)


def compiling(eqn, name: str) -> dict:
    """What the client needs if this GPU compile ends the process: the kernel,
    where it was invoked, and its first fp8 line (gpu_compile.compiling_where)."""

    def pair(origin: Origin | None):
        return [origin.file, origin.line] if origin else None

    body = eqn.params["jaxpr"]
    return {
        "kernel": name,
        "invoked": pair(traceback_origin(eqn.source_info.traceback)),
        "fp8": pair(first_origin(body, converts_fp8) or first_origin(body, uses_fp8)),
    }


def program_made(eqn, operands) -> tuple[tuple[str, int], ...]:
    """(role, index) of the operands the example's program makes and of the
    results it uses (IN_PROGRAM), as the operands are numbered."""
    made, kept = IN_PROGRAM.get(id(eqn), ((), ()))
    dynamic = len(eqn.invars) - eqn.params["grid_mapping"].num_index_operands - eqn.params["grid_mapping"].num_inputs
    found = [(op.role, op.index) for op in operands if op.role in ("in", "prefetch") and dynamic + op.operand in made]
    found += [("out", op.index) for op in operands if op.role == "out" and op.index in kept]
    return tuple(found)


def fingerprint(eqn) -> str:
    """What decides the compiler's verdict on one pallas_call, without source
    positions: an edit elsewhere in the file (a comment, another function)
    leaves it unchanged, so the verdict can be reused."""
    mapping = eqn.params["grid_mapping"]
    parts = [
        str(eqn.params["jaxpr"]),
        repr(mapping.grid),
        repr(jax_compat.scratch_avals(eqn)),
        repr((mapping.num_index_operands, mapping.num_inputs, mapping.num_outputs)),
        repr(eqn.params.get("compiler_params")),
        repr(eqn.params.get("input_output_aliases")),
        repr(eqn.params.get("cost_estimate")),
        repr([str(v.aval) for v in eqn.invars]),
    ]
    for bm in mapping.block_mappings:
        parts += [
            repr(bm.block_shape),
            str(jax_compat.array_aval(bm)),
            str(bm.transformed_block_aval),
            str(bm.index_map_jaxpr),
            repr(bm.pipeline_mode),
        ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


VERDICTS: dict[tuple, Verdict] = {}  # (fingerprint, device kind, options) -> verdict
VERDICTS_KEPT = 4096


def no_phase(phase: str, kernel: str | None = None) -> None:
    pass


def verdict_key(eqn, device, compiler_options: dict | None = None) -> tuple:
    return fingerprint(eqn), device.device_kind, tuple(sorted((compiler_options or {}).items())), *gpu_spills.key()


@dataclass(frozen=True)
class Verdict:
    """The compiler's word on one pallas_call: whether it fits, its text, the
    kernel-body line its exception points at (a Mosaic error's traceback
    ends there; str() of it does not say), and how long it took."""

    fits: bool
    text: str | None
    origin: Origin | None = None
    seconds: float = 0.0
    estimated_cycles: int | None = None  # the compiler's static estimate, in a worker asked for it (speed.py)
    no_estimate: str | None = None  # why there is none, in such a worker
    ptxas: str | None = None  # ptxas -v's words on the kernel, when the request asked (gpu_spills.py)
    no_ptxas: str | None = None  # why there are none, when asked


def compile_alone(
    eqn, device, compiler_options: dict | None = None, on_phase=no_phase, key: tuple | None = None
) -> Verdict:
    """This one pallas_call's verdict on the device: compiled, or reused
    (seconds 0) when this process compiled the same kernel with the same options."""
    key = key or verdict_key(eqn, device, compiler_options)
    if key in VERDICTS:
        return replace(VERDICTS[key], seconds=0.0)
    verdict = _compile(eqn, device, compiler_options, on_phase)
    if len(VERDICTS) >= VERDICTS_KEPT:
        VERDICTS.pop(next(iter(VERDICTS)))
    VERDICTS[key] = verdict
    return verdict


def estimate_alone(eqn, device, compiler_options: dict | None = None, on_phase=no_phase) -> Verdict:
    """The compiler's cycle estimate of this pallas_call (a worker started with
    --estimate), on cut grids where its own is long (cut_grids)."""
    grid = tuple(eqn.params["grid_mapping"].grid)
    if not all(isinstance(extent, int) for extent in grid):
        return Verdict(True, None, no_estimate="a grid whose size is known only at run time is not estimated")
    if math.prod(grid) == 0:
        return Verdict(True, None, no_estimate="its grid has no step (a block larger than its array): it does no work")
    points, seconds = [], 0.0
    for cut in speed.cut_grids(grid):
        params = {**eqn.params, "grid_mapping": replace(eqn.params["grid_mapping"], grid=cut)}
        verdict = _compile(eqn, device, compiler_options, on_phase, params)
        seconds += verdict.seconds
        if not verdict.fits or verdict.estimated_cycles is None:
            return replace(verdict, seconds=seconds)
        points.append((math.prod(cut), verdict.estimated_cycles))
    return Verdict(True, None, None, seconds, speed.extrapolate(points, math.prod(grid)))


def _compile(eqn, device, compiler_options: dict | None, on_phase, params: dict | None = None) -> Verdict:
    sharding = SingleDeviceSharding(device)
    args = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype, sharding=sharding) for v in eqn.invars]
    params = params or eqn.params
    name = kernel_name(eqn)
    started = time.perf_counter()
    gpu_limit = shared_memory_limit(device)
    printed: list[str] = []
    if gpu_limit is not None and lowers_with_mosaic_gpu(params.get("compiler_params")):
        compiled_mosaic_for(device.compute_capability)
    try:
        with (
            jax.default_device(device),
            mosaic_gpu_limit(gpu_limit),
            printed_errors(printed) if gpu_limit is not None else contextlib.nullcontext(),
            compiling_where(compiling(eqn, name)) if gpu_limit is not None else contextlib.nullcontext(),
            gpu_spills.measuring(device) as spills,
        ):
            on_phase("lower", name)
            lowered = jax.jit(named(name, lambda *a: jax_compat.require_pallas_call().bind(*a, **params))).lower(*args)
            on_phase("compile", name)
            speed.forget()
            lowered.compile(compiler_options=spills.options(compiler_options) or None)
        cycles, why = speed.estimate_of() if speed.enabled() else (None, None)
        return Verdict(True, None, None, time.perf_counter() - started, cycles, why, spills.text, spills.missing)
    except Exception as error:  # the compiler's verdict, whatever its type
        return Verdict(False, with_printed(str(error), printed), raised_in_body(error), time.perf_counter() - started)


def shared_memory_limit(device) -> int | None:
    """A GPU device's shared memory a block may use (its target's); None for a TPU."""
    return getattr(device, "shared_memory_per_block_optin", None) if device.platform == "gpu" else None


def raised_in_body(error: BaseException) -> Origin | None:
    """The user line a compile error points at: jax rewrites a Mosaic error's
    traceback to end at the kernel-body line (err-align-v6e: compile_errors.py:64,
    the unaligned pl.ds; its loc(...) is only in the chained cause's text)."""
    cause = error.__cause__ or error.__context__
    # A lowering error's cause is jax's stack before the transformation: it too ends at the user's line.
    for raised in (error, cause):
        frames = [f for f in traceback.extract_tb(getattr(raised, "__traceback__", None)) if is_user_file(f.filename)]
        if frames:
            return Origin(frames[-1].filename, frames[-1].lineno or 0)
    for file, line, _ in MLIR_LOCATION.findall(str(cause)) if cause is not None else ():
        if is_user_file(file) and os.path.isabs(file):
            return Origin(file, int(line))
    return None


def named(name: str, function):
    """`function` under the kernel's name: the compiler names what it
    allocates for a kernel body after the jitted function ("scoped memory for
    outer_kernel.1"), which must be the user's kernel, not our `<lambda>`."""
    function.__name__ = function.__qualname__ = "".join(c if c.isalnum() else "_" for c in name) or "pallas_call"
    return function


def kernel_name(eqn) -> str:
    """The name the user gave (`name=`), else the kernel function's."""
    debug = getattr(eqn.params["jaxpr"], "debug_info", None)
    return eqn.params.get("name") or getattr(debug, "func_name", None) or "pallas_call"


def capture_calls(
    call_text: str,
    namespace: dict,
    target: str,
    compile: bool = True,
    scoped_limit: tuple[int, str] | None = None,
    on_phase=no_phase,
    origins: bool = True,
    estimate: bool = False,
    spills: bool = False,
) -> list[CapturedCall]:
    """Every pallas_call the example reaches, described, and compiled alone
    unless `compile` is false (a trace is enough to see block shapes).
    `on_phase(phase, kernel)` hears each step begin: "trace" (the example's
    Python), then "lower" and "compile" per kernel, so limits and messages
    can name what is running. `scoped_limit` is (bytes, where it was set):
    the compiler's scoped VMEM limit for kernels that set none themselves.
    Without `origins`, the specs and scratch carry none and a call's origin
    is where it was invoked: the provenance hooks stay out of the trace.
    With `spills`, each GPU kernel that compiles carries ptxas's report (gpu_spills.py)."""
    device = target_device(target) if compile else trace_device(target)
    gpu_spills.ASKED[0] = spills and is_gpu(target)
    limit, limit_source = scoped_limit or (None, None)
    if is_gpu(target):  # no scoped VMEM on a GPU
        limit, limit_source = None, None
    compiler_options = {"xla_tpu_scoped_vmem_limit_kib": limit // 1024} if limit else None
    PROVENANCE.clear()
    on_phase("trace", None)
    calls = []
    with recording(origins):
        traced = trace_example(call_text, namespace, device, direct=not origins)
    for eqn in traced:
        try:
            invoke_origin = traceback_origin(eqn.source_info.traceback)
            provenance = PROVENANCE.get((invoke_origin.file, invoke_origin.line)) if invoke_origin else None
            interpret = bool(eqn.params.get("interpret"))  # a CPU run: its TPU compile would say nothing
            platform = params_platform(eqn.params.get("compiler_params"))
            other = platform if platform not in (None, "gpu" if is_gpu(target) else "tpu") else None
            compiled = compile and not interpret and other is None
            reused = False
            if compiled and estimate:  # its fit is known: what is asked is the compiler's estimate of its speed
                verdict = estimate_alone(eqn, device, compiler_options, on_phase)
            elif compiled:
                key = verdict_key(eqn, device, compiler_options)  # the fingerprint, once
                reused = key in VERDICTS
                verdict = compile_alone(eqn, device, compiler_options, on_phase, key)
            else:
                verdict = Verdict(True, None)
            fits, text, seconds = verdict.fits, verdict.text, verdict.seconds
            described = describe(eqn, provenance)
            own_limit = described["vmem_limit_bytes"]
            calls.append(
                CapturedCall(
                    name=kernel_name(eqn),
                    call_origin=provenance.call_origin if provenance else invoke_origin,
                    invoke_origin=invoke_origin,
                    fits=fits,
                    compiler_text=text,
                    estimated_cycles=verdict.estimated_cycles,
                    no_estimate=verdict.no_estimate,
                    ptxas=verdict.ptxas,
                    no_ptxas=verdict.no_ptxas,
                    compile_seconds=round(seconds, 3),
                    compiled=compiled,
                    reused=reused,
                    scoped_limit=own_limit or limit,
                    error_origin=None
                    if fits
                    else verdict.origin or extra(body_origin, None, text, eqn.params["jaxpr"]),
                    in_program=program_made(eqn, described["operands"]),
                    interpret=interpret,
                    other_platform=other,
                    gpu_backend=gpu_backend_of(eqn.params.get("compiler_params")) if is_gpu(target) else None,
                    gpu_kernel=extra(gpu_kernel_of, None, eqn) if is_gpu(target) else None,
                    scoped_limit_source="the pallas_call (vmem_limit_bytes)" if own_limit else limit_source,
                    **described,
                )
            )
        except (OverTime, MemoryError):  # the request's limits, not our bug
            raise
        except Exception as error:  # the trace is done: what fails now is vmem-lsp's own reading of jax
            raise jax_compat.CompatError(
                jax_compat.internal_message(error, "capturing the example's kernels")
            ) from error
    return calls
