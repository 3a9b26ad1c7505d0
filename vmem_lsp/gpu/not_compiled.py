"""A GPU kernel its compiler did not see, said as such (issue 41: never a fit that was not checked).

- Traced for the model alone (`check --no-compile`): the shared-memory model (layout.py) is the
  verdict, every figure marked as its estimate ("~", "layout model estimate, not compiled",
  origin "model"). Over the target's limit: VMEM051 on the pallas_call, VMEM050 on the staged
  blocks that make it, VMEM004 on the example, as a compile would say them. Under it, but the
  model cannot size part of the body (an op it has no rule for, a body it did not read) or the
  compiler's request may be above the limit within the model's measured error: VMEM006, a
  warning that the figure is a lower bound, never a plain fit. Under it with room to spare:
  VMEM007 whose origin is the model ("fits by the layout model"), never "compiles".
- Traced with interpret=True: it runs on the CPU, so nothing was compiled for the GPU (VMEM014).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import render
from ..correlate import Anchor, Sources, call_anchor_at, kernel_label, spec_anchor
from ..diagnostics import Diagnostic, Related, Subject
from ..render import Wording
from ..results import CapturedCall
from ..source.directives import Example
from .budget import allocation_culprits, block_label, culprits
from .layout import (
    BACKEND_NAMES,
    allocation_label,
    block_bytes,
    estimated_shared_memory,
    most_requested,
    scoped_bytes,
    staged,
    unsized,
)
from .targets import Gpu


@dataclass(frozen=True)
class Judged:
    """The model's figures of one kernel on one GPU, and why its fit is not sure (None: it is)."""

    backend: str
    total: int
    limit: int
    doubt: str | None
    lower_bound: bool  # the doubt is what the model cannot size (not its measured error)
    most: int  # the largest request the model's measured error allows

    @property
    def over(self) -> bool:
        return self.total > self.limit


def judge(call: CapturedCall, target: Gpu) -> Judged:
    """What the model alone says of `call` on `target`."""
    backend = call.backend or "triton"
    total = estimated_shared_memory(call, backend, target.name)
    limit = target.shared_memory_limit
    most = most_requested(call, backend, total)
    why = unsized(call, backend)
    if why is not None:
        return Judged(backend, total, limit, why, True, most)
    if most > limit:
        under = 1 - total / most if most else 0.0
        doubt = (
            f"{BACKEND_NAMES.get(backend, backend)} may request up to ~{render.size(most)} of shared memory "
            f"(the layout model is measured up to {under:.0%} under its requests at this size)"
        )
        return Judged(backend, total, limit, doubt, False, most)
    return Judged(backend, total, limit, None, False, most)


def doubt(call: CapturedCall, target: Gpu) -> str | None:
    """Why the model cannot call `call` a fit on `target`, None when it can (Family.model_doubt)."""
    judged = judge(call, target)
    return None if judged.over else judged.doubt


def shape_text(op) -> str:
    return ",".join(str(d) for d in op.block_shape or ())


def under_clause(j: Judged, target: Gpu) -> str:
    """The budget sentence of a kernel the model puts under the limit, marked as its estimate."""
    need = render.needs(j.total, j.limit, target.label, scoped=False, space="shared memory", approx=True)
    return f"{need} ({render.NOT_COMPILED})"


def facts(j: Judged, target: Gpu, call: CapturedCall, example: Example) -> dict:
    return {
        "target": target.name,
        "gpu": target.label,
        "chip": target.label,
        "architecture": target.sm,
        "form": "model",
        "backend": j.backend,
        "estimated": True,
        "compiled": False,
        "kernel": kernel_label(call),
        "example": str(example.key),
    }


def judged(
    call: CapturedCall,
    target: Gpu,
    site,
    sites: Sources,
    anchor: Anchor,
    example: Example,
    number: int,
) -> tuple[list[Diagnostic], Judged]:
    """The model's diagnostics of one kernel traced, not compiled, on one GPU."""
    j = judge(call, target)
    if j.over:
        return overflow(call, j, target, site, sites, anchor, example, number), j
    if j.doubt is not None:
        return [unsure(call, j, target, anchor, example, number)], j
    return [fits(call, j, target, anchor, example, number)], j


