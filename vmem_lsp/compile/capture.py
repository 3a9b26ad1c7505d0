"""Capturing an example's calls, inside the worker: each pallas_call the
trace reached is described (operands, scratch, scoped buffers, as
`results.CapturedCall`, with what the target's family reads of it for its
model) and compiled alone by the target's family (Family.worker()) with no
hardware attached; verdicts are kept by what decides them, so an edit
elsewhere in the file compiles nothing again.

Imports jax; only the worker process loads this module.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Mapping
from dataclasses import replace

from ..families import families, family_of
from ..family import Verdict, WorkerSide
from ..results import CapturedCall, Operand, Origin, Scoped, Scratch
from . import jax_compat
from .cut_grids import cut_grids, extrapolate
from .devices import target_device, trace_device
from .kernels import MLIR_LOCATION, compiler_dtype, first_origin, kernel_name, no_phase
from .provenance import (
    BOUND,
    PROVENANCE,
    SCOPED,
    Provenance,
    ScopedRecord,
    is_user_file,
    provenance_of,
    recording,
    scoped_record,
    traceback_origin,
)
from .request_limits import OverTime
from .tracing import IN_PROGRAM, KNOWN, extra, invoked_at, trace_example


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
    if isinstance(params, Mapping):  # jax 0.8: a FrozenDict keyed by the backend (its get takes no default)
        params = next((params[key] for key in ("mosaic_tpu", "mosaic") if key in params), None)
    if isinstance(params, Mapping):
        return params["vmem_limit_bytes"] if "vmem_limit_bytes" in params else None
    return getattr(params, "vmem_limit_bytes", None)


def params_platform(compiler_params) -> str | None:
    """The platform (a Family.platform: "tpu", "gpu") whose compiler params a kernel carries
    (pltpu, pltriton, plgpu: jax 0.9 on, classes of those modules; before, dicts keyed by
    their names); None when it gives none, and lowers for any."""
    if not compiler_params:
        return None
    if isinstance(compiler_params, Mapping):  # jax 0.8's FrozenDict is a Mapping, not a dict
        keys = set(compiler_params)
        return next((f.platform for f in families() if keys & set(f.params_modules)), None)
    module = f"{type(compiler_params).__module__}."
    return next((f.platform for f in families() if any(f".{name}." in module for name in f.params_modules)), None)


def _pick(origins, index):
    return origins[index] if index < len(origins) else None


def describe(eqn, provenance: Provenance | None) -> dict:
    """The call's operands and scratch, numbered as the compiler numbers them:
    scalar-prefetch operands first, then the inputs; outputs on their own."""
    if jax_compat.is_mesh_kernel(eqn):
        return describe_mesh_kernel(eqn)
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
        flops_per_step=extra(body_flops, None, eqn.params["jaxpr"]),
        loops_unknown=extra(has_unknown_loops, False, eqn.params["jaxpr"]),
        steps_vary=extra(has_conditional_work, False, eqn.params["jaxpr"]),
    )


def describe_mesh_kernel(eqn) -> dict:
    """An mpmd_map kernel (plgpu.kernel, pl.kernel): its operands stay whole in the device's
    memory (no BlockSpec, no block); what it stages is what its body allocates with
    run_scoped (plgpu.SMEM, scratch_types, emit_pipeline's buffers), in `scoped`. Its grid is
    the mesh's."""
    body = jax_compat.kernel_body(eqn)
    outs = eqn.params.get("out_avals") or tuple(v.aval for v in eqn.outvars)
    mesh = eqn.params["meshes"][0]
    operands = [
        Operand("in", i, i, compiler_dtype(v.aval.dtype), tuple(v.aval.shape), None, "gmem", None, False, None)
        for i, v in enumerate(eqn.invars)
    ]
    operands += [
        Operand("out", i, i, compiler_dtype(a.dtype), tuple(a.shape), None, "gmem", None, False, None)
        for i, a in enumerate(outs)
    ]
    grid = tuple(int(g) if isinstance(g, int) else -1 for g in getattr(mesh, "grid", ()) or ())
    return dict(
        grid=grid,
        num_scalar_prefetch=0,
        operands=tuple(operands),
        scratch=(),
        vmem_limit_bytes=None,
        scoped=extra(scoped_buffers, (), body, STAGED_SPACES),
        flops_per_step=extra(body_flops, None, body),
        loops_unknown=extra(has_unknown_loops, False, body),
        steps_vary=extra(has_conditional_work, False, body),
    )


# What a kernel's body allocates that counts: a TPU's VMEM (a space unnamed is VMEM there); of a
# mesh kernel every space (shared memory, barriers, registers, tensor memory), each kept with its
# space: the model adds the shared memory along the nesting of scopes the others keep whole.
VMEM_SPACES = (None, "vmem")
STAGED_SPACES = (None, "vmem", "smem", "regs", "tmem", "gmem")


def has_unknown_loops(kernel_jaxpr) -> bool:
    """Whether the kernel body runs a loop whose trip count is not known when it
    compiles (a fori_loop over bounds read from a ref, a loop over the
    scalar-prefetched lengths of ragged attention). The compiler's static
    estimate leaves such a loop out, body and all (bench/probe_loop_count.py),
    so its cycles do not follow the block sizes that change the trip count.
    A while loop whose test reads only carries that start from constants (a
    bound written in the code) is counted in full, and is not one."""

    def walk(jaxpr) -> bool:
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "while" and not counted_when_compiled(eqn):
                return True
            if any(walk(sub) for sub in jax_compat.jaxprs_in_params(eqn.params)):
                return True
        return False

    return walk(kernel_jaxpr)


def counted_when_compiled(while_eqn) -> bool:
    """A while loop the compiler can count: its test takes no value from outside the loop
    and every carry it reads starts from a constant (`while i < 8` from i = 0). A carry
    the body computes from a ref makes it unknown only through the test, which is then
    given the ref's value as a constant of its own (cond_nconsts)."""
    params = while_eqn.params
    if params.get("cond_nconsts", 0):
        return False
    cond = params["cond_jaxpr"].jaxpr
    carries = while_eqn.invars[params.get("cond_nconsts", 0) + params.get("body_nconsts", 0) :]
    used = {v for eqn in cond.eqns for v in eqn.invars if not isinstance(v, jax_compat.Literal)}
    used |= {v for v in cond.outvars if not isinstance(v, jax_compat.Literal)}
    return all(isinstance(start, jax_compat.Literal) for var, start in zip(cond.invars, carries) if var in used)


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
    its trip count is not known here). Elementwise work is left out: the roofline
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


