"""What a GPU kernel's compiler params and body tell the shared-memory model
(gpu_layout.py): Triton's num_stages and num_warps, Mosaic GPU's pipeline depth
(max_concurrent_steps over its "sequential" grid axes) and reduction scratch, and
each dot of the body with where its operands come from (an input's whole block, a
slice read inside a loop that Triton pipelines, or a computed value).

Reads the kernel's jaxpr and params only; the worker fills CapturedCall.family_facts
with it on a GPU target.
"""

from __future__ import annotations

import math

from ..compile import jax_compat
from ..dtypes import COMPILER_DTYPES
from .compile import lowers_with_mosaic_gpu
from .layout import REDUCTIONS, GpuDot, GpuKernel

# jax's defaults when a kernel's params leave them out (jax 0.10.2): Triton's num_stages
# on CUDA and num_warps (pallas/triton/pallas_call_registration.py), Mosaic GPU's
# max_concurrent_steps and reduction_scratch_bytes (pallas/mosaic_gpu/core.CompilerParams).
TRITON_STAGES, TRITON_WARPS = 3, 4
MOSAIC_STEPS, MOSAIC_REDUCTION_SCRATCH = 1, 128 * 4 * 4

LOOPS = ("scan", "while")
READS = ("get", "masked_load")  # a ref read: x_ref[...], pltriton.load
# What keeps its operand's source on the way to a dot: a cast, and the views of a tile that
# Triton lowers without a copy of their own: jax's flash attention contracts `k.T` (a
# transpose), its paged attention gathers whole pages and reshapes them to (block_k, head_dim).
THROUGH = ("convert_element_type", "reshape", "squeeze", "expand_dims")
TRANSPOSES = ("transpose",)


def _param(params, backend: str, name: str):
    """A field of the kernel's compiler params: a params class (jax 0.9 on) or an older dict."""
    if isinstance(params, dict):
        params = params.get(backend, params)
        return params.get(name) if isinstance(params, dict) else None
    return getattr(params, name, None)


def _dtype(aval) -> str:
    name = getattr(aval.dtype, "name", str(aval.dtype))
    return COMPILER_DTYPES.get(name, name)


def _shape(aval) -> tuple[int, ...]:
    return tuple(int(d) if isinstance(d, int) else -1 for d in getattr(aval, "shape", ()))


