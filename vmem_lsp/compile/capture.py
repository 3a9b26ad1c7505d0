"""Inside the worker: trace an example, find every pallas_call it reaches, and
compile each one alone for a TPU target with no TPU attached.

Imports jax; only the worker process loads this module.

Provenance: BlockSpec and scratch objects are stamped with the frame that made
them, and pallas_call is wrapped to remember, per call, which spec made which
operand. The traced jaxpr equation of a pallas_call carries the traceback of
the frame that invoked it, which is the key back to that record.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import itertools
import linecache
import math
import os
import re
import sys
import sysconfig
import time
import traceback
from dataclasses import dataclass, replace

import jax
import jax.numpy as jnp
from jax._src import core as jax_core
from jax._src import pjit as pjit_module
from jax._src.interpreters import partial_eval as pe
from jax._src.pallas import core as pallas_core
from jax._src.pallas import pallas_call as pallas_call_module
from jax._src.pallas import primitives as pallas_primitives
from jax._src.pallas.mosaic import pipeline as pipeline_module
from jax._src.pallas.pallas_call import pallas_call_p
from jax.experimental import pallas as pl
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

from ..chips import chip
from ..dtypes import COMPILER_DTYPES, DIRECTIVE_DTYPES
from ..results import CapturedCall, Operand, Origin, Scoped, Scratch, Unseen
from ..source.directives import SHAPE_FUNCTION, _ShapeLiterals, check_dims, compile_call, is_shape_literal
from ..source.syntax import parse_quietly
from ..source.text import char_column

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
    frame = sys._getframe(depth)
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


# ---- provenance stamps ---------------------------------------------------

ORIGIN_ATTR = "_vmem_lsp_origin"

# Whether the hooks below record where user code made each spec and call: off
# while a request that reads no origins traces (vmem_lsp.fits(compile=False):
# the stamps cost about 0.3 ms of a 4.5 ms trace). Run_scoped's record of what
# each allocation is stays on: the layout model reads it.
RECORDING = True


@contextlib.contextmanager
def recording(origins: bool):
    global RECORDING
    previous, RECORDING = RECORDING, origins
    try:
        yield
    finally:
        RECORDING = previous


def _stamp_init(cls) -> None:
    original = cls.__init__
    if getattr(original, "_vmem_lsp_stamped", False):
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

    init._vmem_lsp_stamped = True
    cls.__init__ = init


@dataclass(frozen=True)
class Provenance:
    call_origin: Origin | None
    in_origins: tuple[Origin | None, ...]
    out_origins: tuple[Origin | None, ...]
    scratch_origins: tuple[Origin | None, ...]


PROVENANCE: dict[tuple[str, int], Provenance] = {}


def _origins(tree) -> tuple[Origin | None, ...]:
    if tree is pallas_core.no_block_spec or tree is None:
        return ()
    leaves = jax.tree_util.tree_leaves(tree)
    return tuple(getattr(leaf, ORIGIN_ATTR, None) for leaf in leaves)


def _wrap_pallas_call(original):
    if getattr(original, "_vmem_lsp_wrapped", False):
        return original

    @functools.wraps(original)
    def pallas_call(kernel, out_shape=None, *, grid_spec=None, **kwargs):
        if not RECORDING:
            return original(kernel, out_shape, grid_spec=grid_spec, **kwargs)
        get = (lambda name, default: getattr(grid_spec, name, default)) if grid_spec is not None else kwargs.get
        provenance = Provenance(
            call_origin=user_origin(),
            in_origins=_origins(get("in_specs", pallas_core.no_block_spec)),
            out_origins=_origins(get("out_specs", pallas_core.no_block_spec)),
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

    pallas_call._vmem_lsp_wrapped = True
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
    buffered = pipeline_module.BufferedRef
    entries = []
    items = jax.tree_util.tree_leaves((types, kw_types), is_leaf=lambda x: isinstance(x, buffered))
    for item in items:
        leaves = jax.tree_util.tree_leaves(item)
        if isinstance(item, buffered):
            kind = "pipeline_in" if item.buffer_type.is_input else "pipeline_out"
            origin = getattr(item.spec, ORIGIN_ATTR, None)
            entries += [(kind, origin, item.buffer_count) if leaf is item.window_ref else None for leaf in leaves]
        else:
            entries += [("run_scoped", getattr(leaf, ORIGIN_ATTR, None), 1) for leaf in leaves]
    return tuple(entries)


def _wrap_run_scoped(original):
    if getattr(original, "_vmem_lsp_wrapped", False):
        return original

    @functools.wraps(original)
    def run_scoped(f, *types, **kwargs):
        try:
            kw_types = {k: v for k, v in kwargs.items() if k != "collective_axes"}
            entries = _scoped_entries(types, kw_types)
            frame = user_frame()  # the key: file and line, no column
            if frame is not None:
                SCOPED[(frame.f_code.co_filename, frame.f_lineno, len(entries))] = entries
        except Exception:  # provenance is a nicety: never in the way of the user's kernel
            pass
        return original(f, *types, **kwargs)

    run_scoped._vmem_lsp_wrapped = True
    return run_scoped


def install_provenance() -> None:
    """Patch jax so that specs and calls remember where user code made them.
    Must run before user modules are imported (they may bind pallas_call)."""
    _stamp_init(pallas_core.BlockSpec)
    _stamp_init(pallas_core.MemoryRef)
    wrapped = _wrap_pallas_call(pallas_call_module.pallas_call)
    pallas_call_module.pallas_call = wrapped
    pl.pallas_call = wrapped
    scoped = _wrap_run_scoped(pallas_primitives.run_scoped)
    pallas_primitives.run_scoped = scoped  # what emit_pipeline calls (pipeline.py: primitives.run_scoped)
    pl.run_scoped = scoped


def forget_traces() -> None:
    """Drop jax's caches of traced functions, so that the next trace runs the
    user's Python, and the hooks above, again: after a trace without origins,
    jax would hand a request that wants them the unstamped trace (a jitted
    kernel's trace is kept by its static arguments)."""
    jax.clear_caches()
    PROVENANCE.clear()


# ---- devices ----------------------------------------------------------------


@functools.cache
def target_device(target: str):
    topology = topologies.get_topology_desc(platform="tpu", topology_name=chip(target).topology)
    return topology.devices[0]


def trace_device(target: str):
    """The target's compile-only device, or None where libtpu is absent (macOS):
    a trace for the layout model needs no compiler."""
    try:
        return target_device(target)
    except Exception:
        return None


# ---- tracing an example -------------------------------------------------------


def _evaluator(node):
    """A function of the example's scope that gives one part of the call:
    a constant, a shape literal with whole-number dimensions and a name
    directly, anything else by evaluating its compiled expression."""
    if isinstance(node, ast.Constant):
        value = node.value
        return lambda scope: value
    if is_shape_literal(node) and check_dims(node) is None:
        dims = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        dtype, sizes = DIRECTIVE_DTYPES[node.value.id], tuple(d.value for d in dims)
        return lambda scope: scope[SHAPE_FUNCTION](dtype, sizes)
    if isinstance(node, ast.Name):
        name = node.id
        return lambda scope: scope[name] if name in scope else eval(name, scope)  # a builtin, or NameError
    code = compile(ast.fix_missing_locations(ast.Expression(_SHAPES.visit(node))), "<vmem example>", "eval")
    return lambda scope: eval(code, scope)


_SHAPES = _ShapeLiterals()


@functools.lru_cache(maxsize=1024)
def call_plan(call_text: str):
    """(callee, arguments, keywords) of an example call, each part an
    evaluator of the scope. Kept by the call's text: a tuner asks for one
    call over and over, and a check asks again for the example it checked;
    the evaluators read the scope they are given, so one plan serves every
    module and device."""
    call = parse_quietly(call_text.strip(), mode="eval").body
    if not isinstance(call, ast.Call):
        call = compile_call(call_text)  # says why, as before
    return (
        _evaluator(call.func),
        tuple(_evaluator(a) for a in call.args),
        tuple((k.arg, _evaluator(k.value)) for k in call.keywords),
    )


def example_function(call_text: str, namespace: dict, device):
    """Evaluate the example's callee and arguments; return (function, shapes)
    where function takes the shape placeholders' arrays in order."""
    sharding = SingleDeviceSharding(device) if device is not None else None
    shapes: list[jax.ShapeDtypeStruct] = []

    def make_shape(dtype_name, dims):
        shape = jax.ShapeDtypeStruct(tuple(dims), jnp.dtype(dtype_name), sharding=sharding)
        shapes.append(shape)
        return shape

    callee_of, args_of, keywords_of = call_plan(call_text)
    scope = {**namespace, SHAPE_FUNCTION: make_shape}
    callee = callee_of(scope)
    args = [a(scope) for a in args_of]
    kwargs = {k: v(scope) for k, v in keywords_of}
    is_shape = lambda x: isinstance(x, jax.ShapeDtypeStruct)
    leaves, tree = jax.tree_util.tree_flatten((args, kwargs), is_leaf=is_shape)
    slots = [i for i, leaf in enumerate(leaves) if is_shape(leaf)]

    def filled(arrays):
        values = list(leaves)
        for slot, array in zip(slots, arrays):
            values[slot] = array
        return jax.tree_util.tree_unflatten(tree, values)

    def run(*arrays):
        a, kw = filled(arrays)
        return callee(*a, **kw)

    if isinstance(callee, JITTED):

        def traced(*arrays):
            """The jitted callee's own jaxpr, without a trace of `run` around
            it; jax keeps none of it (see forget_own_traces)."""
            a, kw = filled(arrays)
            try:
                return callee.trace(*a, **kw).jaxpr
            finally:
                forget_own_traces(callee)

        run.traced = traced
    return run, [leaves[i] for i in slots]


JITTED = type(jax.jit(lambda: None))  # what jax.jit gives (jaxlib's PjitFunction)


def forget_own_traces(jitted) -> None:
    """Drop what jax keeps of a jitted function's traces. jax files every
    trace of one function under one hash (its static arguments, a tuner's
    block sizes, are left out of it), so each new config's lookup compared
    with all before it: the bundled matmul traced in 3.3 ms at first and in
    4.0 ms after 300 configs. Evicting this function's entries (and jax's
    small cache of argument shardings, keyed the same way) after each trace
    held it at 3.0 ms, where clearing all of jax's caches every 32 traces
    made the trace after each clearing cost 6.5 ms. Private parts of jax,
    each used only if there: without them, the worker's periodic clearing
    (Worker.check) still bounds the growth."""
    fun = getattr(jitted, "_fun", None)
    if fun is not None:
        for cache in (getattr(pjit_module, "_infer_params_cached", None), getattr(pe, "trace_to_jaxpr", None)):
            evict = getattr(cache, "evict_weakref", None)
            if evict is not None:
                evict(fun)
    clear = getattr(getattr(pjit_module, "_process_in_axis_resources", None), "cache_clear", None)
    if clear is not None:
        clear()


def pallas_equations(jaxpr, found=None):
    """Every pallas_call equation in a jaxpr and the jaxprs nested in it."""
    found = [] if found is None else found
    for eqn in jaxpr.eqns:
        if eqn.primitive is pallas_call_p:
            found.append(eqn)
        for sub in jax_core.jaxprs_in_params(eqn.params):
            pallas_equations(sub, found)
    return found


# Primitives that call a jaxpr with their own operands, one for one: a value passed through
# them is still what the program was given.
CALLS = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "remat": "jaxpr",
    "checkpoint": "jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
}


