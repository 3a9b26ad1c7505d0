"""Every difference between jax versions the worker meets, in one place:
the private parts of jax that capture, tracing and provenance use, found by
looking for them (an import tried, an attribute read), never by a version
number. A part missing on the running jax either has a fallback here, or
becomes a named loss with a sentence the user reads ("no provenance for
BlockSpecs on jax 0.7.2: ..."), carried on every result of the worker.

The cases that forced it: jax 0.6.2 and 0.7.2 have no
`GridMapping.scratch_avals` (the scratch refs are the kernel jaxpr's
`slice_scratch_ops` invars there), no `BlockMapping.array_aval` (its
`array_shape_dtype` says the same) and no `BufferedRef.buffer_count` (the
window's leading dimension says it).

Imports jax; only the worker process loads this module.
"""

from __future__ import annotations

import importlib
import sys
import traceback
import types
from typing import Any

import jax

VERSION: str = getattr(jax, "__version__", "unknown")


def _module(name: str) -> types.ModuleType | None:
    """A private module of jax, or None where this jax has none by that name
    (or it fails to import: jax 0.9.2's Pallas TPU needs the undeclared absl)."""
    try:
        return importlib.import_module(name)
    except Exception:
        return None


core: Any = _module("jax._src.core")
pjit: Any = _module("jax._src.pjit")
partial_eval: Any = _module("jax._src.interpreters.partial_eval")
linear_util: Any = _module("jax._src.linear_util")
api_util: Any = _module("jax._src.api_util")
pallas_core: Any = _module("jax._src.pallas.core")
pallas_call_module: Any = _module("jax._src.pallas.pallas_call")
pallas_primitives: Any = _module("jax._src.pallas.primitives")
pipeline: Any = _module("jax._src.pallas.mosaic.pipeline")
mpmd: Any = _module("jax._src.pallas.mpmd")  # jax 0.10 on: pl.kernel and plgpu.kernel lower through mpmd_map

pallas_call_p: Any = getattr(pallas_call_module, "pallas_call_p", None)
run_scoped_p: Any = getattr(pallas_primitives, "run_scoped_p", None)
mpmd_map_p: Any = getattr(mpmd, "mpmd_map_p", None)
Literal: Any = getattr(core, "Literal", ())  # isinstance(x, ()) is never true
Var: Any = getattr(core, "Var", ())
no_block_spec: Any = getattr(pallas_core, "no_block_spec", None)
BlockSpec: Any = getattr(pallas_core, "BlockSpec", None)
MemoryRef: Any = getattr(pallas_core, "MemoryRef", None)
BufferedRef: Any = getattr(pipeline, "BufferedRef", None)


# Primitives that call a jaxpr with their own operands, one for one, and the param that holds it:
# a value passed through them is still what the program was given, and their equations are the
# caller's code (jnp.where is a jit of select_n).
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


# name -> the sentence the user reads; what the running jax lacks, found at import
# here or at first use (a hook whose reads fail on this jax).
LOSSES: dict[str, str] = {}

SENTENCES = {
    "spec_origins": "no provenance for BlockSpecs on jax {v}: errors land on the pallas_call line",
    "scratch_origins": "no provenance for scratch shapes on jax {v}: their errors land on the pallas_call line",
    "scoped_origins": "emit_pipeline windows and run_scoped buffers are not tied to their lines on jax {v}: "
    "their errors land on the kernel",
    "scoped": "run_scoped and emit_pipeline buffers are not seen on jax {v}: the layout model leaves them out",
    "scratch": "scratch shapes are not seen on jax {v}: the layout model leaves them out",
    "trace_caches": "on jax {v}, a jitted kernel's traces are not evicted from jax's caches: a tuner's "
    "traces grow slower until the worker clears them",
}


def lose(name: str) -> None:
    """Record a loss once, and say it on the worker's stderr (the client logs it)."""
    if name not in LOSSES:
        LOSSES[name] = SENTENCES[name].format(v=VERSION)
        print(f"vmem-lsp: {LOSSES[name]}", file=sys.stderr)


def losses() -> tuple[str, ...]:
    return tuple(LOSSES.values())


def detect(namespace: dict) -> list[str]:
    """The losses a jax with these parts (this module's names above) has at
    import: pure, so the rule is tested with parts taken away."""
    found = []
    if namespace.get("BlockSpec") is None or namespace.get("pallas_call_module") is None:
        found.append("spec_origins")
    if namespace.get("MemoryRef") is None:
        found.append("scratch_origins")
    if namespace.get("pallas_primitives") is None or not hasattr(namespace["pallas_primitives"], "run_scoped"):
        found.append("scoped_origins")
    elif namespace.get("BufferedRef") is None:
        found.append("scoped_origins")
    if namespace.get("run_scoped_p") is None:
        found.append("scoped")
    if getattr(namespace.get("pjit"), "_infer_params_cached", None) is None:
        found.append("trace_caches")
    return found


for _name in detect(dict(globals())):
    lose(_name)


class CompatError(Exception):
    """A part of jax vmem-lsp cannot check without is missing: an internal
    error naming the jax version, never "the example raised"."""


