"""Map a GPU compile back to source (issue 33): the shared-memory overflow
on the BlockSpecs whose blocks are staged in shared memory, with the
compiler's requested and available bytes; an op the GPU's architecture lacks
on the line that wrote it; Blackwell's tensor memory and compute-capability
errors on the pallas_call. Diagnostics leave as data, with subjects and
wordings, so GPUs merge by subject as TPU chips do (diagnostics.merge_targets).
"""

from __future__ import annotations

from .. import render
from ..correlate import (
    Anchor,
    Sources,
    call_anchor,
    call_anchor_at,
    kernel_label,
    kernel_site,
    line_span,
    site_at_line,
    spec_anchor,
)
from ..diagnostics import Diagnostic, Related, Subject
from ..render import Wording
from ..results import CapturedCall, ExampleResult
from ..source.directives import Example
from . import not_compiled
from .budget import allocation_culprits, block_label, culprits
from .layout import allocation_label, block_bytes, estimated_shared_memory, peak_allocations, scoped_bytes
from .report import GpuReport, parse_gpu_report
from .spills import spill_diagnostics
from .targets import Gpu, gpu


def diagnostics(example: Example, result: ExampleResult, sites: Sources) -> list[Diagnostic]:
    """All diagnostics one example's result on one GPU target gives."""
    target = gpu(result.target)
    found: list[Diagnostic] = []
    failing = []
    estimated_over = []  # (anchor, the model's figures) of kernels traced, not compiled, over the limit
    for number, call in enumerate(result.calls):
        site = kernel_site(call, sites.sites_of)
        anchor = call_anchor(call, site, Anchor(example.path, example.span))
        if call.other_platform:  # said by the core, as for every family (unchecked.other_platform)
            continue
        if call.interpret:  # run on the CPU: nothing was compiled for the GPU
            found.append(not_compiled.interpreted(call, target, anchor, example, number))
            continue
        if not call.compiled:  # --no-compile: the shared-memory model's verdict, never "compiles"
            said, judged = not_compiled.judged(call, target, site, sites, anchor, example, number)
            found.extend(said)
            if judged.over:
                estimated_over.append((anchor, judged, kernel_label(call)))
            continue
        if call.fits:
            found.append(fitting(call, target, anchor, example, number))
            continue
        report = parse_gpu_report(call.compiler_text or "")
        failing.append((anchor, report, kernel_label(call)))
        if report.form == "shared_memory":
            found.extend(shared_memory(call, report, target, site, sites, anchor, example, number))
        else:
            found.append(rejected(call, report, target, sites, anchor, example, number))
    if failing:
        found.append(example_verdict(example, failing, target))
    if estimated_over:
        found.append(not_compiled.example_verdict(example, estimated_over, target))
    found.extend(spill_diagnostics(example, result, sites))  # VMEM054, when check --spills asked ptxas
    return found


def facts_of(report: GpuReport, target: Gpu, example: Example, call: CapturedCall) -> dict:
    return {
        "target": target.name,
        "gpu": target.label,
        "architecture": target.sm,
        "form": report.form,
        "backend": report.backend,
        "requested": report.requested,
        "available": report.available,
        "kernel": kernel_label(call),
        "example": str(example.key),
        "text": report.text,
    }