def gpu_kernel_of(eqn) -> GpuKernel:
    """The stages, warps, reductions and dots of one pallas_call for a GPU target; of a
    plgpu.kernel, none: its body stages what it allocates itself (CapturedCall.scoped)."""
    params = eqn.params.get("compiler_params")
    if jax_compat.is_mesh_kernel(eqn):
        return GpuKernel(stages=1, warps=4, mesh=True)
    mapping = eqn.params["grid_mapping"]
    jaxpr = eqn.params["jaxpr"]
    first = mapping.num_index_operands
    # kernel refs: *prefetch, *inputs, *outputs, *scratch; what each var holds:
    # (source, input, transposed since it was read or made, where it was read)
    held: dict[int, tuple[str, int | None, bool, int]] = {
        id(v): ("ref", n, False, 0) for n, v in enumerate(jaxpr.invars[first : first + mapping.num_inputs])
    }
    loaded: set[int] = set()  # values that depend on a read inside a loop (a page table's entries)
    dots: list[GpuDot] = []
    reduced = [0]
    loops = [0]  # the body's top-level loops so far
    clock = [0]  # the equations walked so far: where a read or a dot is in the body
    seen: set[str] = set()  # every primitive of the body: the model knows what some cost (layout.unsized)

    def source(var) -> tuple[str, int | None, bool, int]:
        found = held.get(id(var)) if not isinstance(var, jax_compat.Literal) else None
        return found if found is not None and found[0] != "ref" else ("value", None, bool(found and found[2]), 0)

    def walk(body, loop: int) -> None:
        for e in body.eqns:
            clock[0] += 1
            name = e.primitive.name
            if loop and any(not isinstance(v, jax_compat.Literal) and id(v) in loaded for v in e.invars):
                loaded.update(id(v) for v in e.outvars)
            seen.add(name)
            if name in READS and id(e.invars[0]) in held and held[id(e.invars[0])][0] == "ref":
                index = held[id(e.invars[0])][1]
                whole = _shape(e.outvars[0].aval) == _shape(e.invars[0].aval)
                # A read in a loop whose indices come from another read in the loop gathers (paged
                # attention's pages by their table): Triton pipelines it one level less deep.
                gathers = any(not isinstance(v, jax_compat.Literal) and id(v) in loaded for v in e.invars[1:])
                what = ("gather" if gathers else "loop") if loop else "block" if whole else "slice"
                held[id(e.outvars[0])] = (what, index, False, clock[0])
                if loop:
                    loaded.add(id(e.outvars[0]))
            elif name in THROUGH and id(e.invars[0]) in held:
                held[id(e.outvars[0])] = held[id(e.invars[0])]
            elif name in TRANSPOSES and not isinstance(e.invars[0], jax_compat.Literal):
                what, index, flipped, at = held.get(id(e.invars[0]), ("value", None, False, 0))
                held[id(e.outvars[0])] = (what, index, not flipped, at)
            elif name == "dot_general":
                (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = e.params["dimension_numbers"]
                lhs, rhs = e.invars[0].aval, e.invars[1].aval
                kept = [d for n, d in enumerate(_shape(lhs)) if n not in (*lhs_contract, *lhs_batch)]
                columns = [d for n, d in enumerate(_shape(rhs)) if n not in (*rhs_contract, *rhs_batch)]
                (lhs_from, lhs_input, lhs_flipped, lhs_at), (rhs_from, rhs_input, flipped, rhs_at) = (
                    source(e.invars[0]),
                    source(e.invars[1]),
                )
                contracts_last = len(_shape(rhs)) >= 2 and tuple(rhs_contract) == (len(_shape(rhs)) - 1,)
                dots.append(
                    GpuDot(
                        _shape(lhs),
                        _shape(rhs),
                        _dtype(lhs),
                        math.prod(kept),
                        bool(loop),
                        lhs_from,
                        rhs_from,
                        lhs_input,
                        rhs_input,
                        _dtype(rhs) if _dtype(rhs) != _dtype(lhs) else None,
                        contracts_last != flipped,  # y.T contracted on its first dimension is x @ y.T too
                        loop,
                        math.prod(columns),
                        lhs_flipped,
                        clock[0],
                        lhs_at,
                        rhs_at,
                    )
                )
            elif name in REDUCTIONS:
                reduced[0] = max(reduced[0], math.prod(_shape(e.outvars[0].aval)))
            subs = jax_compat.jaxprs_in_params(e.params)
            inner = loop
            if name in LOOPS and not loop and subs:  # a while loop's cond and body are one loop
                loops[0] += 1
                inner = loops[0]
            for sub in subs:
                # a loop's body, a branch, a call: its invars are the equation's last ones
                outer = e.invars[len(e.invars) - len(sub.invars) :] if len(sub.invars) <= len(e.invars) else ()
                for var_in, var in zip(sub.invars, outer):
                    if not isinstance(var, jax_compat.Literal) and id(var) in held:
                        held[id(var_in)] = held[id(var)]
                walk(sub, inner)

    walk(jaxpr, 0)
    if lowers_with_mosaic_gpu(params):
        semantics = _param(params, "mosaic_gpu", "dimension_semantics") or ()
        return GpuKernel(
            stages=int(_param(params, "mosaic_gpu", "max_concurrent_steps") or MOSAIC_STEPS),
            warps=4,
            # Mosaic GPU pipelines over every axis not "parallel" (lowering.py: which_parallel)
            sequential=tuple(n for n, s in enumerate(semantics) if str(getattr(s, "value", s)).lower() != "parallel"),
            reduction_scratch=int(_param(params, "mosaic_gpu", "reduction_scratch_bytes") or MOSAIC_REDUCTION_SCRATCH),
            reduced=reduced[0],
            dots=tuple(dots),
            primitives=tuple(sorted(seen)),
        )
    return GpuKernel(
        stages=int(_param(params, "triton", "num_stages") or TRITON_STAGES),
        warps=int(_param(params, "triton", "num_warps") or TRITON_WARPS),
        reduced=reduced[0],
        dots=tuple(dots),
        primitives=tuple(sorted(seen)),
    )
