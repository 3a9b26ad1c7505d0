"""What a TPU kernel's body holds that no spec names, read from its jaxpr in the worker:
the largest values the compiler stages in VMEM (a big dot's result), and the values live at
once across an op that needs the whole of one (a reduction, a dot): internal scratch and
spill slots the layout model can only bound (CapturedCall.unseen; layout.unseen_could_overflow).
Imports jax; only the worker process loads this module."""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import jax.numpy as jnp

from ..compile import jax_compat
from ..compile.kernels import compiler_dtype
from ..compile.provenance import traceback_origin
from ..results import Origin, Unseen
from .layout import padded_bytes

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
    staged = tuple(list(unique.values())[:most])
    peak = _live_peak(kernel_jaxpr)
    return staged if peak is None else (*staged, _live_summary(peak), *held_values(peak))


def kept_values(kernel_jaxpr) -> tuple[Unseen, ...]:
    """The body account of a chip that keeps each step of an unrolled column chain until it ends
    (_column_chains), as Unseen of kind "kept"; none when the body has no such chain. An analysis
    of its own beside large_values: a failure of one leaves the other."""
    kept = _live_peak(kernel_jaxpr, keep_columns=True)
    return held_values(kept, "kept") if kept is not None else ()


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
INLINED = tuple(jax_compat.CALLS)


def _vmem_bytes(aval) -> int:
    """The tiled VMEM bytes of a vector value (layout.padded_bytes); 0 for
    scalars (scalar registers), refs and shapes known only at run time."""
    if not hasattr(aval, "shape") or not hasattr(aval, "dtype") or hasattr(aval, "inner_aval") or not aval.shape:
        return 0
    try:
        shape = tuple(int(d) for d in aval.shape)
        return padded_bytes(compiler_dtype(aval.dtype), shape)
    except (TypeError, ValueError):
        return 0


@dataclass(frozen=True)
class _Op:
    """One equation of a body read in line: what it reads and makes (by identity)."""

    eqn: Any  # a jax JaxprEqn
    args: tuple[int | None, ...]  # the name of each operand, None for a literal (as eqn.invars)
    makes: tuple[int, ...]
    whole: bool  # a WHOLE_VALUE_OPS primitive, or a region (a loop, a branch, a scope)
    written: Any  # the equation whose traceback is where it was written: the outermost call of an inlined helper

    @property
    def origin(self) -> Origin | None:
        return traceback_origin(self.written.source_info.traceback)

    @property
    def reads(self) -> tuple[int, ...]:
        return tuple(n for n in self.args if n is not None)


def _in_line(
    jaxpr, ops: list[_Op], names: dict[int, int], regions: list, fresh: Iterator[int], called_at: Any = None
) -> None:
    """`jaxpr`'s equations in program order with INLINED calls opened;
    the bodies of other regions go to `regions`, read on their own. Each value
    gets a name of its own from `fresh`: jax traces a helper (jnp.where, a //)
    once and calls the same jaxpr again, so its variables' ids recur in every
    call of it (an unrolled loop's iterations would be one value), and its equations' tracebacks
    are of the first call: an inlined equation is where its outermost call (`called_at`) is."""

    def name(v) -> int | None:
        if isinstance(v, jax_compat.Literal):
            return None
        if id(v) not in names:
            names[id(v)] = next(fresh)
        return names[id(v)]

    for eqn in jaxpr.eqns:
        subs = jax_compat.jaxprs_in_params(eqn.params)
        if eqn.primitive.name in INLINED and len(subs) == 1 and len(subs[0].invars) == len(eqn.invars):
            inner = subs[0]
            scope: dict[int, int] = {}  # this call's own names for the inner jaxpr's variables
            for param, arg in zip(inner.invars, eqn.invars):
                if (n := name(arg)) is not None:
                    scope[id(param)] = n
            _in_line(inner, ops, scope, regions, fresh, called_at or eqn)
            for result, out in zip(inner.outvars, eqn.outvars):
                if not isinstance(result, jax_compat.Literal) and id(result) in scope:
                    names[id(out)] = scope[id(result)]
            continue
        regions.extend(subs)
        args = tuple(name(v) for v in eqn.invars)
        makes = tuple(next(fresh) for _ in eqn.outvars)
        names.update((id(v), n) for v, n in zip(eqn.outvars, makes))
        ops.append(_Op(eqn, args, makes, bool(subs) or eqn.primitive.name in WHOLE_VALUE_OPS, called_at or eqn))