def shared_memory(call, report: GpuReport, target: Gpu, site, sites: Sources, anchor: Anchor, example, number):
    """VMEM051 on the pallas_call with the compiler's figures; VMEM050 on each
    BlockSpec whose block is staged in shared memory, with the bytes the backend stages of it
    (the model's: Triton stages tiles of a block read in a loop, num_stages deep, not the block)."""
    assert report.requested is not None and report.available is not None
    backend = "Mosaic GPU" if report.backend == "mosaic_gpu" else "Triton"
    over = report.requested - report.available
    clause = (
        f"{render.size(report.available)} available on {target.label} "
        f"(over by {render.size(over)}{render.small_overshoot(over, report.available)})"
    )
    facts = facts_of(report, target, example, call)
    kernel = Related(anchor.path, anchor.span, f"pallas_call {kernel_label(call)}")
    whole = Wording(
        f"{backend} kernel {kernel_label(call)} needs {render.size(report.requested)} of shared memory", ", ", clause
    )
    found = [
        Diagnostic(
            anchor.path,
            anchor.span,
            "error",
            "VMEM051",
            whole.text(),
            target.name,
            "compiler",
            (Related(example.path, example.span, f"example {example.text}"),),
            facts,
            Subject(example.key, number, "shared memory"),
            whole,
        )
    ]
    for entry in allocation_culprits(call, report.requested, report.available):
        where = call_anchor_at(entry.origin, sites.text) if entry.origin is not None else anchor
        head = (
            f"{allocation_label(entry)} = {render.size(scoped_bytes(entry))}; kernel {kernel_label(call)} needs "
            f"{render.size(report.requested)}"
        )
        wording = Wording(head, " of shared memory, ", clause)
        found.append(
            Diagnostic(
                where.path,
                where.span,
                "error",
                "VMEM050",
                wording.text(),
                target.name,
                "compiler",
                (kernel,),
                {**facts, "role": "scoped", "index": entry.index, "block_bytes": scoped_bytes(entry)},
                Subject(example.key, number, f"scoped {entry.index}"),
                wording,
            )
        )
    model = estimated_shared_memory(call, report.backend, target.name)
    scale = report.requested / model if model else 1.0
    for op, size, how in culprits(call, report.backend, report.available, scale, target.name):
        where = spec_anchor(op, site, sites.sites_of, anchor)
        head = (
            f"{block_label(op, how)} = {render.size(size)}, staged in shared "
            f"memory; kernel needs {render.size(report.requested)}"
        )
        wording = Wording(head, " of shared memory, ", clause)
        found.append(
            Diagnostic(
                where.path,
                where.span,
                "error",
                "VMEM050",
                wording.text(),
                target.name,
                "compiler",
                (kernel,),
                {**facts, "role": op.role, "index": op.index, "block_bytes": block_bytes(op), "staged_bytes": size},
                Subject(example.key, number, f"{op.role} {op.index}"),
                wording,
            )
        )
    return found


def rejected(call, report: GpuReport, target: Gpu, sites: Sources, anchor: Anchor, example, number) -> Diagnostic:
    """VMEM052: an op or dtype the architecture lacks, on the line the compiler
    names when it is the user's, else the pallas_call; VMEM053: tensor memory;
    VMEM011: any other compile error, whole."""
    from ..compile.provenance import is_user_file

    where = anchor
    origin = call.error_origin
    if report.form == "unsupported_op" and origin is not None and is_user_file(origin.file):
        where = Anchor(origin.file, line_span(origin.line))  # the body line that makes the op (worker)
    elif report.form == "unsupported_op" and report.place and is_user_file(report.place[0]):
        where = Anchor(report.place[0], line_span(report.place[1]))
    elif call.error_origin is not None:
        where = Anchor(call.error_origin.file, line_span(call.error_origin.line))
    if report.form == "unsupported_op":
        code, head = "VMEM052", f"'{report.op}' is not supported on {report.architecture}"
    elif report.form == "compute_capability" and report.needs_capability is not None:
        major, minor = report.needs_capability
        code, head = "VMEM052", f"{report.what or 'this kernel'} needs compute capability {major}.{minor} or newer"
    elif report.form == "tensor_memory":
        code = "VMEM053"
        head = (
            f"kernel {kernel_label(call)} needs {report.requested} columns of tensor memory, {report.available} exist"
        )
    else:
        code, head = "VMEM011", render.rejected_whole(report.text.strip())
    wording = render.fails_on(head, target.label)
    return Diagnostic(
        where.path,
        where.span,
        "error",
        code,
        wording.text(),
        target.name,
        "compiler",
        (
            Related(anchor.path, anchor.span, f"pallas_call {kernel_label(call)}"),
            Related(where.path, where.span, report.text.strip()),
        ),
        facts_of(report, target, example, call),
        Subject(example.key, number, "rejected"),
        wording,
    )


def ended_at(example: Example, result: ExampleResult, sites: Sources) -> Anchor:
    """Where a compile that ended the process is said: the kernel-body line the
    worker named (its first fp8 dot), the pallas_call it invoked, else the example."""
    from ..compile.provenance import is_user_file

    origin = result.error_origin
    if origin is None or not is_user_file(origin.file):
        return Anchor(example.path, example.span)
    if (site := site_at_line(origin, sites.sites_of)) is not None:  # the line that invoked the kernel
        return Anchor(site.path, site.name_span)
    return Anchor(origin.file, line_span(origin.line))


