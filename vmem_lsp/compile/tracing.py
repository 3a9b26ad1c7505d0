"""Tracing an example: evaluate its call (`# vmem:` text) in the module's
scope with shape placeholders, trace it to a jaxpr without running it, and
find the pallas_call equations it reaches, with which of their operands and
results the rest of the program makes or uses.

Imports jax; only the worker process loads this module.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import sys
import traceback
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import SingleDeviceSharding

from ..dtypes import DIRECTIVE_DTYPES
from ..results import Origin
from ..source.directives import (
    SHAPE_FUNCTION,
    VALUES_FUNCTION,
    _ShapeLiterals,
    check_dims,
    compile_call,
    is_shape_literal,
    parse_example,
)
from . import chip_view, jax_compat
from .devices import all_devices, target_device
from .known_values import known_operands
from .provenance import traceback_origin


def _evaluator(node):
    """A function of the example's scope that gives one part of the call:
    a constant, a shape literal with whole-number dimensions and a name
    directly, anything else by evaluating its compiled expression."""
    if isinstance(node, ast.Constant):
        value = node.value
        return lambda scope: value
    if is_shape_literal(node) and check_dims(node) is None:
        dims = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        dtype, sizes = DIRECTIVE_DTYPES[cast(ast.Name, node.value).id], tuple(cast(ast.Constant, d).value for d in dims)
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
    call = parse_example(call_text).body
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
    scope = {**namespace, SHAPE_FUNCTION: make_shape, VALUES_FUNCTION: given_values}
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

        run.traced = traced  # type: ignore[attr-defined]  # `run` stays the plain function make_jaxpr traces
    return run, [leaves[i] for i in slots]


def given_values(dtype_name: str, dims: tuple[int, ...], flat: list) -> np.ndarray:
    """An array the example gives by its values (api.shape_text writes small integer arrays so)."""
    return np.asarray(flat, dtype=np.dtype(dtype_name)).reshape(dims)


JITTED = type(jax.jit(lambda: None))  # what jax.jit gives (jaxlib's PjitFunction)


def forget_own_traces(jitted) -> None:
    """Drop what jax keeps of a jitted function's traces. jax files every
    trace of one function under one hash (its static arguments, a tuner's
    block sizes, are left out of it), so each new config's lookup compares
    with all before it and a tuner's traces grow slower one by one (the
    bundled matmul over 300 configs: bench/RESULTS.md). Evicting this
    function's entries (and jax's small cache of argument shardings, keyed
    the same way) after each trace keeps the trace's cost flat; clearing all
    of jax's caches instead makes the trace after each clearing the slowest
    of all. Private parts of jax,
    each used only if there: without them, the worker's periodic clearing
    (Worker.check) still bounds the growth."""
    fun = getattr(jitted, "_fun", None)
    caches, clear = jax_compat.trace_caches()
    if fun is not None:
        for cache in caches:
            cache.evict_weakref(fun)
    if clear is not None:
        clear()


def pallas_equations(jaxpr, found=None, around=None):
    """Every kernel call (pallas_call, and mpmd_map: plgpu.kernel) in a jaxpr and the
    jaxprs nested in it. A call traced apart from the program (plgpu.kernel's custom_vmap)
    keeps only jax's frames: the traceback of the equation around it is kept in AROUND.
    A kernel's body is its own: an mpmd_map inside it (plgpu.warp_map in jax 0.12's Blackwell
    matmul) is part of that kernel, not one to compile alone."""
    found = [] if found is None else found
    for eqn in jaxpr.eqns:
        if jax_compat.is_kernel_call(eqn):
            found.append(eqn)
            if around is not None:
                AROUND[id(eqn)] = around
            continue
        subs = jax_compat.jaxprs_in_params(eqn.params)
        if not subs:
            continue
        here = eqn.source_info.traceback if traceback_origin(eqn.source_info.traceback) is not None else around
        for sub in subs:
            pallas_equations(sub, found, here)
    return found


AROUND: dict[int, object] = {}  # id(kernel equation) -> the traceback of the nearest equation around it in user code


def invoked_at(eqn) -> Origin | None:
    """The user line that invoked a kernel call: its own traceback's, else the one around it."""
    return traceback_origin(eqn.source_info.traceback) or traceback_origin(AROUND.get(id(eqn)))