@dataclass(frozen=True)
class _Peak:
    """The body's values live across one whole-value op, where they weigh most."""

    bytes: int
    values: tuple  # (aval, the op that made it, the op its chain began at) of each live value
    op: _Op  # the op they are live across

    @property
    def avals(self) -> tuple:
        return tuple(aval for aval, _, _ in self.values)


def _chain_start(ops: list[_Op], at: int, maker: dict[int, int]) -> _Op:
    """The op a value's elementwise chain began at: back through the first operand of
    the same shape, to a whole-value op or an op with none (p = exp(s - m) began at s's dot).
    A select's predicate and a broadcast (a constant, a column) are not what a value grows
    from. Each step goes to an earlier op, so the walk ends."""
    shape = tuple(ops[at].eqn.outvars[0].aval.shape)
    while not ops[at].whole:
        eqn = ops[at].eqn
        skip = 1 if eqn.primitive.name == "select_n" else 0
        same = [
            maker[n]
            for v, n in zip(eqn.invars[skip:], ops[at].args[skip:])
            if n in maker
            and tuple(getattr(getattr(v, "aval", None), "shape", ())) == shape
            and ops[maker[n]].eqn.primitive.name != "broadcast_in_dim"
        ]
        if not same or ops[same[0]].eqn.primitive.name in RELOADED:  # a loaded block is its window's
            break
        at = same[0]
    return ops[at]


def _live_peak(jaxpr, keep_columns: bool = False) -> _Peak | None:
    """The computed values live across one whole-value op at the body's peak,
    this body's regions included (each read on its own); None when nothing is.
    `keep_columns`: as a chip that keeps each step of a column chain until its end
    (_column_chains) lays them out; None when the body has no such chain."""
    ops: list[_Op] = []
    regions: list = []
    _in_line(jaxpr, ops, {}, regions, itertools.count())
    made: dict[int, tuple[int, int, Any]] = {}  # value -> (op index, bytes, aval)
    maker: dict[int, int] = {}  # value -> the op index that made it
    last: dict[int, int] = {}
    for i, op in enumerate(ops):
        for n in op.reads:
            last[n] = i
        maker.update((n, i) for n in op.makes)
        if op.eqn.primitive.name not in RELOADED:
            for v, n in zip(op.eqn.outvars, op.makes):
                if size := _vmem_bytes(v.aval):
                    made[n] = (i, size, v.aval)
    chains = _column_chains(ops, maker) if keep_columns else []
    for chain in chains:
        for step in chain[:-1]:
            last[ops[step].makes[0]] = chain[-1]
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
    peaks = [p for sub in regions if (p := _live_peak(sub, keep_columns)) is not None]
    if keep_columns and not chains and not peaks:
        return None
    if best is not None:
        size, at = best
        live = tuple(
            (aval, ops[i], _chain_start(ops, i, maker)) for n, (i, _, aval) in made.items() if i < at < last.get(n, i)
        )
        peaks.append(_Peak(size, live, ops[at]))
    return max(peaks, key=lambda p: p.bytes, default=None)


def live_values(kernel_jaxpr) -> Unseen | None:
    """The body's values live at once across a whole-value op, at their peak
    (bench/MODEL.md, "Body temporaries"), as one Unseen of kind "live": the
    layout model sizes their spill slots within measured bounds."""
    peak = _live_peak(kernel_jaxpr)
    return _live_summary(peak) if peak is not None else None


def _live_summary(peak: _Peak) -> Unseen:
    shape = _shape_text(max(peak.avals, key=_vmem_bytes))
    count = f"{len(peak.avals)} temporar{'ies' if len(peak.avals) != 1 else 'y'}"
    what = f"{count} live at once across a {peak.op.eqn.primitive.name} (the largest {shape}), together"
    return Unseen(what, peak.bytes, peak.op.origin, "live")


