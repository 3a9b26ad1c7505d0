"""The layout model against the real TPU compiler.

Fast tests check the model's rules on the compiler facts recorded in
bench/model_results.jsonl (made by bench/model_harness.py); one live test compiles a
small deterministic sample of bench/model_corpus.py on every chip and asserts the
agreement targets on it.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from vmem_lsp import layout
from vmem_lsp.compile.protocol import Operand

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import model_harness  # noqa: E402

RECORDED = BENCH / "model_results.jsonl"
LIVE_SAMPLE = 14


def operand(role: str = "in", *, constant: bool = False, buffers: int | None = None) -> Operand:
    return Operand(role, 0, 0, "f32", (64, 128), (8, 128), None, buffers, constant, None)


@pytest.mark.parametrize("dtype, shape, expected", [
    ("f32", (8, 128), 4096),            # copy-r2-f32-b8x128-*: one T(8,128) tile
    ("bf16", (24, 200), 12288),         # rows pad to 8 for every dtype, not 16 for bf16
    ("s8", (24, 200), 6144),
    ("f32", (3, 100), 2048),            # small arrays: T(4,128)
    ("bf16", (3, 100), 1024),           # T(4,128)(2,1)
    ("s8", (3, 100), 512),              # T(4,128)(4,1)
    ("s4", (3, 100), 512),              # never less than one 32-bit sublane: s4 rows pad to 8
    ("bf16", (1, 128), 512),            # T(2,128)(2,1)
    ("f32", (4, 3, 100), 8192),         # each leading index its own tile
    ("bf16", (128,), 512),              # rank 1: whole 512-byte sublanes
    ("s4", (1024,), 512),
    ("f32", (65536,), 262144),
    ("pred", (8, 128), 4096),           # booleans are 32-bit words in VMEM
])
def test_padded_bytes(dtype, shape, expected):
    assert layout.padded_bytes(dtype, shape) == expected


@pytest.mark.parametrize("op, grid, expected", [
    (operand(), (4,), 2),
    (operand(), (), 1),
    (operand(), (1, 1), 1),
    (operand(constant=True), (4,), 1),              # buffering-const-in-*
    (operand("out", constant=True), (4,), 1),         # const-out-v6e
    (operand(buffers=1), (4,), 1),                  # pl.Buffered(1)
])
def test_buffer_count(op, grid, expected):
    assert layout.buffer_count(op, grid) == expected


def test_window_allocations_are_whole_kib():
    """f32[1,128] is u8[512] in VMEM but the compiler allocates 1.0K."""
    assert layout.window_bytes("f32", (1, 128), 1) == 1024
    assert layout.window_bytes("f32", (128,), 2) == 1024


@pytest.fixture(scope="module")
def recorded() -> list[dict]:
    if not RECORDED.exists():
        pytest.skip("no recorded results: run bench/model_harness.py")
    return model_harness.load(RECORDED)


def test_recorded_allocations_agree(recorded):
    """Every window and scratch buffer the compiler listed, as the model sizes it."""
    rows, _ = model_harness.summarize(recorded)
    for row in rows:
        assert row["alloc_exact"] >= model_harness.TARGETS_MET["allocations"], row


def test_recorded_totals_and_verdicts_agree(recorded):
    rows, _ = model_harness.summarize(recorded)
    for row in rows:
        assert row["verdict"] >= model_harness.TARGETS_MET["verdict"], row
        assert row["total_close"] >= model_harness.TARGETS_MET["total"], row


def test_live_sample_agrees(tmp_path):
    """A small sample compiled now, on every chip, with the real compiler. The "large" family
    is left to the full run: its compiles take 20 to 60 s each."""
    pytest.importorskip("libtpu")
    ids = model_harness.select_cases(LIVE_SAMPLE, skip_families=("large",))
    records = model_harness.run(ids, list(model_harness.CHIPS), jobs=2, out=tmp_path / "live.jsonl")
    rows, disagreements = model_harness.summarize(records)
    assert all(row["cases"] > 0 for row in rows)
    assert model_harness.targets_met(rows), "\n".join([model_harness.table(rows), *disagreements])
