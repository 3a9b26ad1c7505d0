"""The fixes a GPU kernel's failure gets: over its shared memory, the block shrinks every
family shares (fixes/search.py), sized by the shared-memory model, and a verified one
labelled with the compiler's own request for it; an op the architecture lacks, none (no
edit is sure)."""

from __future__ import annotations

from ..fixes.edits import Fix
from ..fixes.search import Problem, Variant, compile_variant, key, shrink_fixes
from ..results import CapturedCall
from .layout import estimated_shared_memory
from .report import parse_gpu_report
from .targets import gpu, probe_of


def shrinks(problem: Problem, targets: list[str]) -> bool:
    """Block shrinks may help on these GPUs: every failure there is one of shared memory."""
    reports = [parse_gpu_report(c.compiler_text or "") for t in targets for c in problem.failing(t)]
    return bool(reports) and all(r.form == "shared_memory" for r in reports)


def fixes(problem: Problem) -> list[Fix]:
    """A GPU kernel over its shared memory gets block shrinks, verified by the
    GPU compiler; other GPU errors (an op the architecture lacks) get none."""
    return shrink_fixes(problem) if shrinks(problem, list(problem.targets)) else []


def figures(problem: Problem, calls: list[CapturedCall], target: str, scale: float = 1.0) -> tuple[int, int]:
    """(largest shared memory, the GPU's limit) over the variant's kernels that failed
    before: the model's staged bytes (layout.py), or those scaled by what the compiler
    asked for the failing kernel over what the model said of it, whichever is less. The
    model was never over the compiler on the kernels it was measured on, and a scale read
    off one kernel may not hold for its smaller blocks: the lesser figure lets the search
    try the largest block that may fit, and the compiler decides (verify)."""
    limit = gpu(target).shared_memory_limit
    base = {key(c): c for c in problem.failing(target)}
    worst = 0
    for call in calls:
        before = base.get(key(call))
        if before is None:
            continue
        report = parse_gpu_report(before.compiler_text or "")
        modelled = estimated_shared_memory(before, report.backend, target)
        if report.form != "shared_memory" or not report.requested or not modelled:
            continue
        now = estimated_shared_memory(call, report.backend, target)
        worst = max(worst, min(now, now * report.requested // modelled))
    return worst, limit


def compiled_figures(problem: Problem, variant: Variant) -> dict[str, tuple[int, int]] | None:
    """(the compiler's request, the limit) per target for a verified variant: compiled once
    more for each target's probe (targets.Gpu.probe), which refuses with the request. None
    when the compile budget is spent or a request is not said."""
    found = {}
    for target in problem.targets:
        result = compile_variant(problem, variant, probe_of(target))
        if result is None:
            return None
        said = [parse_gpu_report(c.compiler_text or "") for c in result.calls]
        asked = [r.requested for r in said if r.form == "shared_memory" and r.requested is not None]
        if result.error or not asked:
            return None
        found[target] = (max(asked), gpu(target).shared_memory_limit)
    return found
