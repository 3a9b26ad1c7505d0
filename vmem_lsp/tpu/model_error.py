"""How far the layout model's total may be from the compiler's, by chip and
kind of kernel: what lets a sweep take the model's word for a config far
from the limit and compile the rest.

The bounds are measured, not chosen: bench/model_error_table.py reads the
agreement records of bench/model_results-<libtpu>.jsonl (691 kernels in 15
families, compiled on every chip; bench/model_results.jsonl for 0.0.42.1) and
writes model_error.json beside this file, keyed by the libtpu that compiled
them: a compiler is judged by its own version's bounds, the nearest older. A
kernel's kind is read from what the trace shows, since a user's kernel has no
family name: one whose body allocates (emit_pipeline, run_scoped) is
"pipeline"; one whose body keeps values live across a reduction, a dot or a
roll that no measured pattern sizes (layout.live_bytes: its spills are only
bounded, within a wide band) is "temporaries"; one whose body computes what
the model only estimates (a big dot result, spills, attention scores) or reads
scalar-prefetched indices is "compute"; the rest, windows and scratch alone,
"plain". A kind with no bounds for a chip or libtpu is never decided by the model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..results import CapturedCall
from ..versions import facts_for
from . import layout

TABLE = Path(__file__).with_name("model_error.json")
PAD = 0.02  # of the limit, beyond the worst error measured: the corpus is finite


def kind_of(call: CapturedCall, target: str | None = None) -> str:
    if call.scoped:
        return "pipeline"
    if layout.live_bytes(call) and not layout.attention_scores_bytes(call):
        return "temporaries"
    if call.unseen or call.num_scalar_prefetch or layout.internal_estimate(call, target):
        return "compute"
    return "plain"


@dataclass(frozen=True)
class ErrorBound:
    """(model - compiler) / limit over the records: `low` <= 0 is the worst
    under-estimate, `high` >= 0 the worst over-estimate."""

    low: float
    high: float
    records: int


@cache
def table(libtpu: str | None = None) -> dict:
    """{kind: {chip: ErrorBound}} from model_error.json, whose bounds are keyed by the libtpu
    that compiled their records: those of `libtpu` (versions.facts_for: the nearest older)."""
    raw = facts_for(json.loads(TABLE.read_text()), libtpu)
    return {kind: {chip: ErrorBound(**bound) for chip, bound in chips.items()} for kind, chips in raw["bounds"].items()}


def bound(kind: str, target: str, libtpu: str | None = None) -> ErrorBound | None:
    return table(libtpu).get(kind, {}).get(target)


def model_decides(
    total: int, exact: int, limit: int, bound: ErrorBound | None, exact_error: float = 0.0
) -> bool | None:
    """True (fits) when the model's total is under the limit by more than any
    under-estimate measured for this kind of kernel and chip; False (over)
    when the windows, scratch and scoped buffers alone, which the model sizes
    exactly (bench/MODEL.md: 100% of allocations), exceed it by more than
    `exact_error` (of the limit: what the compiler was measured to allocate
    less than those, an emit_pipeline's buffers). The model's guess of
    compiler-internal bytes never decides "over": it over-estimated flash
    attention whose inner block_k is smaller than its k window by most of a
    chip's limit. None when only a compile can say."""
    if limit <= 0:
        return None
    if exact > limit * (1 + PAD + exact_error):
        return False
    if bound is not None and total <= limit * (1 + bound.low - PAD):
        return True
    return None
