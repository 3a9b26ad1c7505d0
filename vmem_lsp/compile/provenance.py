"""Provenance, inside the worker: which frames are the user's, and where
user code made each BlockSpec, scratch entry, run_scoped allocation and
pallas_call. jax is patched (install_provenance) so that specs stamp the
frame that made them and pallas_call remembers, per call, which spec made
which operand; a traced pallas_call equation carries the traceback of the
frame that invoked it, which is the key back to that record.

Imports jax; only the worker process loads this module.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import linecache
import os
import sys
import sysconfig
import traceback
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from types import FrameType
from typing import Any, NamedTuple

import jax
from jax.experimental import pallas as pl

from ..results import Origin
from ..source.text import char_column
from . import jax_compat

JAX_DIR = os.path.dirname(jax.__file__) + os.sep
JAXLIB_DIR = os.path.join(os.path.dirname(os.path.dirname(jax.__file__)), "jaxlib") + os.sep
JAX_OPS_DIR = os.path.join(JAX_DIR, "experimental", "pallas", "ops") + os.sep
OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
STDLIB_DIR = sysconfig.get_paths()["stdlib"] + os.sep


def is_user_file(path: str) -> bool:
    """Frames worth pointing at: the user's code and jax's shipped kernels,
    not jax's machinery, this package, or the standard library."""
    if path.startswith(JAX_OPS_DIR):
        return True
    return not (
        path.startswith(JAX_DIR)
        or path.startswith(JAXLIB_DIR)
        or path.startswith(OWN_DIR)
        or path.startswith(STDLIB_DIR)
        or path.startswith("<")
    )


def code_folders() -> dict:
    """For the client, which reads a crashed worker's faulthandler dump and
    must tell user frames from ours with the same rule as is_user_file."""
    return {"library_folders": [JAX_DIR, JAXLIB_DIR, OWN_DIR, STDLIB_DIR], "user_folders": [JAX_OPS_DIR]}


def user_frame(depth: int = 2):
    """The innermost frame of user code above the caller, or None."""
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_origin(depth: int = 2) -> Origin | None:
    """The innermost user frame above the caller, with the column of the call."""
    frame = user_frame(depth + 1)
    if frame is None:
        return None
    return position_of(frame.f_code, frame.f_lasti, frame.f_lineno)


def position_of(code, lasti: int, lineno: int) -> Origin:
    """Where the instruction at `lasti` of `code` is: its line and the column
    its expression starts at."""
    col = None
    index = lasti // 2
    position = next(itertools.islice(code.co_positions(), index, None), None) if index >= 0 else None
    if position is not None and position[2] is not None:
        line, _, col, _ = position  # Python counts the column in UTF-8 bytes; we, in code points
        linecache.checkcache(code.co_filename)  # the file may have changed since this worker read it
        col = char_column(linecache.getline(code.co_filename, line), col)
    return Origin(code.co_filename, lineno, col)


def caller_of(frame: FrameType | None) -> tuple | None:
    """Where user code called the function of a user frame: the call that
    gave a helper's BlockSpec its shape (`specs.tiles(bm, bk)` in a kernel
    body, for a spec made in specs.tiles). None when jax called it (a kernel
    body traced by pallas_call: its inline specs have no such call), or when
    the call is on the spec's own line (a comprehension's frame on Python
    3.11). Kept as (code, instruction, line), made an Origin only when read
    (caller_origin): most stamps are never read, and a position costs."""
    if frame is None:
        return None
    back = frame.f_back
    if back is None or not is_user_file(back.f_code.co_filename):
        return None
    if back.f_code.co_filename == frame.f_code.co_filename and back.f_lineno == frame.f_lineno:
        return None
    return (back.f_code, back.f_lasti, back.f_lineno)


def caller_origin(obj) -> Origin | None:
    found = getattr(obj, CALLER_ATTR, None)
    return position_of(*found) if found is not None else None


def traceback_origin(traceback) -> Origin | None:
    if traceback is None:
        return None
    for frame in traceback.frames:
        if is_user_file(frame.file_name):
            return Origin(frame.file_name, frame.line_num)
    return None


ORIGIN_ATTR = "_vmem_lsp_origin"
CALLER_ATTR = "_vmem_lsp_caller"

