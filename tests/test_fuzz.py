"""Fuzzing the parsers: whatever text comes in, they answer, fast, and lose nothing.
The properties are those of fuzz/run.py's atheris targets (fuzz_properties.py):
both fail on an internal error and on an answer that disagrees with an
independent one."""

from __future__ import annotations

import random
import re
import sys
import time
from pathlib import Path

import jax.experimental.pallas.ops.tpu as ops
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import reports
from support.fuzz_properties import check_directive, check_locate, check_report, check_splice
from support.lsp_client import lsp_lines, utf16_columns

REPORTS = reports.every_file()  # every libtpu's texts: each is a seed
OPS_FILES = sorted(Path(ops.__path__[0]).rglob("*.py"))
REPORT_TEXTS = ["\n".join(p.read_text().splitlines()[3:]) for p in REPORTS]
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def mutate(text: str, rng: random.Random) -> str:
    """Real compiler text, damaged the ways logs get damaged: cut, spliced, digits changed,
    a number lost or garbled."""
    for _ in range(rng.randint(1, 6)):
        at = rng.randrange(len(text) + 1)
        kind = rng.choice(["cut", "insert", "digit", "dup", "truncate", "number"])
        if kind == "cut":
            text = text[:at] + text[at + rng.randint(1, 40) :]
        elif kind == "insert":
            text = (
                text[:at]
                + "".join(rng.choice("0123456789.MKG:=,[]{}()\n ") for _ in range(rng.randint(1, 12)))
                + text[at:]
            )
        elif kind == "digit":
            text = "".join(rng.choice("987654321") if c.isdigit() and rng.random() < 0.3 else c for c in text)
        elif kind == "dup":
            text = text[:at] + text[at : at + 200] + text[at:]
        elif kind == "number":
            numbers = list(re.finditer(r"\d+", text))
            if numbers:
                number = rng.choice(numbers)
                text = text[: number.start()] + rng.choice(["", "0", "-1", "1.5", "9" * 25]) + text[number.end() :]
        else:
            text = text[:at]
    return text


@FUZZ
@given(index=st.integers(0, len(REPORT_TEXTS) - 1), seed=st.integers(0, 2**32))
def test_report_parser_on_mutated_real_reports(index, seed):
    check_report(mutate(REPORT_TEXTS[index], random.Random(seed)))


@FUZZ
@given(st.text(max_size=2000))
def test_report_parser_on_random_text(text):
    check_report(text)


@FUZZ
@given(st.text(max_size=300))
def test_directive_parser_on_random_input(text):
    check_directive(text)


DIM = st.one_of(st.integers(-2, 10**20).map(str), st.sampled_from(["n", "", "1.5", "True", "(8)", "*s"]))
SHAPE = st.builds(
    lambda dtype, dims: f"{dtype}[{', '.join(dims)}]",
    st.sampled_from(["f32", "bf16", "s8", "i32", "u4", "pred", "f8e4m3fn", "q7"]),
    st.lists(DIM, max_size=4),
)
VALUE = st.one_of(SHAPE, st.integers().map(str), st.sampled_from(["(512, 512)", "None", "x", "BlockSizes(bq=8)"]))
ARGUMENT = st.one_of(VALUE, st.builds("{}={}".format, st.sampled_from(["bm", "block_q", "lambda"]), VALUE))
CALL = st.builds(
    lambda name, args, tail: f"{name}({', '.join(args)}){tail}",
    st.sampled_from(["matmul", "mod.kernel", "f", "1"]),
    st.lists(ARGUMENT, max_size=4),
    st.sampled_from(["", ")", "  # note", ".x", "(y)"]),
)


@FUZZ
@given(CALL)
def test_directive_parser_on_example_like_calls(text):
    """Calls built from the directive's own pieces (shapes of every rank, odd
    dims, keywords): random text alone seldom gets past `does not parse`."""
    check_directive(text)


