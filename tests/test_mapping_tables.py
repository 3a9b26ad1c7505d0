"""The middle of the pipeline without a compiler: a captured report text
(tests/data/reports, written by scripts/capture_reports.py), a hand-built
captured call and a small located source in; anchors and messages out.

Each case is one row of a table: what it feeds mapping, budget and the
rendering, and what the user must read, where. Runs in about a second."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support import reports

from vmem_lsp import render
from vmem_lsp.diagnostics import merge_targets
from vmem_lsp.engine import SourceFiles, diagnose, diagnostics_for
from vmem_lsp.results import CapturedCall, ExampleResult, Operand, Origin, Scoped, Scratch
from vmem_lsp.source.directives import find_examples
from vmem_lsp.tpu.budget import from_compile
from vmem_lsp.tpu.correlate import scratch_indices
from vmem_lsp.tpu.mapping import allocation_name
from vmem_lsp.tpu.parse import parse_report

REPORTS = reports.folder()

# A small source as a user writes it: the kernel, its BlockSpecs and scratch,
# and two examples that reach the same pallas_call.
SOURCE = """\
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def copy(x, n: int = 8):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // n,),
        in_specs=[pl.BlockSpec((n, 4096), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((n, 4096), lambda i: (i, 0)),
        scratch_shapes=[pltpu.VMEM((4096, 4096), jnp.float32), pltpu.VMEM((4096, 4096), jnp.float32)],
    )(x)
# vmem: copy(f32[4096,4096])
# vmem: copy(f32[8192,4096], 16)
"""
PATH = "/project/kernels/copy.py"
CALL_LINE = 8  # `return pl.pallas_call(`
IN_SPEC, OUT_SPEC, SCRATCH = 12, 13, 14


def report(name: str) -> str:
    """A captured compiler text, without the capture script's # header lines."""
    return "".join(l for l in (REPORTS / f"{name}.txt").read_text().splitlines(True) if not l.startswith("# "))


def operand(role: str, index: int, rows: int = 8, full=(4096, 4096), buffers=None, operand=None) -> Operand:
    return Operand(
        role, index, index if operand is None else operand, "f32", full, (rows, 4096), None, buffers, False, None
    )


def call(
    text: str | None, *, rows: int = 8, full=(4096, 4096), scratch=((4096, 4096), (4096, 4096)), fits: bool = False
) -> CapturedCall:
    return CapturedCall(
        "kernel for copy",
        Origin(PATH, CALL_LINE),
        None,
        (full[0] // rows,),
        0,
        (operand("in", 0, rows, full), operand("out", 0, rows, full)),
        tuple(Scratch(i, "f32", shape, "vmem", None) for i, shape in enumerate(scratch)),
        None,
        fits,
        text,
        1.0,
    )


def sources() -> SourceFiles:
    return SourceFiles(overlay=lambda path: SOURCE if path == PATH else None)


def examples():
    found, errors = find_examples(SOURCE, PATH)
    assert not errors
    return found


def where(d) -> tuple[int, int]:
    return d.span.start_line, d.span.start_col


# ---- one chip: where each allocation is marked, and what it says ---------------------------

TWIN = "twin-scratch-v6e"
RELATED = "related to VMEM002"  # the related information of the kernel's total
CASES = [
    # (report, target, {(code, line): [message fragments]})
    (
        TWIN,
        "v6e",
        {
            ("VMEM001", SCRATCH): [
                "scratch 0 f32[4096,4096] = 64.00M; kernel needs 128.50M of 127.94M VMEM on TPU v6e (over by 576.0K, 0.44% of the limit: a small overshoot)",
                "scratch 1 f32[4096,4096] = 64.00M; kernel needs 128.50M of 127.94M VMEM on TPU v6e",
            ],
            # 576.0K over: the two 256.0K windows could not close the gap, so they are related
            # information of the kernel's total, not errors of their own (mapping.culprits).
            (RELATED, CALL_LINE): [
                "input 0 window f32[8,4096] = 256.0K, double buffered",
                "output 0 window f32[8,4096] = 256.0K, double buffered",
                "(too small to close the gap alone)",
            ],
            ("VMEM002", CALL_LINE): [
                "pallas_call kernel: kernel needs 128.50M of 127.94M VMEM on TPU v6e (over by 576.0K, 0.44% of the limit: a small overshoot)"
            ],
            ("VMEM004", 16): [f"kernel (line {CALL_LINE}) does not fit: "],
        },
    ),
    (
        "scoped-e1001-v6e",
        "v6e",
        {
            (RELATED, CALL_LINE): [
                "input 0 window f32[8,4096] = 256.0K, double buffered; kernel needs",
                "(sizes estimated by the layout model; the compiler gives only the total)",
            ],
            ("VMEM002", CALL_LINE): ["scoped VMEM on TPU v6e (over by"],
        },
    ),
]


@pytest.mark.parametrize("name,target,expected", CASES, ids=[c[0] for c in CASES])
def test_each_allocation_is_marked_where_it_was_made(name, target, expected):
    example = examples()[0]
    found = diagnostics_for(example, ExampleResult(target, None, (call(report(name)),)), sources())
    for (code, line), fragments in expected.items():
        messages = [d.message for d in found if d.code == code and d.span.start_line == line]
        if code == RELATED:
            messages = [r.message for d in found if d.code == "VMEM002" for r in d.related if r.span.start_line]
        for fragment in fragments:
            assert any(fragment in m for m in messages), (code, line, fragment, messages)


def test_two_allocations_alike_are_two_diagnostics_and_add_up_to_the_total():
    """The compiler listed two 64.00M scratch buffers; both are shown, each at
    its own entry's index, and the parts sum to the report's total."""
    text = report(TWIN)
    parsed = parse_report(text)
    assert scratch_indices(call(text), parsed.allocations)[:2] == [0, 1]
    shown = diagnose([], [(examples()[0], ExampleResult("v6e", None, (call(text),)))], sources())
    parts = [d for d in shown if d.code in ("VMEM001", "VMEM003")]
    (total,) = [d for d in shown if d.code == "VMEM002"]
    small = [r for r in total.related if "too small to close the gap" in r.message]
    assert len(small) == 2  # the two 256.0K windows: related information, not errors
    sizes = [d.facts["size"] for d in parts] + [256 * 1024] * len(small)
    assert sum(sizes) == parsed.used
    assert len([d for d in parts if d.span.start_line == SCRATCH]) == 2
    b = from_compile(call(text), parsed, "v6e")
    assert sum(p.bytes for p in b.parts) == b.total == parsed.used


def test_the_budget_names_a_pipeline_window_by_its_place_as_its_diagnostic_does():
    """The hover's budget table and the VMEM001 on the inner BlockSpec say the same
    "pipeline input 1 window": the number is the spec's place in emit_pipeline's in_specs."""
    windows = tuple(
        Scoped(kind, index, "f32", (2, 512, 1024), 2, "vmem", None, 0, -1, window)
        for index, (kind, window) in enumerate([("pipeline_in", 0), ("pipeline_in", 1), ("pipeline_out", 0)])
    )
    labels = [p.label for p in from_compile(replace(call(None), scoped=windows), None, "v6e").parts]
    for name in ("pipeline input 0 window f32[512,1024]", "pipeline input 1 window", "pipeline output 0 window"):
        assert any(label.startswith(name) for label in labels), labels


def test_an_allocation_is_named_by_the_compilers_tag_never_the_tools_own_hlo_label():
    """The label of the tool's own jax.jit(lambda ...) wrapper says nothing to the user."""
    [first] = parse_report(report(TWIN)).allocations[:1]
    wrapper = replace(first, kind="other", tag=None, label="_lambda_.1 = custom-call(a_0_.1, b_0_.1), custom_call")
    assert "_lambda_" not in allocation_name(wrapper)
    assert (
        allocation_name(replace(wrapper, tag="scoped memory for tpu_custom_call"))
        == "scoped memory for tpu_custom_call"
    )


# ---- chips merge by subject, never across examples ------------------------------------------


def test_two_examples_of_one_kernel_stay_apart_and_each_merges_its_own_chips():
    """Two examples reach one pallas_call: one diagnostic per example on each
    line, each naming its own figures on each of its chips, with its facts."""
    small, large = examples()
    twin, scoped = report(TWIN), report("scoped-e1001-v6e")
    results = [
        (small, ExampleResult("v6e", None, (call(twin),))),
        (small, ExampleResult("v5e", None, (call(scoped),))),
        (large, ExampleResult("v6e", None, (call(scoped, full=(8192, 4096), rows=16),))),
    ]
    shown = diagnose([], results, sources())
    totals = [d for d in shown if d.code == "VMEM002"]
    assert len(totals) == 2
    by_example = {d.subject.example.line: d for d in totals}
    assert by_example[16].target == "v5e,v6e"
    assert set(by_example[16].facts["targets"]) == {"v5e", "v6e"}
    assert by_example[17].target == "v6e" and by_example[17].facts["example"] == f"{PATH}:17"
    assert "on v5e" in by_example[16].message and "on v6e" in by_example[16].message
    assert "TPU v5e" not in by_example[17].message and "v5e" not in by_example[17].message


def test_merging_reads_the_subject_not_the_text():
    """Reworded messages merge the same: the key is the subject."""
    example = examples()[0]
    text = report(TWIN)
    found = [
        *diagnostics_for(example, ExampleResult("v6e", None, (call(text),)), sources()),
        *diagnostics_for(example, ExampleResult("v7x", None, (call(text),)), sources()),
    ]
    reworded = [replace(d, message=d.message.upper()) for d in found]
    assert len(merge_targets(reworded)) == len(merge_targets(found)) == len(found) // 2


# ---- the wording -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,expected",
    [
        (
            dict(used=134217728, limit=16777216, chip="TPU v5e", scoped=True, over=117440512),
            "kernel needs 128.00M of 16.00M scoped VMEM on TPU v5e (over by 112.00M)",
        ),
        (
            dict(used=134217728, limit=134154813, chip="TPU v6e", scoped=False, over=65536),
            "kernel needs 128.00M of 127.94M VMEM on TPU v6e (over by 64.0K, 0.05% of the limit: a small overshoot)",
        ),
        (
            dict(
                used=20 << 20,
                limit=17 << 20,
                chip="TPU v5e",
                scoped=True,
                set_in="pyproject.toml",
                over=3 << 20,
                approx=True,
                note=render.NOT_COMPILED,
            ),
            "kernel needs ~20.00M of 17.00M scoped VMEM (set in pyproject.toml) on TPU v5e "
            "(over by ~3.00M; layout model estimate, not compiled)",
        ),
        (
            dict(used=10 << 20, limit=16 << 20, chip="TPU v5e", scoped=True, approx=True),
            "kernel needs ~10.00M of 16.00M scoped VMEM on TPU v5e",
        ),
    ],
)
def test_the_budget_sentence(kwargs, expected):
    used, limit, chip = kwargs.pop("used"), kwargs.pop("limit"), kwargs.pop("chip")
    assert render.needs(used, limit, chip, **kwargs) == expected


def test_chips_clauses_join_after_one_head_and_differing_heads_stay_with_their_clause():
    a = render.part("input 0 window f32[8,128]", 4096, "needs A", buffers=2)
    b = render.part("input 0 window f32[8,128]", 4096, "needs B", buffers=2)
    c = render.part("input 0 window f32[8,128]", 8192, "needs C", buffers=2)
    assert render.per_target([a, b]) == "input 0 window f32[8,128] = 4.0K, double buffered; needs A; needs B"
    assert render.per_target([a, c]) == (
        "input 0 window f32[8,128] = 4.0K, double buffered; needs A; "
        "input 0 window f32[8,128] = 8.0K, double buffered; needs C"
    )


def test_shapes_and_buffering():
    assert render.shape("bf16", (1024, 512)) == "bf16[1024,512]"
    assert [render.buffering(n) for n in (None, 1, 2, 3)] == ["", "single buffered", "double buffered", "3 buffers"]
    assert render.window("out", 1, "f32", (8, 128)) == "output 1 window f32[8,128]"


# ---- the static tier: estimates of the text as typed, from what a compile taught ------------


def test_an_edited_block_shape_is_estimated_from_the_last_compile():
    """The compile saw blocks (8, 4096); the user types (2048, 4096): the
    estimate doubles-buffers the new window and says it is over, at the spec."""
    from vmem_lsp import views
    from vmem_lsp.engine import analyse

    literal = SOURCE.replace("(n, 4096)", "(8, 4096)")
    sources_then = SourceFiles(overlay=lambda path: literal if path == PATH else None)
    compiled = ExampleResult("v6e", None, (call(report(TWIN)),))
    learned = views.learn([compiled], sources_then.sites_of)
    typed = literal.replace("in_specs=[pl.BlockSpec((8, 4096)", "in_specs=[pl.BlockSpec((2048, 4096)")
    from vmem_lsp.source.locate import locate

    analysis = analyse(PATH, 2, typed, ("v6e",), learned.known, 0.10, locate)
    [(key, by_target)] = analysis.budgets.items()
    window = next(p for p in by_target["v6e"].parts if p.kind == "input_window")
    assert window.bytes == 2 * 2048 * 4096 * 4
    marked = [d for d in analysis.estimates if d.code == "VMEM001" and d.span.start_line == IN_SPEC]
    assert marked and marked[0].message.startswith(
        "input 0 window f32[2048,4096] ~ 64.00M, double buffered; kernel needs ~"
    )
    assert "layout model estimate, save to compile" in marked[0].message


def test_an_edit_that_keeps_names_is_estimated_with_the_values_the_compile_showed():
    """The compile saw `(n, 4096)` as (8, 4096) and no grid; the quick fix a user
    applies writes `(256, m)`-style blocks and `grid=(n // 256,)`: the estimate
    reads n and m from the compile (bare names it showed), not the stale windows."""
    from vmem_lsp import views
    from vmem_lsp.engine import analyse
    from vmem_lsp.source.locate import locate

    whole = (
        SOURCE.replace("        grid=(x.shape[0] // n,),\n", "")
        .replace("(n, 4096)", "(n, m)")
        .replace("def copy(x, n: int = 8):", "def copy(x, n: int = 8, m: int = 4096):")
    )
    sources_then = SourceFiles(overlay=lambda path: whole if path == PATH else None)
    taught = replace(call(report(TWIN), rows=4096, scratch=()), grid=())
    learned = views.learn([ExampleResult("v6e", None, (taught,))], sources_then.sites_of)
    [known] = learned.known.values()
    assert known.names == {"n": 4096, "m": 4096}
    fixed = whole.replace("(n, m), lambda i: (i, 0)", "(256, m), lambda i: (i, 0)").replace(
        "out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),",
        "out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),\n        grid=(n // 256,),",
    )
    analysis = analyse(PATH, 2, fixed, ("v6e",), learned.known, 0.10, locate)
    [(key, by_target)] = analysis.budgets.items()
    windows = [p for p in by_target["v6e"].parts if p.kind.endswith("_window")]
    assert [p.bytes for p in windows] == [2 * 256 * 4096 * 4] * 2  # (256, 4096) f32, double-buffered over 16 steps


def test_the_estimate_while_typing_says_when_it_is_only_a_lower_bound():
    """The compile taught a kernel whose body computes an f32 dot result the
    model cannot place; typed blocks that fit by the windows alone, but not
    with that value, get VMEM006 on the dot's line, not a silent pass."""
    from vmem_lsp import views
    from vmem_lsp.engine import analyse
    from vmem_lsp.results import Unseen
    from vmem_lsp.source.locate import locate

    literal = SOURCE.replace("(n, 4096)", "(8, 4096)")
    sources_then = SourceFiles(overlay=lambda path: literal if path == PATH else None)
    dot = Unseen("f32[4096,4096] from dot_general", 64 << 20, Origin(PATH, 15))
    taught = replace(call(None, scratch=(), fits=True), unseen=(dot,))
    learned = views.learn([ExampleResult("v6e", None, (taught,))], sources_then.sites_of)
    analysis = analyse(PATH, 2, literal, ("v6e",), learned.known, 0.10, locate)
    [warning] = [d for d in analysis.estimates if d.code == "VMEM006"]
    assert warning.severity == "warning" and warning.span.start_line == 15
    assert "lower bound" in warning.message and "f32[4096,4096] from dot_general (64.00M)" in warning.message
    small = replace(taught, unseen=(replace(dot, bytes=1 << 20),))
    quiet = views.learn([ExampleResult("v6e", None, (small,))], sources_then.sites_of)
    assert not [
        d for d in analyse(PATH, 2, literal, ("v6e",), quiet.known, 0.10, locate).estimates if d.code == "VMEM006"
    ]


# ---- compile errors other than VMEM: on the line that causes them -----------------------------


def blocked_call(text: str | None, dtype: str, block, full, fits: bool = False) -> CapturedCall:
    ops = tuple(Operand(role, 0, 0, dtype, full, block, None, None, False, None) for role in ("in", "out"))
    return CapturedCall("kernel for copy", Origin(PATH, CALL_LINE), None, (2,), 0, ops, (), None, fits, text, 1.0)


@pytest.mark.parametrize(
    "name,dtype,block,full,tile",
    [
        ("block-shape-v6e", "f32", (7, 100), (64, 256), "(8, 128) for f32"),  # jax's lowering check, args[0]
        ("block-shape-mosaic-v6e", "s8", (8, 128), (64, 128), "(32, 128) for s8"),  # Mosaic's E2002, input 0
    ],
)
def test_a_block_the_tpu_cannot_tile_is_marked_on_its_blockspec_once_for_all_chips(name, dtype, block, full, tile):
    example = examples()[0]
    results = [
        (example, ExampleResult(t, None, (blocked_call(report(name), dtype, block, full),))) for t in ("v5e", "v6e")
    ]
    results.append((example, ExampleResult("v7x", None, (blocked_call(None, dtype, block, full, fits=True),))))
    shown = diagnose([], results, sources())
    [at_spec] = [d for d in shown if d.code == "VMEM030" and d.span.start_line == IN_SPEC]
    assert tile in at_spec.message and at_spec.target == "v5e,v6e"
    assert at_spec.message.endswith("; fails on TPU v5e, TPU v6e; compiles on TPU v7x"), at_spec.message
    assert at_spec.facts["targets"]["v6e"]["text"] == report(name)  # the compiler's text, whole
    [summary] = [d for d in shown if d.code == "VMEM030" and d.span.start_line == 16]
    assert summary.message.startswith("example does not compile: input 0 block")
    assert not [d for d in shown if d.code == "VMEM011"]