# Whether the hooks below record where user code made each spec and call: off
# while a request that reads no origins traces (vmem_lsp.fits(compile=False),
# a tuner's trace-only request, where the stamps are a visible share of the
# trace: bench/RESULTS.md). Run_scoped's record of what each allocation is
# stays on: the layout model reads it.
RECORDING = True


@contextlib.contextmanager
def recording(origins: bool):
    global RECORDING
    previous, RECORDING = RECORDING, origins
    try:
        yield
    finally:
        RECORDING = previous


# The functions these hooks made: installing twice (a second Worker in one
# process, the bench harness) must not wrap a wrapper.
HOOKS: weakref.WeakSet = weakref.WeakSet()


def _stamp_init(cls) -> None:
    original = cls.__init__
    if original in HOOKS:
        return

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if not RECORDING:
            return
        try:
            frame = user_frame()  # the frame that called __init__, or the user frame above it
            origin = position_of(frame.f_code, frame.f_lasti, frame.f_lineno) if frame is not None else None
            object.__setattr__(self, ORIGIN_ATTR, origin)
            object.__setattr__(self, CALLER_ATTR, caller_of(frame))
        except (AttributeError, TypeError):
            pass  # a class with __slots__: no stamp, the call site is the fallback

    HOOKS.add(init)
    cls.__init__ = init


@dataclass(frozen=True)
class Provenance:
    call_origin: Origin | None
    in_origins: tuple[Origin | None, ...]
    out_origins: tuple[Origin | None, ...]
    scratch_origins: tuple[Origin | None, ...]


PROVENANCE: dict[tuple[str, int], Provenance] = {}

# id of the kernel jaxpr of each pallas_call bound while a hooked call was invoked -> (that
# jaxpr, kept so its id is not reused; the user line that invoked it). A gradient's backward
# kernels are bound while jax transposes, inside the custom_vjp's backward function, but
# their equations carry the traceback of the forward's call in user code (the loss), which
# invoked no pallas_call of its own: the kernel jaxpr, the same object in the final program,
# is the way back to the call that made it.
BOUND: dict[int, tuple[Any, Origin]] = {}
INVOKING: list[Origin] = []


def bound_origin(eqn) -> Origin | None:
    """The user line whose pallas_call bound this equation's kernel, where it was seen."""
    kernel = eqn.params.get("jaxpr")
    found = BOUND.get(id(kernel))
    return found[1] if found is not None and found[0] is kernel else None


def provenance_of(origin: Origin | None, eqn) -> tuple[Origin | None, Provenance | None]:
    """Where a pallas_call equation was invoked and what its call recorded: the line its
    traceback names, or, when that line invoked no recorded call, the line that bound it."""
    found = PROVENANCE.get((origin.file, origin.line)) if origin is not None else None
    if found is None:
        bound = bound_origin(eqn)
        if bound is not None:
            return bound, PROVENANCE.get((bound.file, bound.line))
    return origin, found


def _origins(tree) -> tuple[Origin | None, ...]:
    if tree is None or (jax_compat.no_block_spec is not None and tree is jax_compat.no_block_spec):
        return ()
    leaves = jax.tree_util.tree_leaves(tree)
    return tuple(getattr(leaf, ORIGIN_ATTR, None) for leaf in leaves)


def _wrap_pallas_call(original):
    if original in HOOKS:
        return original

    @functools.wraps(original)
    def pallas_call(kernel, out_shape=None, *, grid_spec=None, **kwargs):
        if not RECORDING:
            return original(kernel, out_shape, grid_spec=grid_spec, **kwargs)
        get = (lambda name, default: getattr(grid_spec, name, default)) if grid_spec is not None else kwargs.get
        provenance = Provenance(
            call_origin=user_origin(),
            in_origins=_origins(get("in_specs", jax_compat.no_block_spec)),
            out_origins=_origins(get("out_specs", jax_compat.no_block_spec)),
            scratch_origins=_origins(get("scratch_shapes", ())),
        )
        call = original(kernel, out_shape, grid_spec=grid_spec, **kwargs)

        @functools.wraps(call)
        def invoke(*args, **call_kwargs):
            origin = user_origin()
            if origin is None:
                return call(*args, **call_kwargs)
            PROVENANCE[(origin.file, origin.line)] = provenance
            INVOKING.append(origin)
            try:
                return call(*args, **call_kwargs)
            finally:
                INVOKING.pop()

        return invoke

    HOOKS.add(pallas_call)
    return pallas_call