@FUZZ
@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=1500))
def test_locator_on_random_text(text):
    check_locate(text, "random.py")


KERNEL_LINES = st.sampled_from(
    [
        "from jax.experimental import pallas as pl",
        "from jax.experimental.pallas import tpu as pltpu",
        "import functools",
        "from functools import partial",
        "from jax.experimental.pallas import pallas_call",
        "def f(x, bm=128):",
        "def kernel(x_ref, o_ref):",
        "o_ref[...] = x_ref[...] * 2",
        "if x:",
        "else:",
        "for i in range(3):",
        "with ctx:",
        "pass",
        "return x",
        "x = (",
        ")",
        "class A:",
        "specs = [pl.BlockSpec((8, 128), lambda i: (i, 0))]",
        "specs.append(pl.BlockSpec((bm, 128), None))",
        "specs += [pl.BlockSpec((1,), None)]",
        "specs = specs + [None]",
        "scratch = [pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA]",
        "grid_spec = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(2,), in_specs=specs, out_specs=specs[0])",
        "return pl.pallas_call(kernel, grid=(4,), in_specs=specs, out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x)",
        "y = pl.pallas_call(kernel, grid_spec=grid_spec, scratch_shapes=scratch)(x)",
        "call = functools.partial(pl.pallas_call, kernel, out_shape=x)",
        "call(in_specs=specs)(x)",
        "@functools.partial(pl.pallas_call, out_shape=s, in_specs=specs)",
        "pallas_call = pl.pallas_call",
        "z = pallas_call(kernel, compiler_params=pltpu.CompilerParams(vmem_limit_bytes=2**20))",
        "return partial(pl.pallas_call, kernel)",
    ]
)


def indented(lines: list[tuple[int, str]]) -> str:
    """One level in after a header line; after any other line, out by the number drawn."""
    out, depth, opened = [], 0, False
    for outs, line in lines:
        depth = depth + 1 if opened else max(0, depth - outs)
        out.append("    " * depth + line)
        opened = line.endswith(":") or line.startswith("@")
        depth -= line.startswith("@")
    return "\n".join(out) + "\n"


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 2), KERNEL_LINES), max_size=14, unique_by=lambda t: t[1]).map(indented))
def test_locator_on_kernels_built_from_pieces(text):
    """Kernel code shuffled from the pieces kernels are made of (about a third
    parses): random text never reaches a site. Each line at most once: a name
    bound twice is where the ast count, which follows no flow, and the locator
    part ways."""
    check_locate(text)


@pytest.mark.parametrize("points, lines", [(8, 2), pytest.param(40, 10, marks=pytest.mark.slow)])
def test_locator_on_every_ops_file_cut_at_random_points(points, lines):
    """Half-typed files: every jax ops/tpu file cut at random points, at
    random line starts (those prefixes mostly parse, so the site count is
    checked against ast's) and whole; each answer comes back, without an
    internal error, and in bounded time: the CPU of one locate (about 0.1 s at most), which a
    busy machine does not stretch as it does the wall clock (2.6 s seen at load 8)."""
    rng = random.Random(7)
    slowest = 0.0
    for path in OPS_FILES:
        text = path.read_text()
        line_starts = [0] + [i + 1 for i, char in enumerate(text) if char == "\n"]
        cuts = rng.sample(range(len(text)), min(points, len(text))) + rng.sample(
            line_starts, min(lines, len(line_starts))
        )
        for cut in sorted(cuts) + [len(text)]:
            started = time.process_time()
            check_locate(text[:cut], str(path))
            slowest = max(slowest, time.process_time() - started)
    assert slowest < 2.0, f"slowest locate of a cut file: {slowest:.2f} s of CPU"


LINE_PIECES = st.sampled_from(["a", "bc", "é", "😋", " ", "\t", "\n", "\r\n", "\r"])


