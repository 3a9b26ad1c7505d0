"""Errors that point at the culprit (issue 31): the allocations that make an
overflow are errors, the small ones related information of the kernel's total;
a vmem_limit_bytes above the chip's capacity is named; one capacity figure per
chip; several chips in one short line; one VMEM010 for the same failure on
every chip."""

from __future__ import annotations

import re
import shutil

import pytest
from support import EXAMPLES, KERNELS
from support.cli import run_json

from vmem_lsp.correlate import Anchor
from vmem_lsp.render import Brief, Wording, briefs_said
from vmem_lsp.source.model import Span
from vmem_lsp.tpu.mapping import Part, culprits

M, K = 1 << 20, 1 << 10


def parts(*sizes):
    place = Anchor("k.py", Span(1, 0, 1, 1))
    return [Part(place, "VMEM001", f"part {n}", Wording("", "", ""), {"size": s}) for n, s in enumerate(sizes)]


@pytest.mark.parametrize(
    "sizes, over, used, expected",
    [
        ((64 * M, 64 * M, 4 * K), 68 * K, 128 * M, {0, 1}),  # equal windows both; the bias window never
        ((64 * M, 64 * M), 112 * M, 128 * M, {0, 1}),  # neither alone closes the gap
        ((128 * M, 64 * M), 64 * M + 64 * K, 192 * M, {0, 1}),  # a third of the total is never "small"
        # jax's flash attention on v5e: its internal scratch, not four 512K windows (2% each)
        ((16530 * K, 512 * K, 512 * K, 512 * K, 512 * K), 2530 * K, 18530 * K, {0}),
        # ragged paged attention on v5e: 96K over; five 32K windows could close it, the 16M scratch does
        ((16 * M, 32 * K, 32 * K, 32 * K, 32 * K, 32 * K), 96 * K, 16480 * K, {0}),
        # the bundled matmul on v5e: four 4M buffers and 2.36M internal, all above 5% of the total
        ((4 * M, 4 * M, 4 * M, 4 * M, 2420 * K), 2420 * K, 18780 * K, {0, 1, 2, 3, 4}),
        # small parts that are needed: without them the larger ones cannot close the gap
        ((64 * M, 2 * M, 2 * M), 66 * M, 68 * M, {0, 1, 2}),
        ((64 * M, 4 * K), None, None, {0, 1}),  # the gap unknown: every part
        ((64 * M, 4 * K), 200 * M, 200 * M, {0, 1}),  # the parts cannot explain the gap: every part
    ],
)
def test_the_culprits_are_the_parts_that_make_the_overflow(sizes, over, used, expected):
    assert culprits(parts(*sizes), over, used) == expected


def test_a_part_of_unknown_size_is_always_a_culprit():
    found = parts(64 * M, 4 * K)
    del found[1].facts["size"]
    assert culprits(found, 64 * K, 128 * M) == {0, 1}


@pytest.mark.parametrize(
    "briefs, said",
    [
        # two chips: each chip's limit, the need said once
        (
            [Brief(128 * M, 16 * M, "v5e", scoped=True), Brief(128 * M, 127 * M, "v6e")],
            "needs 128.00M; limits 16.00M scoped on v5e, 127.00M on v6e (a small overshoot on v6e)",
        ),
        # from three chips on, ranges: one line for five chips, the asked limit kept
        (
            [
                Brief(None, 16 * M, "v4"),
                Brief(128 * M, 16 * M, "v5e", scoped=True),
                Brief(128 * M, 64 * M, "v5p"),
                Brief(128 * M, 127 * M, "v6e"),
                Brief(128 * M, 64 * M, "v7x", asked="128.00M"),
            ],
            "needs 128.00M; limits 16.00M to 127.00M (128.00M asked on v7x) on v5e, v5p, v6e, v7x; "
            "one allocation over 16.00M on v4",
        ),
        (
            [
                Brief(18 * M, 16 * M, "v4"),
                Brief(17 * M, 16 * M, "v5e", scoped=True),
                Brief(17 * M, 16 * M, "v5p", scoped=True),
            ],
            "needs 17.00M to 18.00M; limit 16.00M on v4, v5e, v5p",
        ),
        # the model's totals keep their "~"; chips whose one allocation is over, by limit
        (
            [
                Brief(512 * K, 16 * M, "v5e", approximate=True),
                Brief(512 * K, 32 * M, "v6e", approximate=True),
                Brief(512 * K, 64 * M, "v7x", approximate=True),
            ],
            "needs ~512.0K; limits 16.00M to 64.00M on v5e, v6e, v7x",
        ),
        (
            [Brief(None, 16 * M, "v4"), Brief(None, 16 * M, "v5e"), Brief(None, 64 * M, "v5p")],
            "one allocation over 16.00M on v4 and v5e, 64.00M on v5p",
        ),
    ],
)
def test_several_chips_are_said_briefly(briefs, said):
    assert briefs_said(briefs) == said


