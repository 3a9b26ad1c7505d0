"""bench/model_results.jsonl, the layout model's recorded corpus (made by
bench/model_harness.py), read once for the test modules that hold the model to
it (test_model_agreement, test_body_temporaries): loading it and the per-family
rows (verdicts with the shipped constants and every leave-one-family-out refit)
are most of what those modules cost, and both ask for the same. Shared, so the
tests must not change what they get."""

from __future__ import annotations

import functools
import sys

from support import ROOT

BENCH = ROOT / "bench"
RECORDED = BENCH / "model_results.jsonl"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import model_harness  # noqa: E402


@functools.cache
def recorded() -> list[dict]:
    """The records, [] when there are none (the caller skips)."""
    return model_harness.load(RECORDED) if RECORDED.exists() else []


@functools.cache
def family_rows() -> list[dict]:
    return model_harness.family_rows(recorded())


@functools.cache
def summary() -> tuple[list[dict], list[str]]:
    """model_harness.summarize of the records: (per-chip rows, disagreements)."""
    return model_harness.summarize(recorded())