def in_range_position(text: str, line: int, unit: int):
    """A valid LSP position (UTF-16 units, on a character boundary) from two draws."""
    from lsprotocol import types

    lines = lsp_lines(text)
    line %= len(lines)
    columns = utf16_columns(lines[line])
    return types.Position(line, columns[unit % len(columns)])


@FUZZ
@given(
    pieces=st.lists(LINE_PIECES, max_size=60),
    draws=st.tuples(*[st.integers(0, 10**6)] * 4),
    new=st.lists(LINE_PIECES, max_size=5),
)
def test_did_change_splices_as_pygls_does(pieces, draws, new):
    """The server's own didChange splice (a fast path) against pygls' line-by-line
    rewrite, on text with every LSP line end and characters outside the BMP."""
    from lsprotocol import types
    from pygls.workspace.text_document import TextDocument

    from vmem_lsp.server.documents import apply_change

    text = "".join(pieces)
    a, b = sorted(
        [in_range_position(text, *draws[:2]), in_range_position(text, *draws[2:])], key=lambda p: (p.line, p.character)
    )
    change = types.TextDocumentContentChangePartial(range=types.Range(a, b), text="".join(new))
    reference = TextDocument("file:///f.py", text)
    reference.apply_change(change)
    assert apply_change(text, change, reference.position_codec) == reference.source
    check_splice(text, change)


@FUZZ
@given(pieces=st.lists(LINE_PIECES, max_size=40), numbers=st.tuples(*[st.integers(0, 50)] * 4))
def test_did_change_out_of_range_positions_clamp_to_line_ends(pieces, numbers):
    """A client may send a column past a line's end or a line past the text's:
    the splice clamps them, as the LSP says, and never raises."""
    from lsprotocol import types
    from pygls.workspace.position_codec import PositionCodec

    from vmem_lsp.server.documents import apply_change, offset_of

    text = "".join(pieces)
    codec = PositionCodec()
    start, end = types.Position(*numbers[:2]), types.Position(*numbers[2:])
    change = types.TextDocumentContentChangePartial(range=types.Range(start, end), text="X")
    check_splice(text, change)
    after = apply_change(text, change, codec)
    assert "X" in after and len(after) <= len(text) + 1
    for position in (start, end):
        index = offset_of(text, position, codec)
        assert 0 <= index <= len(text)
        line = lsp_lines(text)[position.line] if position.line < len(lsp_lines(text)) else None
        if line is not None and position.character >= len(line) * 2:  # past the end in any unit
            assert text[index : index + 1] in ("", "\n", "\r")  # lands on the line's end


def test_a_form_feed_does_not_start_a_line():
    """pygls splits lines at \\f, \\v, U+2028 and others; editors and the LSP count
    only \\n, \\r\\n and \\r, and so does the server."""
    from lsprotocol import types
    from pygls.workspace.position_codec import PositionCodec

    from vmem_lsp.server.documents import apply_change

    change = types.TextDocumentContentChangePartial(
        range=types.Range(types.Position(1, 0), types.Position(1, 0)), text="#"
    )
    assert apply_change("a\fb\u2028c\nd", change, PositionCodec()) == "a\fb\u2028c\n#d"


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="atheris is installed on Linux only")
@pytest.mark.parametrize(
    "target, runs", [("report", 5000), ("locate", 300), ("directives", 5000), ("did_change", 5000)]
)
def test_coverage_guided_fuzzing_finds_nothing(target, runs, tmp_path):
    """fuzz/run.py under libFuzzer (atheris), seeded with the real reports and
    jax ops files, a fixed seed so that a failure reproduces; a crash input
    would be saved in tmp_path."""
    import subprocess

    done = subprocess.run(
        [sys.executable, str(Path(__file__).parent.parent / "fuzz" / "run.py"), target, f"-runs={runs}", "-seed=1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and f"Done {runs} runs" in done.stderr, done.stderr[-3000:]
    assert not list(tmp_path.glob("crash-*"))