# Operations that give another view of the same bytes: paged attention reshapes its arguments
# before its pallas_call, and compiled in its program it needed what it needed alone (32.00M on v6e).
VIEWS = ("reshape", "squeeze", "expand_dims", "bitcast_convert_type")


def in_program(jaxpr) -> dict[int, tuple]:
    """id() of each pallas_call equation whose operands are made, or whose
    results are used, by other operations of the example's program -> (the
    positions of those operands among its invars, of those results). Compiled
    alone, such a kernel may differ from what the program needs: XLA can keep
    a whole operand it produces in VMEM, outside the scoped limit, with no
    window (bench/MODEL.md, isolated against whole program). A kernel that
    takes the program's arguments and gives its results (the usual example)
    compiles the same alone."""
    found: dict[int, tuple] = {}

    def walk(jaxpr, given: set, returned: set):
        used = {v for eqn in jaxpr.eqns for v in eqn.invars if isinstance(v, jax_core.Var)}
        for eqn in jaxpr.eqns:
            if eqn.primitive.name in VIEWS and all(v in given for v in eqn.invars if isinstance(v, jax_core.Var)):
                given |= set(eqn.outvars)  # a reshape of an argument is still the argument (a bitcast)
                continue
            if eqn.primitive is pallas_call_p:
                made = tuple(n for n, v in enumerate(eqn.invars) if isinstance(v, jax_core.Var) and v not in given)
                kept = tuple(n for n, v in enumerate(eqn.outvars) if v not in returned or v in used)
                if made or kept:
                    found[id(eqn)] = (made, kept)
                continue
            key = CALLS.get(eqn.primitive.name)
            sub = eqn.params.get(key) if key else None
            sub = getattr(sub, "jaxpr", sub)
            if sub is not None and len(sub.invars) == len(eqn.invars) and len(sub.outvars) == len(eqn.outvars):
                walk(
                    sub,
                    {i for i, o in zip(sub.invars, eqn.invars) if isinstance(o, jax_core.Var) and o in given},
                    {i for i, o in zip(sub.outvars, eqn.outvars) if o in returned and o not in used},
                )
                continue
            for inner in jax_core.jaxprs_in_params(eqn.params):
                walk(inner, set(), set())  # a loop, a branch: made and used in the program

    walk(jaxpr, set(jaxpr.invars), {v for v in jaxpr.outvars if isinstance(v, jax_core.Var)})
    return found


