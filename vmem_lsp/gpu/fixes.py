"""The fixes a GPU kernel's failure gets: over its shared memory, the block shrinks every
family shares (fixes/search.py), sized by the shared-memory model scaled to what the
compiler asked; an op the architecture lacks, none (no edit is sure)."""

from __future__ import annotations

from ..fixes.edits import Fix
from ..fixes.search import Problem, key, shrink_fixes
from ..results import CapturedCall
from .layout import estimated_shared_memory
from .report import parse_gpu_report
from .targets import gpu


def shrinks(problem: Problem, targets: list[str]) -> bool:
    """Block shrinks may help on these GPUs: every failure there is one of shared memory."""
    reports = [parse_gpu_report(c.compiler_text or "") for t in targets for c in problem.failing(t)]
    return bool(reports) and all(r.form == "shared_memory" for r in reports)


def fixes(problem: Problem) -> list[Fix]:
    """A GPU kernel over its shared memory gets block shrinks, verified by the
    GPU compiler; other GPU errors (an op the architecture lacks) get none."""
    return shrink_fixes(problem) if shrinks(problem, list(problem.targets)) else []


def figures(problem: Problem, calls: list[CapturedCall], target: str, scale: float = 1.0) -> tuple[int, int]:
    """(largest shared memory, the GPU's limit) over the variant's kernels that
    failed before: the model's staged bytes (layout.py), scaled by what the
    compiler asked for the failing kernel over what the model said of it."""
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
        worst = max(worst, estimated_shared_memory(call, report.backend, target) * report.requested // modelled)
    return worst, limit
