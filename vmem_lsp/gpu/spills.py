"""VMEM054: a GPU kernel that spills registers to local memory, as ptxas reports it
(`check --spills`; the worker runs ptxas, gpu/ptxas.py). A warning on the
pallas_call, never an error: the kernel compiles and runs, each spill a trip to memory
the registers would have spared. ptxas's own lines stay in the facts and the related
information. Kernels that spill nothing, and results without a report, say nothing.
"""

from __future__ import annotations

from ..correlate import Anchor, Sources, call_anchor, kernel_label, kernel_site
from ..diagnostics import Diagnostic, Related, Subject
from ..render import Wording
from ..results import CapturedCall, ExampleResult
from ..source.directives import Example
from .ptxas import FunctionUsage, kernel_functions, parse_ptxas
from .targets import Gpu, gpu


def spill_diagnostics(example: Example, result: ExampleResult, sites: Sources) -> list[Diagnostic]:
    """VMEM054 for each kernel of one example's result on one GPU target that spills."""
    found = []
    for number, call in enumerate(result.calls):
        if not call.ptxas:
            continue
        spilling = [f for f in kernel_functions(parse_ptxas(call.ptxas), call.name) if f.spills]
        if spilling:
            anchor = call_anchor(call, kernel_site(call, sites.sites_of), Anchor(example.path, example.span))
            found.append(spills(call, spilling, gpu(result.target), anchor, example, number))
    return found


def spills(
    call: CapturedCall, spilling: list[FunctionUsage], target: Gpu, anchor: Anchor, example: Example, number: int
) -> Diagnostic:
    """VMEM054 of one kernel, its functions that spill summed: "matmul_kernel spills 28 bytes to
    local memory (stores), 28 (loads) on NVIDIA A100-SXM4-80GB (sm_80); registers: 255 per thread"."""
    kernel = kernel_label(call)
    stores, loads = sum(f.spill_stores for f in spilling), sum(f.spill_loads for f in spilling)
    registers = max((f.registers for f in spilling if f.registers is not None), default=None)
    clause = f"{stores} bytes to local memory (stores), {loads} (loads) on {target.label} ({target.sm})"
    if registers is not None:
        clause += f"; registers: {registers} per thread"
    wording = Wording(f"{kernel} spills", " ", clause)
    said = "\n".join(f.text for f in spilling)
    return Diagnostic(
        anchor.path,
        anchor.span,
        "warning",
        "VMEM054",
        wording.text(),
        target.name,
        "compiler",
        (Related(example.path, example.span, f"example {example.text}"), Related(anchor.path, anchor.span, said)),
        {
            "target": target.name,
            "gpu": target.label,
            "architecture": target.sm,
            "kernel": kernel,
            "example": str(example.key),
            "functions": [f.name for f in spilling],
            "spill_stores": stores,
            "spill_loads": loads,
            "stack_frame": sum(f.stack_frame for f in spilling),
            "registers": registers,
            "text": call.ptxas,
        },
        Subject(example.key, number, "spills"),
        wording,
    )
