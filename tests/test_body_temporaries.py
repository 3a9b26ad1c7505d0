"""Never a silent fit (issue 31): what a kernel body computes beyond its windows.

A router's grouped top-k (tests/data/kernels/router_topk.py) fits v5e by its blocks
(11.00M of 16.00M) and overflows by its body's temporaries (the compiler: 20.39M).
The layout model counts the values live across a reduction, a dot or a roll
(capture.live_values) at the least share of them the compiler spilled, and says
its "fits" is a lower bound where the most share could overflow. Fast tests check
the rule and the recorded corpus (bench/model_results.jsonl, issue 31's families);
the CLI tests run `check --no-compile` and `check` on the router as a user would.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace

import jax
import jax.numpy as jnp
import pytest
from support import KERNELS, ROOT, line_of, model_records
from support.bodies import kernel_jaxpr, on_rows
from support.cli import run_json

from vmem_lsp.results import CapturedCall, Operand, Origin, Unseen
from vmem_lsp.tpu import layout
from vmem_lsp.tpu.model_error import kind_of

BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

import families  # noqa: E402
import model_harness  # noqa: E402

ROUTER = KERNELS / "router_topk.py"
MiB = 1 << 20


def router_module():
    spec = importlib.util.spec_from_file_location("router_topk", ROUTER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def live_of(jaxpr) -> Unseen | None:
    from vmem_lsp.tpu.body import live_values

    return live_values(jaxpr)


# ---- what the trace sees ---------------------------------------------------------------------


def test_the_router_keeps_its_tiles_live_across_its_reductions():
    router = router_module()
    jaxpr = kernel_jaxpr(
        router.route, ((4096, 2048), jnp.bfloat16), ((2048, 256), jnp.bfloat16), ((1, 256), jnp.float32)
    )
    live = live_of(jaxpr)
    assert live is not None and live.kind == "live"
    # f32/s32[1024,256] tiles (scores, choice, the expert iota, group_of, the group's masked
    # scores), [1024,128] lanes and group scores, and a [1024,1] maximum, at once
    assert live.bytes == 6.5 * MiB
    assert "the largest f32[1024,256]" in live.what
    assert live.origin is not None and live.origin.file == str(ROUTER)


def test_streams_and_loads_count_nothing():
    """An elementwise chain streams through the registers (chain-gelu4-*: no spill), and a loaded
    block is read again from its window (rmsnorm-f32-*: no spill): neither is live."""

    def chain(x_ref, o_ref):
        x = x_ref[...]
        o_ref[...] = jnp.tanh(x * x + jnp.exp(-x)) * x

    def rows_over_loaded(x_ref, o_ref):
        x = x_ref[...]
        o_ref[...] = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True))

    def rows_over_computed(x_ref, o_ref):
        x = jnp.exp(x_ref[...])
        o_ref[...] = x / jnp.sum(x, axis=-1, keepdims=True)

    shape = ((2048, 1024), jnp.float32)
    assert live_of(kernel_jaxpr(on_rows(chain), shape)) is None
    assert live_of(kernel_jaxpr(on_rows(rows_over_loaded), shape)) is None
    computed = live_of(kernel_jaxpr(on_rows(rows_over_computed), shape))
    assert computed is not None and computed.bytes == 2 * MiB  # exp(x), f32[512,1024], across the sum


# ---- the model's rule --------------------------------------------------------------------------


def captured(live_bytes: int, window_rows: int = 1024) -> CapturedCall:
    """A kernel with one double-buffered f32[window_rows, 1024] input and output and a body whose
    values live across a reduction weigh `live_bytes`."""
    ops = tuple(
        Operand(role, 0, 0, "f32", (4 * window_rows, 1024), (window_rows, 1024), None, None, False, None)
        for role in ("in", "out")
    )
    live = Unseen("2 temporaries live at once across a reduce_sum", live_bytes, Origin("k.py", 9), "live")
    return CapturedCall("k", None, None, (4,), 0, ops, (), None, True, None, 0.0, unseen=(live,))


def test_the_estimate_counts_the_least_share_and_warns_within_the_most():
    call = captured(4 * MiB, window_rows=512)  # windows 8.00M
    assert layout.internal_estimate(call, "v5e") == int(layout.LIVE_SPILL_LEAST * 4 * MiB)
    total = layout.total_estimate(call, "v5e")
    assert total == 8 * MiB + int(layout.LIVE_SPILL_LEAST * 4 * MiB)
    # Up to LIVE_SPILL_MOST of the live bytes could spill: 8.00M + 12.00M crosses 16.00M.
    warned = layout.unseen_could_overflow(call, total, 16 * MiB, "v5e")
    assert warned is not None and warned.kind == "live"
    # With the room for that, quiet.
    assert layout.unseen_could_overflow(call, total, 32 * MiB, "v5e") is None
    assert layout.unseen_could_overflow(replace(call, unseen=()), total, 16 * MiB, "v5e") is None


def test_the_sweep_never_takes_the_model_s_word_on_temporaries_without_their_own_bounds():
    assert kind_of(captured(4 * MiB), "v5e") == "temporaries"
    assert kind_of(replace(captured(4 * MiB), unseen=()), "v5e") == "plain"


# ---- the recorded corpus -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded() -> list[dict]:
    if not model_records.RECORDED.exists():
        pytest.skip("no recorded results: run bench/model_harness.py")
    return model_records.recorded()


@pytest.fixture(scope="module")
def body_rows(recorded) -> list[dict]:
    return [r for r in model_records.family_rows() if r["family"] in families.BODY_TEMPORARIES]


def test_every_body_temporaries_family_was_compiled_on_every_chip(recorded):
    measured = {(r["target"], model_harness.family(r)) for r in recorded}
    for target in model_harness.CHIPS:
        for family in families.BODY_TEMPORARIES:
            assert (target, family) in measured, (target, family)


def test_no_silent_fit_on_the_body_temporaries_families(body_rows):
    """Issue 31's target: wherever the compiler overflows a kernel of these families that the
    model calls "fits", the model said its estimate is a lower bound."""
    assert body_rows
    assert not [r for r in body_rows if r["silent"]]
    overturned = [r for r in body_rows if r["warned"]]
    assert {r["family"] for r in overturned} >= {"router"}  # the corpus has the case the issue names


def test_the_corpus_would_be_silent_without_the_rule(recorded):
    """The records mean something: without the live values (the model before issue 31), routers,
    softmax/norm, masks, reductions, scans and sorts that overflow are called "fits" in silence."""
    stripped = [
        {**r, "captured": {**r["captured"], "unseen": [u for u in r["captured"]["unseen"] if u.get("kind") != "live"]}}
        for r in recorded
        if model_harness.family(r) in families.BODY_TEMPORARIES
    ]
    silent = {r["family"] for r in model_harness.family_rows(stripped) if r["silent"]}
    assert {"router", "normalize", "mask", "reduce"} <= silent


def test_the_live_shares_are_what_the_records_say(recorded):
    """layout.py's shares, read by hand, are those refit_live finds in the records: the least of
    the fitted families on v5e and v6e and, rounded up to a tenth, at most the hand's bound."""
    fitted = [r for r in recorded if families.role(model_harness.family(r)) == "fitted"]
    least, most = model_harness.refit_live(model_harness.live_points(fitted))
    assert least == layout.LIVE_SPILL_LEAST
    assert most <= layout.LIVE_SPILL_MOST


