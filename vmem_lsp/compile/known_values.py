"""The values an example gives, not only its shapes: an array the call passes as itself (a
module's `KV_LENS = np.array([...])`, `vmem_lsp.rank(fn, (..., kv_lens, ...))` with a
NumPy array) is a constant of the traced program, and so is what the program computes
from constants alone. For each kernel call, the operands known this way, as NumPy values:
what a kernel's scalar-prefetched lengths are (tpu/trips.py counts its loops with them).

Small integer and boolean work only, evaluated on the host with NumPy: a value the
evaluation does not cover is unknown, never guessed. Imports jax; only the worker process
loads this module.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from . import jax_compat


class Unknown:
    """A value not known from the example (an argument given by its shape, vector work)."""

    def __repr__(self) -> str:
        return "?"


UNKNOWN = Unknown()

# The largest value the program's constants are followed through (a page table of 64 x 1024).
MOST_ELEMENTS = 1 << 20

_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "max": np.maximum,
    "min": np.minimum,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "eq": operator.eq,
    "ne": operator.ne,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
    "shift_left": np.left_shift,
    "shift_right_arithmetic": np.right_shift,
}
_UNARY: dict[str, Callable[[Any], Any]] = {"neg": operator.neg, "not": np.invert, "abs": np.abs}
_CUMULATIVE: dict[str, Callable[..., Any]] = {
    "cumsum": np.cumsum,
    "cummax": np.maximum.accumulate,
    "cummin": np.minimum.accumulate,
}
_REDUCE: dict[str, Callable[..., Any]] = {"reduce_sum": np.sum, "reduce_max": np.max, "reduce_min": np.min}


def integer_division(a, b):
    """lax.div on integers rounds toward zero (C), unlike NumPy's floor."""
    a, b = np.asarray(a), np.asarray(b)
    if np.issubdtype(a.dtype, np.integer):
        quotient = np.abs(a) // np.abs(b)
        return np.where((a < 0) != (b < 0), -quotient, quotient)
    return np.true_divide(a, b)


def evaluate(eqn, values: list) -> list | None:
    """The equation's results from its inputs' NumPy values, for the primitives that steer a
    kernel (integer arithmetic, comparisons, selects, casts, shape changes, sums); None for
    any other (its results are then unknown)."""
    name, params = eqn.primitive.name, eqn.params
    out = eqn.outvars[0].aval if eqn.outvars else None
    shape = tuple(int(d) for d in getattr(out, "shape", ()))
    dtype = getattr(out, "dtype", None)
    try:
        if name in _BINARY:
            found = _BINARY[name](np.asarray(values[0]), np.asarray(values[1]))
        elif name in _UNARY:
            found = _UNARY[name](np.asarray(values[0]))
        elif name == "div":
            found = integer_division(values[0], values[1])
        elif name == "rem":
            found = np.fmod(values[0], values[1])
        elif name == "select_n":
            which, *cases = values
            found = np.choose(np.asarray(which).astype(np.int32), [np.broadcast_to(c, shape) for c in cases])
        elif name == "convert_element_type":
            found = np.asarray(values[0])
        elif name == "broadcast_in_dim":
            dims = params["broadcast_dimensions"]
            kept = [shape[i] if i in dims else 1 for i in range(len(shape))]
            found = np.broadcast_to(np.asarray(values[0]).reshape(kept), shape)
        elif name in ("reshape", "squeeze", "expand_dims"):
            found = np.asarray(values[0]).reshape(shape)
        elif name == "iota":
            dim = params.get("dimension", 0)
            found = np.broadcast_to(
                np.arange(shape[dim]).reshape([-1 if i == dim else 1 for i in range(len(shape))]), shape
            )
        elif name == "slice":
            strides = params.get("strides") or (1,) * len(shape)
            at = tuple(slice(b, e, s) for b, e, s in zip(params["start_indices"], params["limit_indices"], strides))
            found = np.asarray(values[0])[at]
        elif name == "concatenate":
            found = np.concatenate([np.asarray(v) for v in values], axis=params["dimension"])
        elif name in ("cumsum", "cummax", "cummin"):
            how = _CUMULATIVE[name]
            axis, reverse = params.get("axis", 0), params.get("reverse", False)
            value = np.flip(values[0], axis) if reverse else np.asarray(values[0])
            found = how(value, axis=axis)
            found = np.flip(found, axis) if reverse else found
        elif name in _REDUCE:
            found = _REDUCE[name](np.asarray(values[0]), axis=tuple(params["axes"]))
        else:
            return None
    except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError, FloatingPointError):
        return None
    found = np.asarray(found)
    if found.shape != shape:
        return None
    return [found.astype(dtype) if dtype is not None else found]


def as_value(value) -> object:
    """A constant of the traced program as NumPy, or UNKNOWN (a big or opaque one)."""
    try:
        found = np.asarray(value)
    except Exception:
        return UNKNOWN
    if found.dtype == object or found.size > MOST_ELEMENTS:
        return UNKNOWN
    return found


def known_operands(closed_jaxpr) -> dict[int, list]:
    """For each kernel call the program reaches (by id of its equation): its operands' values
    where the program makes them from constants, else UNKNOWN. Calls (a jit around the
    kernel) are followed with what is known of their arguments."""
    found: dict[int, list] = {}

    def walk(jaxpr, consts, args) -> list:
        env: dict = {}

        def read(var):
            if isinstance(var, jax_compat.Literal):
                return as_value(var.val)
            return env.get(var, UNKNOWN)

        for var, value in zip(jaxpr.constvars, consts):
            env[var] = as_value(value)
        for var, value in zip(jaxpr.invars, args):
            env[var] = value
        for eqn in jaxpr.eqns:
            values = [read(v) for v in eqn.invars]
            if jax_compat.is_kernel_call(eqn):
                found[id(eqn)] = values
                continue
            key = jax_compat.CALLS.get(eqn.primitive.name)
            inner = eqn.params.get(key) if key else None
            if inner is not None:
                outs = walk(getattr(inner, "jaxpr", inner), getattr(inner, "consts", ()), values)
            elif any(v is UNKNOWN for v in values) or any(
                math.prod(getattr(v.aval, "shape", ())) > MOST_ELEMENTS for v in eqn.outvars
            ):
                outs = [UNKNOWN] * len(eqn.outvars)
            else:
                outs = evaluate(eqn, values) or [UNKNOWN] * len(eqn.outvars)
            for var, value in zip(eqn.outvars, outs):
                env[var] = value
            for sub in () if inner is not None else jax_compat.jaxprs_in_params(eqn.params):
                walk(sub, (), [UNKNOWN] * len(sub.invars))  # a kernel inside a loop or branch: its values unknown
        return [read(v) for v in jaxpr.outvars]

    walk(closed_jaxpr.jaxpr, closed_jaxpr.consts, [UNKNOWN] * len(closed_jaxpr.jaxpr.invars))
    return found