def ended(example: Example, result: ExampleResult, sites: Sources) -> Diagnostic | None:
    """VMEM052 when the GPU compiler ended the worker over what the architecture lacks
    (an LLVM fatal error, its words in the crash message: an fp8 dot below sm_89; an
    intrinsic it cannot select, jax 0.12's tcgen05 on the H100), on the body line that
    asked for it; None for any other failure, said as VMEM010."""
    if result.error_kind != "crashed":
        return None
    report = parse_gpu_report(result.error or "")
    target = gpu(result.target)
    if report.form == "compute_capability" and report.needs_capability is not None:
        major, minor = report.needs_capability
        head = f"{report.what or 'a kernel'} needs compute capability {major}.{minor} or newer"
    elif report.form == "unsupported_op":  # LLVM could not select it (jax 0.12's Mosaic GPU)
        head = f"'{report.op}' is not supported on {report.architecture or target.sm}"
    else:
        return None
    wording = render.fails_on(f"{head} (the compiler ended its process)", target.label)
    where = ended_at(example, result, sites)
    return Diagnostic(
        where.path,
        where.span,
        "error",
        "VMEM052",
        wording.text(),
        target.name,
        "compiler",
        (Related(example.path, example.span, f"example {example.text}"),),
        {
            "target": target.name,
            "gpu": target.label,
            "form": report.form,
            "text": result.error,
            "example": str(example.key),
        },
        Subject(example.key, None, "rejected"),
        wording,
    )


def example_verdict(example: Example, failing: list, target: Gpu) -> Diagnostic:
    """VMEM004 on the example: which of its kernels the GPU refuses, and where."""
    anchor, report, kernel = failing[0]  # named as a TPU chip's VMEM004 names it: the kernel function
    where = render.at_from(anchor.path, anchor.span.start_line, example.path)
    if report.form == "shared_memory" and report.requested is not None and report.available is not None:
        head = f"{kernel} ({where}) does not fit: needs {render.size(report.requested)} of shared memory"
        wording = Wording(head, ", ", f"{render.size(report.available)} available on {target.label}")
    else:
        wording = render.fails_on(f"{kernel} ({where}) does not compile", target.label)
    return Diagnostic(
        example.path,
        example.span,
        "error",
        "VMEM004",
        wording.text(),
        target.name,
        "compiler",
        tuple(Related(a.path, a.span, name) for a, _, name in failing),
        {"target": target.name, "gpu": target.label, "example": str(example.key)},
        Subject(example.key, None, "example"),
        wording,
    )


def fitting(call: CapturedCall, target: Gpu, anchor: Anchor, example: Example, number: int) -> Diagnostic:
    """VMEM007: the kernel compiled for the GPU, with what was checked (only a compiled one:
    a kernel traced alone is the model's to judge, not_compiled.py)."""
    blocks = ", ".join(
        f"{'input' if op.role == 'in' else 'output'} {op.index} {op.dtype}[{','.join(map(str, op.block_shape or ()))}]"
        for op in call.operands
        if op.block_shape is not None
    )
    if not blocks:  # a plgpu.kernel: what its body allocates in shared memory
        blocks = ", ".join(
            f"{e.dtype}[{','.join(map(str, e.shape))}]" for e in peak_allocations(call) if e.dtype != "barrier"
        )
        blocks = f"shared memory {blocks}" if blocks else "no shared memory"
    else:
        blocks = f"blocks {blocks}"
    grid = "x".join(map(str, call.grid)) or "1"
    wording = Wording(f"{kernel_label(call)} compiles: grid {grid}, {blocks}", "; on ", target.label, ", ")
    return Diagnostic(
        anchor.path,
        anchor.span,
        "information",
        "VMEM007",
        wording.text(),
        target.name,
        "compiler",
        (Related(example.path, example.span, f"example {example.text}"),),
        {
            "target": target.name,
            "gpu": target.label,
            "fits": True,
            "kernel": kernel_label(call),
            "example": str(example.key),
        },
        Subject(example.key, number, "fits"),
        wording,
    )