def held_values(peak: _Peak, kind: str = "held") -> tuple[Unseen, ...]:
    """The body account: each value live at the peak, largest first, as an Unseen of `kind`
    ("held"; "kept" for the peak of a chip that keeps a column chain's steps) on the line that
    makes it, with its shape (which block sizes it grows with), the line of the op it is live
    across and the line its elementwise chain began at. What the compiler's internal scratch is
    split into. A line's copies of one value (a kept chain's steps) are one, "7 x f32[..]"."""
    held = [
        Unseen(
            f"{_shape_text(aval)} from {op.eqn.primitive.name} across {peak.op.eqn.primitive.name}"
            + (f" of {start.eqn.primitive.name}" if start is not op else ""),
            _vmem_bytes(aval),
            op.origin,
            kind,
            tuple(int(d) for d in aval.shape),
            peak.op.origin,
            start.origin if start is not op else None,
        )
        for aval, op, start in peak.values
    ]
    if kind == "kept":
        held = _copies_as_one(held)
    return tuple(sorted(held, key=lambda u: -u.bytes))


def _copies_as_one(values: list[Unseen]) -> list[Unseen]:
    """Values alike made on one line (a kept chain's steps) as one, "7 x f32[2048,8] from
    select_n across ...", whatever each step's chain began at."""
    alike: dict[Unseen, list[Unseen]] = {}
    for u in values:
        alike.setdefault(replace(u, what=u.what.split(" of ")[0], start=None), []).append(u)
    return [
        replace(key, what=f"{len(same)} x {key.what}", bytes=sum(u.bytes for u in same)) if len(same) > 1 else same[0]
        for key, same in alike.items()
    ]


# An unrolled loop that folds one narrow column per step into an array, by a chain of ops each of
# whose results only the next one reads: a router's `picked = where(slot == j, value, picked)` over
# its top k, a sum of per-step maxima `total = total + best`. The compiler of some generations keeps
# every step's column (f32[rows,1], padded to the lanes) until the chain ends instead of folding it
# in at once (bench/probe_column_chains.py, probe_router_spills.py: about one padded column per step
# past the first on v4, v5e and v5p, for selects and adds alike; v6e caps at 1.82M whatever the steps,
# v7x keeps none). Which chips do is layout's (KEEPS_COLUMNS_CHIPS). Measured on float chains: an
# int32 chain of argmin indices spilled nothing. The ops, and the index of their first data operand:
FOLDS_A_COLUMN = {"select_n": 1, "add": 0}


def _column_chains(ops: list[_Op], maker: dict[int, int]) -> list[list[int]]:
    """The op indices of each such chain of two or more links, in program order."""
    readers = collections.Counter(n for op in ops for n in op.reads)
    chain_of: dict[int, list[int]] = {}  # a chain's op -> its chain so far
    chains = []
    for i, op in enumerate(ops):
        first = FOLDS_A_COLUMN.get(op.eqn.primitive.name)
        if first is None:
            continue
        aval = op.eqn.outvars[0].aval
        if not jnp.issubdtype(aval.dtype, jnp.floating) or len(aval.shape) < 2:
            continue
        data = list(zip(op.eqn.invars[first:], op.args[first:]))
        before = [
            maker[n]
            for v, n in data
            if n is not None and readers[n] == 1 and maker.get(n) in chain_of and v.aval.shape == aval.shape
        ]
        folded = [(v, n) for v, n in data if not before or n != ops[before[0]].makes[0]]
        if not any(_is_column(v, n, ops, maker, len(aval.shape)) for v, n in folded):
            continue
        if before:
            chain_of[i] = chain_of[before[0]]
            chain_of[i].append(i)
        else:
            chain_of[i] = [i]
            chains.append(chain_of[i])
    return [c for c in chains if len(c) >= 2]


def _is_column(var, name: int | None, ops: list[_Op], maker: dict[int, int], rank: int) -> bool:
    """A computed value of last dimension 1 (a row's maximum, kept as [rows, 1]), or a broadcast of
    one; not a broadcast constant or scalar."""
    if name is None or name not in maker:
        return False
    made = ops[maker[name]].eqn
    if made.primitive.name == "broadcast_in_dim":
        source = tuple(getattr(getattr(made.invars[0], "aval", None), "shape", ()))
        if isinstance(made.invars[0], jax_compat.Literal) or not source:
            return False
        if len(source) == rank and source[-1] == 1:
            return True
    shape = var.aval.shape
    return len(shape) == rank and shape[-1] == 1


def _shape_text(aval) -> str:
    return f"{compiler_dtype(aval.dtype)}[{','.join(str(int(d)) for d in aval.shape)}]"