def overflow(call, j: Judged, target: Gpu, site, sites: Sources, anchor: Anchor, example, number) -> list[Diagnostic]:
    """VMEM051 on the pallas_call, VMEM050 on each staged block that makes it: the model's figures."""
    clause = (
        f"{render.size(j.limit)} available on {target.label} "
        f"(over by ~{render.size(j.total - j.limit)}; {render.NOT_COMPILED})"
    )
    # The compiler's keys (gpu/diagnostics.facts_of), the model's figures: merged over GPUs as a
    # compile's are, each GPU's sentence whole.
    base = {**facts(j, target, call, example), "fits": False, "requested": j.total, "available": j.limit}
    if j.doubt is not None:
        base["lower_bound"] = j.doubt
    kernel = Related(anchor.path, anchor.span, f"pallas_call {kernel_label(call)}")
    name = BACKEND_NAMES.get(j.backend, j.backend)
    whole = Wording(f"{name} kernel {kernel_label(call)} needs ~{render.size(j.total)} of shared memory", ", ", clause)
    found = [
        Diagnostic(
            anchor.path,
            anchor.span,
            "error",
            "VMEM051",
            whole.text(),
            target.name,
            "model",
            (Related(example.path, example.span, f"example {example.text}"),),
            base,
            Subject(example.key, number, "shared memory"),
            whole,
        )
    ]
    for op, size, how in culprits(call, j.backend, j.limit, 1.0, target.name):
        where = spec_anchor(op, site, sites.sites_of, anchor)
        head = f"{block_label(op, how)} = {render.size(size)}, staged in shared memory; kernel needs ~{render.size(j.total)}"
        wording = Wording(head, " of shared memory, ", clause)
        found.append(
            Diagnostic(
                where.path,
                where.span,
                "error",
                "VMEM050",
                wording.text(),
                target.name,
                "model",
                (kernel,),
                {**base, "role": op.role, "index": op.index, "block_bytes": block_bytes(op), "staged_bytes": size},
                Subject(example.key, number, f"{op.role} {op.index}"),
                wording,
            )
        )
    for entry in allocation_culprits(call, j.total, j.limit):  # a plgpu.kernel's: what its body allocates
        where = call_anchor_at(entry.origin, sites.text) if entry.origin is not None else anchor
        head = (
            f"{allocation_label(entry)} = {render.size(scoped_bytes(entry))}; kernel {kernel_label(call)} "
            f"needs ~{render.size(j.total)}"
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
                "model",
                (kernel,),
                {**base, "role": "scoped", "index": entry.index, "block_bytes": scoped_bytes(entry)},
                Subject(example.key, number, f"scoped {entry.index}"),
                wording,
            )
        )
    return found


def unsure(call, j: Judged, target: Gpu, anchor: Anchor, example, number) -> Diagnostic:
    """VMEM006: under the limit by the model, but not surely: its figure is a lower bound."""
    assert j.doubt is not None
    head = f"kernel {kernel_label(call)} is not sized: {j.doubt}, so its figure is only a lower bound"
    if not j.lower_bound:
        head = f"kernel {kernel_label(call)} may not fit: {j.doubt}"
    wording = Wording(head, "; ", under_clause(j, target))
    return Diagnostic(
        anchor.path,
        anchor.span,
        "warning",
        "VMEM006",
        wording.text(),
        target.name,
        "model",
        (Related(example.path, example.span, f"example {example.text}"),),
        {
            **facts(j, target, call, example),
            "fits": None,
            "used": j.total,
            "limit": j.limit,
            "most": j.most,
            "why": j.doubt,
            "lower_bound": j.lower_bound,
        },
        Subject(example.key, number, "unseen"),
        wording,
    )


def fits(call, j: Judged, target: Gpu, anchor: Anchor, example, number) -> Diagnostic:
    """VMEM007 by the model: what was traced (grid, staged blocks) and the model's figure."""
    blocks: list[tuple[str, str, int | None]] = [
        ("block", f"{'input' if op.role == 'in' else 'output'} {op.index} {op.dtype}[{shape_text(op)}]", None)
        for op in staged(call, j.backend)
    ]
    clause = (
        f"~{render.size(j.total)} of {render.size(j.limit)} shared memory on {target.label} ({render.NOT_COMPILED})"
    )
    wording = render.fits(kernel_label(call), call.grid, blocks, clause, by=" by the layout model")
    return Diagnostic(
        anchor.path,
        anchor.span,
        "information",
        "VMEM007",
        wording.text(),
        target.name,
        "model",
        (Related(example.path, example.span, f"example {example.text}"),),
        {**facts(j, target, call, example), "fits": True, "used": j.total, "limit": j.limit},
        Subject(example.key, number, "fits"),
        wording,
    )


def example_verdict(example: Example, over: list[tuple[Anchor, Judged, str]], target: Gpu) -> Diagnostic:
    """VMEM004 on the example: which of its kernels the model puts over the GPU's shared memory."""
    anchor, j, kernel = over[0]
    where = render.at_from(anchor.path, anchor.span.start_line, example.path)
    wording = Wording(
        f"{kernel} ({where}) does not fit: needs ~{render.size(j.total)} of shared memory",
        ", ",
        f"{render.size(j.limit)} available on {target.label} ({render.NOT_COMPILED})",
    )
    return Diagnostic(
        example.path,
        example.span,
        "error",
        "VMEM004",
        wording.text(),
        target.name,
        "model",
        tuple(Related(a.path, a.span, name) for a, _, name in over),
        {"target": target.name, "gpu": target.label, "example": str(example.key), "estimated": True},
        Subject(example.key, None, "example"),
        wording,
    )


def interpreted(call: CapturedCall, target: Gpu, anchor: Anchor, example: Example, number: int) -> Diagnostic:
    """VMEM014: the example ran the kernel in interpret mode, which only the CPU runs."""
    message = render.interpret_mode(kernel_label(call), "GPU")
    return Diagnostic(
        anchor.path,
        anchor.span,
        "warning",
        "VMEM014",
        message,
        target.name,
        "compiler",
        (Related(example.path, example.span, f"example {example.text}"),),
        {"target": target.name, "kernel": kernel_label(call), "example": str(example.key)},
        Subject(example.key, number, "interpret"),
        Wording(message, "", "", ""),
    )