def extra(what, default, *args):
    """An analysis that adds to a verdict (program context, scoped buffers,
    large values, a body line) never stands in its way: its failure is a bug
    of ours, said on the worker's stderr (which the client logs) and counted
    there, and the check goes on without it. (megablox gmm once passed a
    Literal where a Var was expected, and every example of it 'raised'.)"""
    try:
        return what(*args)
    except Exception:
        EXTRA_FAILURES[0] += 1
        print(
            f"vmem-lsp internal error in {what.__name__} (#{EXTRA_FAILURES[0]}):\n{traceback.format_exc()}",
            file=sys.stderr,
        )
        return default


EXTRA_FAILURES = [0]


def trace_example(call_text: str, namespace: dict, device, direct: bool = False):
    """The unique pallas_call equations the example reaches; `device` is a
    target device, a target name, or None (trace on the host). `direct`: a
    jitted callee is traced by itself, not inside a trace of the call around
    it (0.3 ms less of a 4 ms trace; for fits(compile=False), whose requests
    want no origins)."""
    if isinstance(device, str):
        device = target_device(device)
    run, shapes = example_function(call_text, namespace, device)
    with jax.default_device(device) if device is not None else contextlib.nullcontext():
        traced = getattr(run, "traced", None) if direct else None
        closed = traced(*shapes) if traced is not None else jax.make_jaxpr(run)(*shapes)
    unique, seen = [], set()
    IN_PROGRAM.clear()
    IN_PROGRAM.update(extra(in_program, {}, closed.jaxpr))
    for eqn in pallas_equations(closed.jaxpr):
        key = (id(eqn.params["jaxpr"]), tuple(str(v.aval) for v in eqn.invars))
        if key not in seen:
            seen.add(key)
            unique.append(eqn)
    return unique