# ---- the CLI, as a user runs it ------------------------------------------------------------------


def test_no_compile_says_the_router_s_fit_is_only_a_lower_bound(tmp_path):
    """`check --no-compile` on v5e: a VMEM006 warning on the router's kernel (on the reduction
    where its temporaries peak), no error, so exit 0 (cli/common.py: a warning is not a finding
    that fails), and never a quiet pass. The estimate counts the steps v5e keeps of the group
    loop (3.00M, tpu/layout.temporaries_estimate): 15.95M of 16.00M, so VMEM005 says how little
    is to spare; the compiler's 20.39M is a test below."""
    done, report = run_json(
        "check", str(ROUTER.relative_to(ROOT)), "--no-compile", "--target", "v5e", "--cache-dir", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    [spare] = [d for d in report["diagnostics"] if d["code"] == "VMEM005"]
    assert spare["message"].startswith("fits on TPU v5e with 0% to spare: kernel needs ~15.95M of 16.00M")
    [warning] = [d for d in report["diagnostics"] if d["code"] != "VMEM005"]
    assert (warning["code"], warning["severity"], warning["target"]) == ("VMEM006", "warning", "v5e")
    assert "lower bound" in warning["message"] and "temporaries live at once" in warning["message"]
    assert warning["facts"]["estimated"] and warning["facts"]["used"] <= warning["facts"]["limit"]
    reductions = [
        n for n, text in enumerate(ROUTER.read_text().splitlines(), 1) if "jnp.max(" in text or "jnp.min(" in text
    ]
    assert warning["range"]["start_line"] in reductions
    assert [r["range"]["start_line"] for r in warning["related"]] == [line_of(ROUTER, "pl.pallas_call(")]
    assert report["summary"].startswith("0 errors, 2 warnings")


def test_the_compiler_overflows_the_router_on_v5e(tmp_path):
    """The same kernel compiled: over v5e's 16.00M scoped limit by what its body spills."""
    done, report = run_json("check", str(ROUTER.relative_to(ROOT)), "--target", "v5e", "--cache-dir", str(tmp_path))
    assert done.returncode == 1, done.stderr
    [total] = [d for d in report["diagnostics"] if d["code"] == "VMEM002"]
    assert total["facts"]["used"] > total["facts"]["limit"] == 16 * MiB
    assert total["facts"]["used"] > 11 * MiB + 4 * MiB  # blocks 11.00M; the rest is the body's
