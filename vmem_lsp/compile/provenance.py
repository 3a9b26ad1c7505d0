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
from dataclasses import dataclass
from types import FrameType

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
    col = None
    index = frame.f_lasti // 2
    position = next(itertools.islice(frame.f_code.co_positions(), index, None), None) if index >= 0 else None
    if position is not None and position[2] is not None:
        line, _, col, _ = position  # Python counts the column in UTF-8 bytes; we, in code points
        linecache.checkcache(frame.f_code.co_filename)  # the file may have changed since this worker read it
        col = char_column(linecache.getline(frame.f_code.co_filename, line), col)
    return Origin(frame.f_code.co_filename, frame.f_lineno, col)


def traceback_origin(traceback) -> Origin | None:
    if traceback is None:
        return None
    for frame in traceback.frames:
        if is_user_file(frame.file_name):
            return Origin(frame.file_name, frame.line_num)
    return None


ORIGIN_ATTR = "_vmem_lsp_origin"

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
            object.__setattr__(self, ORIGIN_ATTR, user_origin())
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
            if origin is not None:
                PROVENANCE[(origin.file, origin.line)] = provenance
            return call(*args, **call_kwargs)

        return invoke

    HOOKS.add(pallas_call)
    return pallas_call


# (file, line, allocations) of a run_scoped call in user code -> what each
# allocation is: (kind, origin, buffers), or None for a semaphore or the like.
# Kept across examples: jax caches traces, and a cached kernel's jaxpr still
# points at the line whose record this is.
SCOPED: dict[tuple[str, int, int], tuple] = {}


def _scoped_entries(types, kw_types) -> tuple:
    """What each flat allocation of a run_scoped call is: a pipeline's window
    (a BufferedRef of emit_pipeline: its window_ref, made for the inner
    BlockSpec that carries the user's origin) or a user's VMEM(...) entry."""
    buffered = jax_compat.BufferedRef
    entries = []
    items = jax.tree_util.tree_leaves((types, kw_types), is_leaf=lambda x: isinstance(x, buffered))
    for item in items:
        leaves = jax.tree_util.tree_leaves(item)
        if buffered is not None and isinstance(item, buffered):
            is_input, spec, count, window = jax_compat.buffered(item)
            kind = "pipeline_in" if is_input else "pipeline_out"
            origin = getattr(spec, ORIGIN_ATTR, None)
            entries += [(kind, origin, count) if leaf is window else None for leaf in leaves]
        else:
            entries += [("run_scoped", getattr(leaf, ORIGIN_ATTR, None), 1) for leaf in leaves]
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
        except Exception:  # provenance is a nicety: never in the way of the user's kernel, but said
            jax_compat.lose("scoped_origins")
            traceback.print_exc(file=sys.stderr)
        return original(f, *types, **kwargs)

    HOOKS.add(run_scoped)
    return run_scoped


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