def internal_message(error: BaseException, doing: str) -> str:
    """What the user reads for a failure of vmem-lsp's own capture: the jax
    that runs (its internals moved), the error and where in vmem-lsp."""
    frames = traceback.extract_tb(error.__traceback__)
    where = f" ({frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""
    return (
        f"vmem-lsp internal error on jax {VERSION} while {doing}: {type(error).__name__}: {error}{where}; "
        f"this jax's internals may differ from what vmem-lsp knows: please report it"
    )


def is_kernel_call(eqn) -> bool:
    """A kernel the family compiles: a pallas_call, or (jax 0.10 on) an mpmd_map, which
    plgpu.kernel and pl.kernel bind: one body per mesh over refs in the device's memory,
    its blocks moved by the body itself (emit_pipeline, copies) into what it run_scoped."""
    return eqn.primitive is require_pallas_call() or (mpmd_map_p is not None and eqn.primitive is mpmd_map_p)


def is_mesh_kernel(eqn) -> bool:
    """An mpmd_map kernel (plgpu.kernel, pl.kernel): no grid mapping, no BlockSpecs."""
    return mpmd_map_p is not None and eqn.primitive is mpmd_map_p


def kernel_body(eqn):
    """A kernel call's body jaxpr: a pallas_call's, or the first mesh's of an mpmd_map."""
    if is_mesh_kernel(eqn):
        body = eqn.params["jaxprs"][0]
        return getattr(body, "jaxpr", body)
    return eqn.params["jaxpr"]


def require_pallas_call():
    if pallas_call_p is None:
        raise CompatError(f"jax {VERSION} has no pallas_call primitive where vmem-lsp looks for it")
    return pallas_call_p


# ---- reads of jax's objects -------------------------------------------------------------------


def jaxprs_in_params(params) -> list:
    """The jaxprs nested in an equation's params (a loop's body, a branch)."""
    found = getattr(core, "jaxprs_in_params", None)
    if found is not None:
        return list(found(params))
    subs: list = []
    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            item = getattr(item, "jaxpr", item)
            if hasattr(item, "eqns") and hasattr(item, "invars"):
                subs.append(item)
    return subs


def scratch_avals(eqn) -> tuple:
    """The scratch refs' avals of a pallas_call: GridMapping.scratch_avals,
    else the kernel jaxpr's invars at slice_scratch_ops (jax 0.6, 0.7)."""
    mapping = eqn.params["grid_mapping"]
    avals = getattr(mapping, "scratch_avals", None)
    if avals is not None:
        return tuple(avals)
    where = getattr(mapping, "slice_scratch_ops", None)
    jaxpr = getattr(eqn.params.get("jaxpr"), "jaxpr", eqn.params.get("jaxpr"))
    if where is not None and jaxpr is not None:
        return tuple(v.aval for v in jaxpr.invars[where])
    lose("scratch")
    return ()


def array_aval(block_mapping):
    """The whole operand's shape and dtype: array_aval, array_shape_dtype on jax 0.6, 0.7."""
    found = getattr(block_mapping, "array_aval", None)
    if found is None:
        found = getattr(block_mapping, "array_shape_dtype", None)
    if found is None:
        raise CompatError(f"jax {VERSION}'s BlockMapping has neither array_aval nor array_shape_dtype")
    return found


def block_aval(block_mapping):
    return getattr(block_mapping, "block_aval", None)


def buffered(item) -> tuple[bool, Any, int, Any]:
    """(is input, spec, buffer count, window ref) of an emit_pipeline
    BufferedRef; the count is the window's leading dimension where the class
    has no buffer_count (jax 0.6, 0.7: always double-buffered)."""
    window = item.window_ref
    count = getattr(item, "buffer_count", None)
    if count is None:
        shape = getattr(window, "shape", None) or getattr(getattr(window, "inner_aval", None), "shape", None)
        count = int(shape[0]) if shape else 2
    return bool(item.buffer_type.is_input), item.spec, int(count), window


def trace_caches() -> tuple[list, Any]:
    """(caches keyed by a traced function, with evict_weakref; a clear()) of
    jax's trace machinery, each only if this jax has it."""
    caches = [getattr(pjit, "_infer_params_cached", None), getattr(partial_eval, "trace_to_jaxpr", None)]
    clear = getattr(getattr(pjit, "_process_in_axis_resources", None), "cache_clear", None)
    return [c for c in caches if getattr(c, "evict_weakref", None) is not None], clear


# ---- what the environment lacks ---------------------------------------------------------------

# Modules jax imports without declaring them as dependencies -> the package that gives them.
UNDECLARED = {"absl": "absl-py"}


def undeclared_dependency(error: BaseException) -> str | None:
    """The clear word for a module jax itself needs and did not install (jax
    0.9.2's Pallas TPU imports absl), in place of a traceback."""
    if not isinstance(error, ModuleNotFoundError) or error.name is None:
        return None
    top = error.name.split(".")[0]
    if top not in UNDECLARED:
        return None
    jax_dir = jax.__file__.rsplit("/", 1)[0]
    if not any(f.filename.startswith(jax_dir) for f in traceback.extract_tb(error.__traceback__)):
        return None
    return (
        f"jax {VERSION} imports {top!r} without declaring it as a dependency: install it beside jax with "
        f"`{sys.executable} -m pip install {UNDECLARED[top]}`"
    )