class ScopedRecord(NamedTuple):
    """What one allocation of a run_scoped call is."""

    kind: str  # "pipeline_in" | "pipeline_out" | "run_scoped"
    origin: Origin | None  # the inner BlockSpec of a pipeline window; the VMEM(...) of an entry
    buffers: int
    window: int | None = None  # a pipeline window's place among its pipeline's in_specs or out_specs
    caller: Origin | None = None  # the call in user code of the helper that made that BlockSpec


# id of the aval of each ref a run_scoped body was traced with -> (that aval,
# what the allocation is): the run_scoped equation's own invars carry these
# avals, so each run_scoped call keeps its own record, where two calls from one
# line (pipelines made in a loop, a package's pipeline helper that every
# kernel calls) shared one key below and the last one's specs named the
# windows of all. The aval is kept so that its id is not reused; the oldest
# are dropped past SCOPED_AVALS_KEPT (a cached kernel's jaxpr then falls back
# to the key below).
SCOPED_AVALS: OrderedDict[int, tuple[Any, ScopedRecord | None]] = OrderedDict()
SCOPED_AVALS_KEPT = 8192

# (file, line, allocations) of a run_scoped call in user code -> what each
# allocation is (a ScopedRecord), or None for a semaphore or the like: for a
# body whose refs were not seen (a transformed ref). Kept across examples: jax
# caches traces, and a cached kernel's jaxpr still points at the line whose
# record this is.
SCOPED: dict[tuple[str, int, int], tuple[ScopedRecord | None, ...]] = {}


def scoped_record(aval) -> tuple[bool, ScopedRecord | None]:
    """(known, record) of an allocation by the aval of its ref in a run_scoped body."""
    found = SCOPED_AVALS.get(id(aval))
    if found is None or found[0] is not aval:
        return False, None
    return True, found[1]


def _remembering(f, entries: tuple[ScopedRecord | None, ...]):
    """The run_scoped body, noting the avals of the refs it is traced with
    against what each allocation is."""

    @functools.wraps(f)
    def run_scoped(*refs, **kw_refs):  # named as a hook that passes the user's arguments on (worker.PASS_THROUGH)
        leaves = jax.tree_util.tree_leaves((refs, kw_refs))
        if len(leaves) == len(entries):
            for leaf, record in zip(leaves, entries):
                aval = getattr(leaf, "aval", None)
                if aval is not None:
                    SCOPED_AVALS[id(aval)] = (aval, record)
            while len(SCOPED_AVALS) > SCOPED_AVALS_KEPT:
                SCOPED_AVALS.popitem(last=False)
        return f(*refs, **kw_refs)

    return run_scoped


# The BlockSpecs' origins of the pipeline whose buffers the next run_scoped allocates, set by a
# family's hook around a pipeline that allocates them inside jax (plgpu.emit_pipeline: gpu/hooks.py).
PENDING_WINDOWS: list[list[Origin | None] | None] = [None]


@contextlib.contextmanager
def pending_windows(origins: list[Origin | None]):
    """While the block runs, the first run_scoped's memory refs are the buffers of specs
    with these origins, in order."""
    before = PENDING_WINDOWS[0]
    PENDING_WINDOWS[0] = list(origins)
    try:
        yield
    finally:
        PENDING_WINDOWS[0] = before


def stamp(cls) -> None:
    """Instances of `cls` (a family's BlockSpec or memory-ref class, a dataclass with an
    __init__ of its own) remember the user line that made them."""
    _stamp_init(cls)


