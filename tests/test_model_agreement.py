"""The layout model against the real TPU compiler.

Fast tests check the model's rules on the compiler facts recorded in
bench/model_results.jsonl (made by bench/model_harness.py), by kernel family: the
families the model was written against (training), each of them again with the
fitted constants refitted without it (leave one family out), and the families added
afterwards (held out). One live test compiles a small deterministic
sample of bench/model_corpus.py on every chip and asserts the agreement targets on it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support import model_records

from vmem_lsp.results import Operand
from vmem_lsp.tpu import layout

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import families  # noqa: E402
import model_harness  # noqa: E402

RECORDED = BENCH / "model_results.jsonl"
LIVE_SAMPLE = 14


def operand(role: str = "in", *, constant: bool = False, buffers: int | None = None) -> Operand:
    return Operand(role, 0, 0, "f32", (64, 128), (8, 128), None, buffers, constant, None)


@pytest.mark.parametrize(
    "dtype, shape, expected",
    [
        ("f32", (8, 128), 4096),  # copy-r2-f32-b8x128-*: one T(8,128) tile
        ("bf16", (24, 200), 12288),  # rows pad to 8 for every dtype, not 16 for bf16
        ("s8", (24, 200), 6144),
        ("f32", (3, 100), 2048),  # small arrays: T(4,128)
        ("bf16", (3, 100), 1024),  # T(4,128)(2,1)
        ("s8", (3, 100), 512),  # T(4,128)(4,1)
        ("s4", (3, 100), 512),  # never less than one 32-bit sublane: s4 rows pad to 8
        ("bf16", (1, 128), 512),  # T(2,128)(2,1)
        ("f32", (4, 3, 100), 8192),  # each leading index its own tile
        ("bf16", (128,), 512),  # rank 1: whole 512-byte sublanes
        ("s4", (1024,), 512),
        ("f32", (65536,), 262144),
        ("pred", (8, 128), 4096),  # booleans are 32-bit words in VMEM
    ],
)
def test_padded_bytes(dtype, shape, expected):
    assert layout.padded_bytes(dtype, shape) == expected


@pytest.mark.parametrize(
    "op, grid, expected",
    [
        (operand(), (4,), 2),
        (operand(), (), 1),
        (operand(), (1, 1), 1),
        (operand(constant=True), (4,), 1),  # buffering-const-in-*
        (operand("out", constant=True), (4,), 1),  # const-out-v6e
        (operand(buffers=1), (4,), 1),  # pl.Buffered(1)
    ],
)
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
    return model_records.recorded()


def test_recorded_allocations_agree(recorded):
    """Every window and scratch buffer the compiler listed, as the model sizes it."""
    rows, _ = model_records.summary()
    for row in rows:
        assert row["alloc_exact"] >= model_harness.TARGETS_MET["allocations"], row


def test_recorded_totals_and_verdicts_agree(recorded):
    rows, _ = model_records.summary()
    for row in rows:
        assert row["verdict"] >= model_harness.TARGETS_MET["verdict"], row
        assert row["total_close"] >= model_harness.TARGETS_MET["total"], row


@pytest.fixture(scope="module")
def family_rows(recorded) -> list[dict]:
    return model_records.family_rows()


def test_recorded_families_cover_every_chip(recorded):
    """Every record has a family, and every family of the corpus was measured on every chip."""
    measured = {(r["target"], model_harness.family(r)) for r in recorded}
    for target in model_harness.CHIPS:
        for family in families.FAMILIES:
            assert (target, family) in measured, (target, family)


def test_held_out_cases_are_not_cited_by_the_model(recorded):
    """No case of a held-out family is what a rule or constant of layout.py was read off. (Its
    pipeline rule cites tests/data/reports/<libtpu>/pipeline-*-v6e: four kernels of the pipeline pattern,
    not of this corpus; bench/MODEL.md says so.)"""
    source = Path(layout.__file__).read_text()
    held = {r["case"] for r in recorded if families.role(model_harness.family(r)) == "held out"}
    assert held
    assert not [case for case in held if case in source]


def test_refit_reproduces_the_hand_fitted_constants(recorded):
    """Fitted by code on the training families, SPILL_SHARE and NO_SPILL_UP_TO come out where
    layout.py's hand fit put them: the leave-one-family-out refits are the same procedure."""
    # The hand fit predates the pipeline family, which later taught a structural rule, not a constant.
    pool = [
        r
        for r in recorded
        if families.role(model_harness.family(r)) != "held out" and model_harness.family(r) != "pipeline"
    ]
    share, quiet = model_harness.refit(pool)
    for target, hand in layout.SPILL_SHARE.items():
        assert abs(share[target] - hand) <= 0.12, (target, share[target], hand)
    for target in model_harness.CHIPS:
        assert max(quiet.get(target, 0), 65536) == max(layout.NO_SPILL_UP_TO.get(target, 0), 65536), target


# Held-out verdict agreement per chip as measured on 2026-11-30 (bench/MODEL.md): a floor, so that
# a change of the model or the harness that loses a held-out verdict turns this red.
HELD_OUT_MEASURED = {"v4": 98.9, "v5e": 99.1, "v5p": 99.1, "v6e": 100.0, "v7x": 100.0}


def test_held_out_verdicts_do_not_regress(family_rows):
    for s in model_harness.chip_summary(family_rows):
        assert s["held_out"]["cases"] >= 50, s  # four families since pipeline taught a rule
        assert s["held_out"]["verdict"] >= HELD_OUT_MEASURED[s["chip"]], s


def test_held_out_verdicts_meet_the_target(family_rows):
    """The target on the families the model never saw: the --no-compile verdict agrees
    with the compiler in >= 99% of records per chip."""
    for s in model_harness.chip_summary(family_rows):
        assert s["held_out"]["verdict"] >= model_harness.HELD_OUT_TARGET, s


def test_no_silent_fit_in_any_family(family_rows):
    """Wherever the model says "fits" and the compiler overflows, the model's total carries the
    lower-bound warning (layout.unseen_could_overflow), held-out families included."""
    silent = [r for r in family_rows if r["silent"]]
    assert not silent, silent


def test_leave_one_family_out_is_measured(family_rows):
    """Each training family has its leave-one-family-out figure; holding flash out removes the
    attention rule, whose fits the compiler overturns: those must at least be warned."""
    for r in family_rows:
        assert (r["lofo"] is None) == (r["role"] == "held out"), r
        if r["lofo"] is not None:
            assert r["lofo"]["cases"] == r["cases"], r
            assert not r["lofo"]["silent"], r
    flash = [r for r in family_rows if r["family"] == "flash"]
    assert any(r["lofo"]["verdict"] < r["verdict"] for r in flash)


@pytest.mark.compiler  # model_harness compiles in its own processes
def test_live_sample_agrees(tmp_path):
    """A small sample compiled now, on every chip, with the real compiler: the first case of each
    family (held-out families included), so 14 cases. The "large" family is left to the full run:
    its compiles take 20 to 60 s each."""
    pytest.importorskip("libtpu")
    ids = model_harness.select_cases(LIVE_SAMPLE, skip_families=("large",))
    assert {model_harness.family({"case": i}) for i in ids} >= set(families.HELD_OUT)
    records = model_harness.run(ids, list(model_harness.CHIPS), jobs=2, out=tmp_path / "live.jsonl")
    rows, disagreements = model_harness.summarize(records)
    assert all(row["cases"] > 0 for row in rows)
    assert model_harness.targets_met(rows), "\n".join([model_harness.table(rows), *disagreements])
    assert not model_harness.overturned(records), model_harness.overturned(records)