def scoped_buffers(kernel_jaxpr, spaces: tuple = VMEM_SPACES) -> tuple[Scoped, ...]:
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
                    if space not in spaces or not hasattr(inner, "shape"):
                        continue
                    known, record = scoped_record(aval)
                    if not known:
                        record = entries[n] if entries else None
                    record = record or ScopedRecord("run_scoped", where, 1)
                    if (
                        record.origin is None and spaces is STAGED_SPACES
                    ):  # made in jax (a plgpu pipeline's): the call's line
                        record = record._replace(origin=where)
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


def program_made(eqn, operands) -> tuple[tuple[str, int], ...]:
    """(role, index) of the operands the example's program makes and of the
    results it uses (IN_PROGRAM), as the operands are numbered."""
    made, kept = IN_PROGRAM.get(id(eqn), ((), ()))
    if jax_compat.is_mesh_kernel(eqn):
        dynamic = 0
    else:
        mapping = eqn.params["grid_mapping"]
        dynamic = len(eqn.invars) - mapping.num_index_operands - mapping.num_inputs
    found = [(op.role, op.index) for op in operands if op.role in ("in", "prefetch") and dynamic + op.operand in made]
    found += [("out", op.index) for op in operands if op.role == "out" and op.index in kept]
    return tuple(found)


def fingerprint(eqn) -> str:
    """What decides the compiler's verdict on one pallas_call, without source
    positions: an edit elsewhere in the file (a comment, another function)
    leaves it unchanged, so the verdict can be reused."""
    if jax_compat.is_mesh_kernel(eqn):
        skipped = ("debug", "metadata")  # what names places, not what compiles
        parts = [f"{k}={v!r}" for k, v in sorted(eqn.params.items()) if k not in skipped and k != "jaxprs"]
        parts += [str(j) for j in eqn.params["jaxprs"]] + [str(v.aval) for v in eqn.invars]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()
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


def verdict_key(eqn, device, side: WorkerSide, compiler_options: dict | None = None) -> tuple:
    return fingerprint(eqn), device.device_kind, tuple(sorted((compiler_options or {}).items())), *side.verdict_key()


