"""What every family's worker side does alike with one captured pallas_call: name it as
the user did, jit it alone and lower and compile it for a compile-only device, and find the
user line an error points at. Imports jax; only the worker process loads this module."""

from __future__ import annotations

import os
import re
import traceback

import jax
import jax.numpy as jnp
from jax.sharding import SingleDeviceSharding

from ..dtypes import COMPILER_DTYPES
from ..results import Origin
from . import jax_compat
from .provenance import is_user_file, traceback_origin


def no_phase(phase: str, kernel: str | None = None) -> None:
    pass


def compiler_dtype(dtype) -> str:
    name = jnp.dtype(dtype).name if not hasattr(dtype, "name") else dtype.name
    return COMPILER_DTYPES.get(name, name)


MLIR_LOCATION = re.compile(r'"([^"]+\.py)":(\d+):(\d+)')


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


def error_text(error: BaseException) -> str:
    """What a compile error says; for one that says nothing (a bare assert in jax: jax 0.12 has no
    pallas_call lowering for Mosaic GPU's CompilerParams), its type and the line that raised it,
    so that no diagnostic reads "the compiler rejected this kernel: " and nothing more."""
    said = str(error).strip()
    if said:
        return str(error)
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return type(error).__name__
    last = frames[-1]
    return f"{type(error).__name__} at {last.filename}:{last.lineno} in {last.name}: {(last.line or '').strip()}"


def named(name: str, function):
    """`function` under the kernel's name: the compiler names what it
    allocates for a kernel body after the jitted function ("scoped memory for
    outer_kernel.1"), which must be the user's kernel, not our `<lambda>`."""
    function.__name__ = function.__qualname__ = "".join(c if c.isalnum() else "_" for c in name) or "pallas_call"
    return function


def kernel_name(eqn) -> str:
    """The name the user gave (`name=`), else the kernel function's."""
    debug = getattr(jax_compat.kernel_body(eqn), "debug_info", None)
    return eqn.params.get("name") or getattr(debug, "func_name", None) or "pallas_call"


def lower_and_compile(eqn, device, compiler_options: dict | None, on_phase=no_phase, params: dict | None = None):
    """One kernel call (a pallas_call, an mpmd_map) jitted alone under its kernel's name, lowered and compiled for
    `device` (`params`: the equation's, changed); raises what the compiler raises."""
    sharding = SingleDeviceSharding(device)
    args = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype, sharding=sharding) for v in eqn.invars]
    params = params or eqn.params
    name = kernel_name(eqn)
    with jax.default_device(device):
        on_phase("lower", name)
        lowered = jax.jit(named(name, lambda *a: eqn.primitive.bind(*a, **params))).lower(*args)
        on_phase("compile", name)
        lowered.compile(compiler_options=compiler_options or None)