def test_a_part_on_several_chips_leaves_the_limits_to_its_kernel():
    briefs = [
        Brief(None, 16 * M, "v4"),
        Brief(128 * M, 16 * M, "v5e", scoped=True),
        Brief(128 * M, 64 * M, "v5p"),
        Brief(128 * M, 127 * M, "v6e"),
    ]
    assert briefs_said(briefs, limits=False) == "needs 128.00M on v5e, v5p, v6e; one allocation over 16.00M on v4"
    assert briefs_said(briefs[:2], limits=False) == briefs_said(briefs[:2])  # two chips: said in full


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    folder = tmp_path_factory.mktemp("culprits")
    for name in ("small_windows.py", "limit_above.py", "one_big_window.py"):
        shutil.copy(KERNELS / name, folder / name)
    shutil.copy(EXAMPLES / "copy_whole.py", folder / "copy_whole.py")
    done, report = run_json("check", ".", "--target", "v4,v5e,v5p,v6e,v7x", cwd=folder)
    assert done.returncode == 1, done.stderr
    return report["diagnostics"]


@pytest.mark.compiler
def test_a_small_window_is_related_information_not_an_error(checked):
    bias = [d for d in checked if d["path"] == "small_windows.py" and "f32[8,128]" in d["message"]]
    assert bias == []
    (total,) = [d for d in checked if d["path"] == "small_windows.py" and d["code"] == "VMEM002"]
    related = [r["message"] for r in total["related"] if "f32[8,128]" in r["message"]]
    assert related and all("too small to close the gap alone" in m for m in related), total["related"]
    windows = [d for d in checked if d["path"] == "small_windows.py" and d["code"] == "VMEM001"]
    assert sorted(d["range"]["start_line"] for d in windows) == [19, 20]


@pytest.mark.compiler
def test_a_limit_above_the_chip_is_named(checked):
    (total,) = [d for d in checked if d["path"] == "limit_above.py" and d["code"] == "VMEM002"]
    assert "v7x" in total["target"].split(",")
    v7x = next(r["message"] for r in total["related"] if "TPU v7x" in r["message"])
    assert "vmem_limit_bytes asks 128.00M; TPU v7x has 64.00M; the compiler uses 64.00M" in v7x, v7x
    assert "(128.00M asked) on v5p, v6e, v7x" in total["message"], total["message"]


@pytest.mark.compiler
def test_several_chips_make_one_short_line_with_one_capacity_per_chip(checked):
    whole = [d for d in checked if d["path"] == "copy_whole.py" and d["code"] != "VMEM007"]
    assert whole
    for d in whole:  # with its path and position, a text line of about 160 characters at most
        assert len(d["message"]) <= 135, d["message"]  # "; limits" (the chips' limits said as such) made it 133
    (total,) = [d for d in whole if d["code"] == "VMEM002"]
    assert set(total["target"].split(",")) == {"v4", "v5e", "v5p", "v6e", "v7x"}
    # Each chip's whole sentence stays in related information; the facts keep every figure.
    sentences = [r["message"] for r in total["related"] if r["message"].startswith("pallas_call")]
    assert len(sentences) == 5 and all("kernel needs" in s or "one allocation" in s for s in sentences)
    assert set(total["facts"]["targets"]) == {"v4", "v5e", "v5p", "v6e", "v7x"}
    # v5p's single allocation is measured against 64.00M, its usage against 63.94M: one figure is said.
    said = [t for d in checked for t in (d["message"], *(r["message"] for r in d["related"]))]
    (big,) = [d for d in checked if d["path"] == "one_big_window.py" and d["code"] == "VMEM002"]
    assert "one allocation over 16.00M on v4, 63.94M on v5p" in big["message"], big["message"]
    assert big["facts"]["targets"]["v5p"]["reported_limit"] == 64 * M
    assert not [t for t in said if re.search(r"64\.00M[^;]*(on TPU v5p|on v5p)", t)], "v5p said 64.00M"


@pytest.mark.compiler
def test_the_same_failure_on_every_chip_is_one_diagnostic(checked):
    (raised,) = [d for d in checked if d["code"] == "VMEM010"]
    assert raised["message"].startswith("example not checked on TPU v4, TPU v5e, TPU v5p, TPU v6e, TPU v7x: ")
    assert "takes 2 positional arguments but 3 were given" in raised["message"]