def compile_alone(
    eqn, device, side: WorkerSide, compiler_options: dict | None = None, on_phase=no_phase, key: tuple | None = None
) -> Verdict:
    """This one pallas_call's verdict on the device, by its family's compile: compiled, or
    reused (seconds 0) when this process compiled the same kernel with the same options."""
    key = key or verdict_key(eqn, device, side, compiler_options)
    if key in VERDICTS:
        return replace(VERDICTS[key], seconds=0.0)
    verdict = side.compile(eqn, device, compiler_options, on_phase)
    if len(VERDICTS) >= VERDICTS_KEPT:
        VERDICTS.pop(next(iter(VERDICTS)))
    VERDICTS[key] = verdict
    return verdict


def estimate_alone(eqn, device, side: WorkerSide, compiler_options: dict | None = None, on_phase=no_phase) -> Verdict:
    """The compiler's cycle estimate of this pallas_call (a worker started with
    --estimate), on cut grids where its own is long (cut_grids)."""
    if jax_compat.is_mesh_kernel(eqn):
        return Verdict(True, None, no_estimate="a kernel over a mesh (pl.kernel, plgpu.kernel) is not estimated")
    grid = tuple(eqn.params["grid_mapping"].grid)
    if not all(isinstance(extent, int) for extent in grid):
        return Verdict(True, None, no_estimate="a grid whose size is known only at run time is not estimated")
    if math.prod(grid) == 0:
        return Verdict(True, None, no_estimate="its grid has no step (a block larger than its array): it does no work")
    points, seconds = [], 0.0
    for cut in cut_grids(grid):
        params = {**eqn.params, "grid_mapping": replace(eqn.params["grid_mapping"], grid=cut)}
        verdict = side.compile(eqn, device, compiler_options, on_phase, params)
        seconds += verdict.seconds
        if not verdict.fits or verdict.estimated_cycles is None:
            return replace(verdict, seconds=seconds)
        points.append((math.prod(cut), verdict.estimated_cycles))
    estimate = Verdict(True, None, None, seconds, extrapolate(points, math.prod(grid)))
    known = KNOWN.get(id(eqn))  # the family counts the loops its estimate leaves out, where there are any
    prefetch = known[: eqn.params["grid_mapping"].num_index_operands] if known is not None else None
    return side.count_loops(
        eqn, estimate, prefetch, lambda params: side.compile(eqn, device, compiler_options, on_phase, params)
    )


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
    With `spills`, each kernel that compiles carries its compiler's words on its register spills
    where its family reads them (a GPU's: ptxas's report). The target's family compiles
    (Family.worker(): its devices, options and compile) and reads what its model needs."""
    family = family_of(target)
    side = family.worker()
    device = target_device(target) if compile else trace_device(target)
    side.prepare(target, spills)
    limit, limit_source = scoped_limit or (None, None)
    compiler_options = side.compiler_options(limit) if limit else None
    if compiler_options is None:  # a limit its compiler takes no option for (a GPU has no scoped VMEM)
        limit, limit_source = None, None
    PROVENANCE.clear()
    BOUND.clear()
    on_phase("trace", None)
    calls = []
    with recording(origins):
        traced = trace_example(call_text, namespace, device, direct=not origins, values=estimate)
    for eqn in traced:
        try:
            invoke_origin, provenance = provenance_of(invoked_at(eqn), eqn)
            interpret = bool(eqn.params.get("interpret"))  # a CPU run: its TPU compile would say nothing
            platform = params_platform(eqn.params.get("compiler_params"))
            other = platform if platform not in (None, family.platform) else None
            compiled = compile and not interpret and other is None
            reused = False
            if compiled and estimate:  # its fit is known: what is asked is the compiler's estimate of its speed
                verdict = estimate_alone(eqn, device, side, compiler_options, on_phase)
            elif compiled:
                key = verdict_key(eqn, device, side, compiler_options)  # the fingerprint, once
                reused = key in VERDICTS
                verdict = compile_alone(eqn, device, side, compiler_options, on_phase, key)
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
                    loops_counted=verdict.loops_counted,
                    loops_uncounted=verdict.loops_uncounted,
                    ptxas=verdict.ptxas,
                    no_ptxas=verdict.no_ptxas,
                    compile_seconds=round(seconds, 3),
                    compiled=compiled,
                    reused=reused,
                    scoped_limit=own_limit or limit,
                    error_origin=None
                    if fits
                    else verdict.origin or extra(body_origin, None, text, jax_compat.kernel_body(eqn)),
                    in_program=program_made(eqn, described["operands"]),
                    interpret=interpret,
                    other_platform=other,
                    **side.call_facts(eqn),
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