IN_PROGRAM: dict[int, tuple] = {}  # of the last trace: see in_program


# ---- describing and compiling one call ------------------------------------------


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

    Measured (extent1-grid-v6e; the same on v5e): grid=(1, 8), blocks f32[4096,4096]
    of larger arrays, an input with index map `lambda i, j: (i, 0)` is "single
    buffered" and the output with `(i, j)` "has 2 buffering levels"; `(i * 2, 0)` and
    a prefetched table's `(idx[i], 0)` were single buffered too. The compiler
    sees the iteration bounds, not only literal indices."""
    jaxpr = block_mapping.index_map_jaxpr.jaxpr
    varying = {id(v) for v, extent in zip(jaxpr.invars, grid) if not (isinstance(extent, int) and extent == 1)}
    for eqn in jaxpr.eqns:
        if any(id(v) in varying for v in eqn.invars if not isinstance(v, jax_core.Literal)):
            varying.update(id(v) for v in eqn.outvars)
    return not any(id(v) in varying for v in jaxpr.outvars if not isinstance(v, jax_core.Literal))


def _vmem_limit(compiler_params) -> int | None:
    params = compiler_params
    if isinstance(params, dict):
        params = params.get("mosaic_tpu", params.get("mosaic", None))
    if isinstance(params, dict):
        return params.get("vmem_limit_bytes")
    return getattr(params, "vmem_limit_bytes", None)


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
                dtype=compiler_dtype(bm.array_aval.dtype),
                full_shape=tuple(bm.array_aval.shape),
                block_shape=_block_sizes(bm.block_shape),
                memory_space=_memory_space(bm.block_aval),
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
        for i, a in enumerate(mapping.scratch_avals)
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
    )


def scoped_buffers(kernel_jaxpr) -> tuple[Scoped, ...]:
    """The VMEM buffers the kernel body allocates with run_scoped, at any
    depth (a pipeline inside a pipeline), in trace order, each with what made
    it. Measured on pipeline-flat-v6e (emit_pipeline of a copy, blocks f32[1024,8192]):
    the report listed one "scoped memory for ..." allocation of 64.00M per
    inner BlockSpec, the run_scoped ref f32[2,1024,8192]."""
    found: list[Scoped] = []
    scopes = [0]

    def walk(jaxpr, parent):
        for eqn in jaxpr.eqns:
            if eqn.primitive is pallas_primitives.run_scoped_p:
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
                    kind, origin, buffers = entries[n] if entries and entries[n] else ("run_scoped", where, 1)
                    found.append(
                        Scoped(
                            kind,
                            len(found),
                            compiler_dtype(inner.dtype),
                            tuple(int(d) for d in inner.shape),
                            buffers,
                            space,
                            origin,
                            scope,
                            parent,
                        )
                    )
                walk(body, scope)
                continue
            for sub in jax_core.jaxprs_in_params(eqn.params):
                walk(sub, parent)

    walk(kernel_jaxpr, -1)
    return tuple(found)


# Values up to this size stay in the vector registers (64 x 4 KiB).
VREG_FILE_BYTES = 64 * 4096


# Primitives whose big results the compiler stages in VMEM: a dot's result
# (matmul-bf16-1024^3: 2.36M of internal scratch beside an f32[1024,1024] dot)
# and a transpose. A load, a store or an elementwise op of a block streams
# through the registers (pipeline-flat-v6e: a copy of f32[1024,8192] blocks needed
# nothing beyond its pipeline windows).
STAGED_IN_VMEM = ("dot_general", "transpose")


def large_values(kernel_jaxpr, most: int = 3) -> tuple[Unseen, ...]:
    """The largest results of STAGED_IN_VMEM primitives in the kernel body
    that do not fit the vector registers, biggest first: VMEM the compiler
    adds (internal scratch) that no spec names and the model can only guess."""
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
            for sub in jax_core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(kernel_jaxpr)
    unique = {}
    for u in sorted(found, key=lambda u: -u.bytes):
        unique.setdefault((u.what, u.origin), u)
    return tuple(list(unique.values())[:most])


MLIR_LOCATION = re.compile(r'"([^"]+\.py)":(\d+):(\d+)')
UNIMPLEMENTED = re.compile(r"Unimplemented primitive in Pallas TPU lowering(?: for \w+)?: (\w+)")


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

    def first(jaxpr, around: Origin | None):
        for eqn in jaxpr.eqns:
            # An equation inside a jitted helper (jnp.sort is one) keeps only jax's
            # frames: the user line is that of the call around it.
            here = traceback_origin(eqn.source_info.traceback) or around
            if eqn.primitive.name == found[1]:
                return here
            for sub in jax_core.jaxprs_in_params(eqn.params):
                if (origin := first(sub, here)) is not None:
                    return origin
        return None

    return first(kernel_jaxpr, None)


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
        repr(mapping.scratch_avals),
        repr((mapping.num_index_operands, mapping.num_inputs, mapping.num_outputs)),
        repr(eqn.params.get("compiler_params")),
        repr(eqn.params.get("input_output_aliases")),
        repr(eqn.params.get("cost_estimate")),
        repr([str(v.aval) for v in eqn.invars]),
    ]
    for bm in mapping.block_mappings:
        parts += [
            repr(bm.block_shape),
            str(bm.array_aval),
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
    return fingerprint(eqn), device.device_kind, tuple(sorted((compiler_options or {}).items()))


@dataclass(frozen=True)
class Verdict:
    """The compiler's word on one pallas_call: whether it fits, its text, the
    kernel-body line its exception points at (a Mosaic error's traceback
    ends there; str() of it does not say), and how long it took."""

    fits: bool
    text: str | None
    origin: Origin | None = None
    seconds: float = 0.0


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


def _compile(eqn, device, compiler_options: dict | None, on_phase) -> Verdict:
    sharding = SingleDeviceSharding(device)
    args = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype, sharding=sharding) for v in eqn.invars]
    params = eqn.params
    name = kernel_name(eqn)
    started = time.perf_counter()
    try:
        with jax.default_device(device):
            on_phase("lower", name)
            lowered = jax.jit(named(name, lambda *a: pallas_call_p.bind(*a, **params))).lower(*args)
            on_phase("compile", name)
            lowered.compile(compiler_options=compiler_options or None)
        return Verdict(True, None, None, time.perf_counter() - started)
    except Exception as error:  # the compiler's verdict, whatever its type
        return Verdict(False, str(error), raised_in_body(error), time.perf_counter() - started)


def raised_in_body(error: BaseException) -> Origin | None:
    """The user line a compile error points at: jax rewrites a Mosaic error's
    traceback to end at the kernel-body line (err-align-v6e: compile_errors.py:64,
    the unaligned pl.ds; its loc(...) is only in the chained cause's text)."""
    cause = error.__cause__ or error.__context__
    # A lowering error's cause is jax's stack before the transformation: it too ends at the user's line.
    for raised in (error, cause):
        frames = [f for f in traceback.extract_tb(getattr(raised, "__traceback__", None)) if is_user_file(f.filename)]
        if frames:
            return Origin(frames[-1].filename, frames[-1].lineno)
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
) -> list[CapturedCall]:
    """Every pallas_call the example reaches, described, and compiled alone
    unless `compile` is false (a trace is enough to see block shapes).
    `on_phase(phase, kernel)` hears each step begin: "trace" (the example's
    Python), then "lower" and "compile" per kernel, so limits and messages
    can name what is running. `scoped_limit` is (bytes, where it was set):
    the compiler's scoped VMEM limit for kernels that set none themselves.
    Without `origins`, the specs and scratch carry none and a call's origin
    is where it was invoked: the provenance hooks stay out of the trace."""
    device = target_device(target) if compile else trace_device(target)
    limit, limit_source = scoped_limit or (None, None)
    compiler_options = {"xla_tpu_scoped_vmem_limit_kib": limit // 1024} if limit else None
    PROVENANCE.clear()
    on_phase("trace", None)
    calls = []
    with recording(origins):
        traced = trace_example(call_text, namespace, device, direct=not origins)
    for eqn in traced:
        invoke_origin = traceback_origin(eqn.source_info.traceback)
        provenance = PROVENANCE.get((invoke_origin.file, invoke_origin.line)) if invoke_origin else None
        key = verdict_key(eqn, device, compiler_options) if compile else None  # the fingerprint, once
        reused = key in VERDICTS
        verdict = compile_alone(eqn, device, compiler_options, on_phase, key) if compile else Verdict(True, None)
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
                compile_seconds=round(seconds, 3),
                compiled=compile,
                reused=reused,
                scoped_limit=own_limit or limit,
                error_origin=None if fits else verdict.origin or extra(body_origin, None, text, eqn.params["jaxpr"]),
                in_program=program_made(eqn, described["operands"]),
                scoped_limit_source="the pallas_call (vmem_limit_bytes)" if own_limit else limit_source,
                **described,
            )
        )
    return calls