# Operations that give another view of the same bytes: paged attention reshapes its arguments
# before its pallas_call, and compiled in its program it needs what it needs alone.
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
        used = {v for eqn in jaxpr.eqns for v in eqn.invars if isinstance(v, jax_compat.Var)}
        for eqn in jaxpr.eqns:
            if eqn.primitive.name in VIEWS and all(v in given for v in eqn.invars if isinstance(v, jax_compat.Var)):
                given |= set(eqn.outvars)  # a reshape of an argument is still the argument (a bitcast)
                continue
            if jax_compat.is_kernel_call(eqn):
                made = tuple(n for n, v in enumerate(eqn.invars) if isinstance(v, jax_compat.Var) and v not in given)
                kept = tuple(n for n, v in enumerate(eqn.outvars) if v not in returned or v in used)
                if made or kept:
                    found[id(eqn)] = (made, kept)
                continue
            key = jax_compat.CALLS.get(eqn.primitive.name)
            sub = eqn.params.get(key) if key else None
            sub = getattr(sub, "jaxpr", sub)
            if sub is not None and len(sub.invars) == len(eqn.invars) and len(sub.outvars) == len(eqn.outvars):
                walk(
                    sub,
                    {i for i, o in zip(sub.invars, eqn.invars) if isinstance(o, jax_compat.Var) and o in given},
                    {i for i, o in zip(sub.outvars, eqn.outvars) if o in returned and o not in used},
                )
                continue
            for inner in jax_compat.jaxprs_in_params(eqn.params):
                walk(inner, set(), set())  # a loop, a branch: made and used in the program

    walk(jaxpr, set(jaxpr.invars), {v for v in jaxpr.outvars if isinstance(v, jax_compat.Var)})
    return found


def extra(what, default, *args):
    """An analysis that adds to a verdict (program context, scoped buffers,
    large values, a body line) never stands in its way: its failure is a bug
    of ours, said on the worker's stderr (which the client logs) and counted
    there, and the check goes on without it. The case that forced it: in
    megablox gmm a Literal stands where a Var is expected, and an analysis
    that raised made every example of it 'raise'."""
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


def trace_example(call_text: str, namespace: dict, device, direct: bool = False, values: bool = False):
    """The unique pallas_call equations the example reaches; `device` is a
    target device, a target name, or None (trace on the host). `direct`: a
    jitted callee is traced by itself, not inside a trace of the call around
    it (cheaper: for fits(compile=False), whose requests want no origins).
    `values`: what the example gives of each call's operands' values (KNOWN)."""
    if isinstance(device, str):
        device = target_device(device)
    with chip_view.seen_as(all_devices(device)):  # the example's arguments may ask which chip too
        # Outside the default device: arguments made concrete (a mask, a table) need a real one.
        run, shapes = example_function(call_text, namespace, device)
    default = jax.default_device(device) if device is not None else contextlib.nullcontext()
    with default, chip_view.seen_as(all_devices(device)):
        traced = getattr(run, "traced", None) if direct else None
        closed = traced(*shapes) if traced is not None else jax.make_jaxpr(run)(*shapes)
    unique, seen = [], set()
    IN_PROGRAM.clear()
    AROUND.clear()
    IN_PROGRAM.update(extra(in_program, {}, closed.jaxpr))
    KNOWN.clear()
    if values:
        KNOWN.update(extra(known_operands, {}, closed))
    for eqn in pallas_equations(closed.jaxpr):
        key = (id(jax_compat.kernel_body(eqn)), tuple(str(v.aval) for v in eqn.invars))
        if key not in seen:
            seen.add(key)
            unique.append(eqn)
    return unique


IN_PROGRAM: dict[int, tuple] = {}  # of the last trace: see in_program
KNOWN: dict[int, list] = {}  # of the last trace, when asked: each call's operands' values (known_values)