def _scoped_entries(types, kw_types) -> tuple[ScopedRecord | None, ...]:
    """What each flat allocation of a run_scoped call is: a pipeline's window
    (a BufferedRef of emit_pipeline: its window_ref, made for the inner
    BlockSpec that carries the user's origin; the Nth input or output of that
    pipeline, counted as emit_pipeline lays its BufferedRefs out, inputs then
    outputs, each in its specs' order) or a user's VMEM(...) entry."""
    buffered = jax_compat.BufferedRef
    entries: list[ScopedRecord | None] = []
    pending, PENDING_WINDOWS[0] = PENDING_WINDOWS[0], None
    if pending is not None:  # a pipeline's buffers, made inside jax: each is its spec's
        windows_made = iter(enumerate(pending))
        for leaf in jax.tree_util.tree_leaves((types, kw_types)):
            is_buffer = jax_compat.MemoryRef is not None and isinstance(leaf, jax_compat.MemoryRef)
            number, origin = next(windows_made, (None, None)) if is_buffer else (None, None)
            entries.append(ScopedRecord("run_scoped", origin, 1, number))
        return tuple(entries)
    windows = {"pipeline_in": 0, "pipeline_out": 0}
    items = jax.tree_util.tree_leaves((types, kw_types), is_leaf=lambda x: isinstance(x, buffered))
    for item in items:
        leaves = jax.tree_util.tree_leaves(item)
        if buffered is not None and isinstance(item, buffered):
            is_input, spec, count, window = jax_compat.buffered(item)
            kind = "pipeline_in" if is_input else "pipeline_out"
            number = windows[kind]
            windows[kind] += 1
            record = ScopedRecord(kind, getattr(spec, ORIGIN_ATTR, None), count, number, caller_origin(spec))
            entries += [record if leaf is window else None for leaf in leaves]
        else:
            entries += [ScopedRecord("run_scoped", getattr(leaf, ORIGIN_ATTR, None), 1) for leaf in leaves]
    return tuple(entries)


def _wrap_run_scoped(original):
    if original in HOOKS:
        return original

    @functools.wraps(original)
    def run_scoped(f, *types, **kwargs):
        try:
            kw_types = {k: v for k, v in kwargs.items() if k != "collective_axes"}
            entries = _scoped_entries(types, kw_types)
            frame = user_frame()  # the key: file and line, no column
            if frame is not None:
                SCOPED[(frame.f_code.co_filename, frame.f_lineno, len(entries))] = entries
            f = _remembering(f, entries)
        except Exception:  # provenance is a nicety: never in the way of the user's kernel, but said
            jax_compat.lose("scoped_origins")
            traceback.print_exc(file=sys.stderr)
        return original(f, *types, **kwargs)

    HOOKS.add(run_scoped)
    return run_scoped


def _remember_bound(bind):
    """pallas_call_p.bind, noting which invoked call bound each kernel jaxpr (BOUND)."""

    @functools.wraps(bind)
    def remembering(*args, **params):
        kernel = params.get("jaxpr")
        if INVOKING and kernel is not None:
            BOUND[id(kernel)] = (kernel, INVOKING[-1])
        return bind(*args, **params)

    HOOKS.add(remembering)
    return remembering


def install_provenance() -> None:
    """Patch jax so that specs and calls remember where user code made them.
    Must run before user modules are imported (they may bind pallas_call).
    A part this jax lacks is a loss (jax_compat.detect), not a failure."""
    if jax_compat.BlockSpec is not None:
        _stamp_init(jax_compat.BlockSpec)
    if jax_compat.MemoryRef is not None:
        _stamp_init(jax_compat.MemoryRef)
    calls = jax_compat.pallas_call_module
    if calls is not None and hasattr(calls, "pallas_call"):
        wrapped = _wrap_pallas_call(calls.pallas_call)
        calls.pallas_call = wrapped
        pl.pallas_call = wrapped
    primitive = jax_compat.pallas_call_p
    if primitive is not None and primitive.bind not in HOOKS:
        primitive.bind = _remember_bound(primitive.bind)
    primitives = jax_compat.pallas_primitives
    if primitives is not None and hasattr(primitives, "run_scoped"):
        scoped = _wrap_run_scoped(primitives.run_scoped)
        primitives.run_scoped = scoped  # what emit_pipeline calls (pipeline.py: primitives.run_scoped)
        pl.run_scoped = scoped


def forget_traces() -> None:
    """Drop jax's caches of traced functions, so that the next trace runs the
    user's Python, and the hooks above, again: after a trace without origins,
    jax would hand a request that wants them the unstamped trace (a jitted
    kernel's trace is kept by its static arguments)."""
    jax.clear_caches()
    PROVENANCE.clear()
    BOUND.clear()
