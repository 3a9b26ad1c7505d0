"""The report parser against real compiler texts (tests/data/reports, made by scripts/capture_reports.py).

Every compiler text here comes from a captured file; the checks compare what the parser extracts
with facts computable independently (sums, shapes times item sizes, the kernel each file compiled).
"""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import pytest

from vmem_lsp.render import size as format_size
from vmem_lsp.report.model import Report, Shape
from vmem_lsp.report.parse import error_kind, parse_report, parse_size

DATA = Path(__file__).parent / "data" / "reports"
FILES = sorted(DATA.glob("*.txt"))
MiB = 2**20
ITEMSIZE = {"f32": 4, "s32": 4, "bf16": 2, "s8": 1}
FORMS = {"physical", "scoped", "single_allocation", "block_shape", "unknown"}

# The form each captured case must parse to: a new capture must be added here.
EXPECTED_FORM = {
    "block-shape-mosaic-v6e": "block_shape",
    "block-shape-rank-v6e": "block_shape",
    "block-shape-v6e": "block_shape",
    "compiles-v6e": "unknown",
    "matmul-breakdown-v5p": "physical",
    "matmul-breakdown-v7x": "physical",
    "matmul-buffered1-v5p": "physical",
    "padded-rows-v5p": "physical",
    "padded-scratch-v6e": "physical",
    "padded-windows-v6e": "physical",
    "padded-windows-v7x": "physical",
    "physical-breakdown-v5p": "physical",
    "physical-breakdown-v6e": "physical",
    "physical-breakdown-v7x": "physical",
    "scoped-e1001-library-v5e": "scoped",
    "scoped-e1001-v5e": "scoped",
    "scoped-e1001-v6e": "scoped",
    "scratch-single-allocation-v6e": "single_allocation",
    "single-allocation-v4": "single_allocation",
    "single-allocation-v5e": "single_allocation",
    "smem-prefetch-v5e": "single_allocation",
    "smem-prefetch-v7x": "single_allocation",
    "smem-scratch-v6e": "single_allocation",
    "spills-breakdown-v5e": "physical",
    "twin-scratch-v6e": "physical",
    "extent1-grid-v6e": "physical",
    "const-out-v6e": "physical",
    "pipeline-flat-v6e": "physical",
    "pipeline-in-a-row-v6e": "physical",
    "pipeline-buffered1-v6e": "physical",
    "run-scoped-v6e": "physical",
    # Compile errors other than memory: tests/data/reports/ERRORS.md.
    "err-block-jax-v6e": "block_shape",
    "err-block-rank1-v6e": "block_shape",
    "err-block-mosaic-v6e": "block_shape",
    "err-align-v6e": "unknown",
    "err-prim-sort-v6e": "unknown",
    "err-prim-mosaic-v6e": "unknown",
    "err-dtype-int8-v4": "unknown",
    "err-dtype-int8-v5e": "unknown",
    "err-dtype-fp8-v4": "unknown",
    "err-dtype-fp8-v6e": "unknown",
    "err-dtype-cmp-v4": "unknown",
    "err-dtype-cmp-v6e": "unknown",
    "err-dtype-bf16cmp-v5e": "unknown",
    "err-dtype-bf16cmp-v6e": "unknown",
    "err-dtype-bf16cmp-v7x": "unknown",
    "err-dtype-scalar-v6e": "unknown",
    "err-smem-load-v6e": "unknown",
    "err-partition-v6e": "unknown",
    "err-dtype-int8-add-v6e": "unknown",
}


def compiler_text(path: Path) -> str:
    """The file's text after its three `#` header lines, as the exception printed it."""
    return path.read_text().split("\n", 3)[3].removesuffix("\n")


def report(name: str) -> Report:
    return parse_report(compiler_text(DATA / f"{name}.txt"))


def files_of(form: str) -> list[Path]:
    return [p for p in FILES if EXPECTED_FORM[p.stem] == form]


def ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def precision(printed: str) -> float:
    """Bytes of one unit in the last printed digit: the error a printed size may carry."""
    decimals = len(printed[:-1].partition(".")[2])
    return 10.0**-decimals * 1024 ** "BKMGTPE".index(printed[-1])


def nbytes(shape: Shape) -> int:
    return math.prod(shape.dims) * ITEMSIZE[shape.dtype]


def tile_aligned(shape: Shape) -> bool:
    """Whether the last two dims are multiples of the (8 * packing, 128) tile: no padding expected."""
    sublanes = 8 * 4 // ITEMSIZE[shape.dtype]
    return shape.dims[-1] % 128 == 0 and (len(shape.dims) < 2 or shape.dims[-2] % sublanes == 0)


def printed_sizes(r: Report) -> list[str]:
    texts = [r.used_text, r.limit_text, r.exceeded_by_text] + [a.size_text for a in r.allocations]
    return [t for t in texts if t]


def test_every_captured_case_is_classified():
    assert FILES, "run scripts/capture_reports.py tests/data/reports"
    assert {p.stem for p in FILES} == set(EXPECTED_FORM)


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_form_and_text_kept(path):
    text = compiler_text(path)
    r = parse_report(text)
    assert r.form == EXPECTED_FORM[path.stem]
    assert r.text == text


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_printed_sizes_round_trip(path):
    for printed in printed_sizes(parse_report(compiler_text(path))):
        assert format_size(parse_size(printed)) == printed


@pytest.mark.parametrize("path", files_of("physical"), ids=ids(files_of("physical")))
def test_physical_breakdown_lists_every_allocation(path):
    text = compiler_text(path)
    r = parse_report(text)
    separators = sum(1 for line in text.splitlines() if line.strip() and set(line.strip()) == {"="})
    assert len(r.allocations) == separators  # the proto tail adds none
    assert r.limit_kind == "physical" and r.memory_space == "vmem"
    total = sum(a.size for a in r.allocations)
    slack = precision(r.used_text) + sum(precision(a.size_text) for a in r.allocations)
    assert abs(total - r.used) <= slack
    assert abs(r.used - r.limit - r.exceeded_by) <= slack + precision(r.limit_text) + precision(r.exceeded_by_text)
    assert r.op_name and r.op_name.endswith("pallas_call")


@pytest.mark.parametrize(
    "path",
    files_of("physical") + files_of("single_allocation"),
    ids=ids(files_of("physical") + files_of("single_allocation")),
)
def test_windows_are_block_bytes_times_buffers(path):
    """A tile-aligned window takes its block's bytes once per buffer; the full shape is the array's."""
    windows = [a for a in parse_report(compiler_text(path)).allocations if a.kind.endswith("_window")]
    for a in windows:
        assert a.operand_index is not None and a.buffers in (1, 2)
        assert len(a.window_shape.dims) == len(a.full_shape.dims)
        assert all(w <= f for w, f in zip(a.window_shape.dims, a.full_shape.dims))
        if tile_aligned(a.window_shape):
            assert a.size == nbytes(a.window_shape) * a.buffers


def test_single_buffered_whole_array_windows():
    for name in ("physical-breakdown-v6e", "physical-breakdown-v5p", "physical-breakdown-v7x"):
        r = report(name)
        whole = Shape("f32", (4096, 4096))
        assert [(a.kind, a.operand_index, a.buffers) for a in r.allocations] == [
            ("input_window", 0, 1),
            ("output_window", 0, 1),
        ]
        assert all(a.window_shape == a.full_shape == whole for a in r.allocations)
        assert r.used == 2 * nbytes(whole)


def test_matmul_windows_scratch_and_spills():
    for name in ("matmul-breakdown-v5p", "matmul-breakdown-v7x"):
        r = report(name)
        by_kind = {(a.kind, a.operand_index): a for a in r.allocations}
        assert set(by_kind) == {
            ("scratch", None),
            ("input_window", 0),
            ("input_window", 1),
            ("output_window", 0),
            ("spill", None),
        }
        for key in (("input_window", 0), ("input_window", 1), ("output_window", 0)):
            a = by_kind[key]
            assert a.buffers == 2
            assert a.window_shape == Shape("bf16", (2048, 2048)) and a.full_shape == Shape("bf16", (8192, 8192))
        scratch = by_kind[("scratch", None)]
        assert scratch.window_shape == Shape("f32", (2048, 2048)) and scratch.size == 2048 * 2048 * 4
        assert scratch.buffers is None and scratch.full_shape is None
        spill = by_kind[("spill", None)]
        assert spill.op_name is None and spill.tag is None and spill.label


def test_buffered_one_single_buffers_that_window_only():
    windows = {(a.kind, a.operand_index): a for a in report("matmul-buffered1-v5p").allocations}
    assert windows[("input_window", 0)].buffers == 1
    assert windows[("input_window", 0)].size == 2048 * 2048 * 2
    assert windows[("input_window", 1)].buffers == 2
    assert windows[("output_window", 0)].buffers == 2


def test_spills_dominate_flash_attention():
    r = report("spills-breakdown-v5e")
    spill, *windows = r.allocations
    assert spill.kind == "spill" and spill.size > sum(a.size for a in windows)
    assert [(a.kind, a.operand_index) for a in windows] == [
        ("input_window", 0),
        ("input_window", 1),
        ("input_window", 2),
        ("output_window", 0),
    ]
    assert all(a.buffers == 2 and a.window_shape.dims == (1, 1, 8192, 128) for a in windows)
    assert "flash_attention" in r.op_name


def test_padding_shows_in_sizes():
    """Windows are printed as raw u8 bytes already padded to lanes; scratch keeps its typed shape."""
    rows = report("padded-rows-v5p").allocations
    assert all(a.size == 131072 * 128 * 2 * a.buffers for a in rows)  # 100 lanes padded to 128
    windows = {(a.kind, a.operand_index): a for a in report("padded-windows-v6e").allocations}
    assert {i for k, i in windows if k == "input_window"} == {0, 1, 2, 3}
    assert any(a.unpadded_size < a.size for a in windows.values())
    scratch = [a for a in report("padded-scratch-v6e").allocations if a.kind == "scratch"]
    assert len(scratch) == 4
    for a in scratch:
        assert format_size(a.unpadded_size) == format_size(nbytes(a.window_shape))  # printed rounded
        assert a.unpadded_size <= a.size
        assert a.shape_text.startswith(str(a.window_shape) + "{")
        assert (a.unpadded_size < a.size) == (not tile_aligned(a.window_shape))


def test_v7x_keeps_small_inputs_out_of_the_kernel_windows():
    windows = [(a.kind, a.operand_index) for a in report("padded-windows-v7x").allocations]
    assert [i for k, i in windows if k == "input_window"] == [3]
    assert sorted(i for k, i in windows if k == "output_window") == [0, 1, 2, 3]


@pytest.mark.parametrize("path", files_of("scoped"), ids=ids(files_of("scoped")))
def test_scoped_totals(path):
    r = parse_report(compiler_text(path))
    assert (r.limit_kind, r.error_code, r.memory_space, r.allocations) == ("scoped", "E1001", "vmem", ())
    assert r.used > r.limit
    assert abs(r.used - r.limit - r.exceeded_by) <= sum(map(precision, printed_sizes(r)))
    assert r.op_name.endswith("pallas_call")


def test_scoped_default_limits():
    assert report("scoped-e1001-v5e").limit == 16 * MiB
    assert report("scoped-e1001-v6e").limit == 32 * MiB
    assert report("scoped-e1001-v6e").used == 2 * 2 * 1024 * 4096 * 4  # in and out, 2 buffers each


@pytest.mark.parametrize("path", files_of("scoped"), ids=ids(files_of("scoped")))
def test_scoped_without_error_code_prefix(path):
    """Older libtpu prints the same text without "E1001: CompileTimeScopedVmemOom:"."""
    text = compiler_text(path)
    old = re.sub(r"E1001: CompileTimeScopedVmemOom:\s*", "", text)
    assert old != text
    r, new = parse_report(old), parse_report(text)
    assert r.form == "scoped" and r.error_code is None
    assert (r.used, r.limit, r.exceeded_by, r.op_name) == (new.used, new.limit, new.exceeded_by, new.op_name)


@pytest.mark.parametrize("path", files_of("single_allocation"), ids=ids(files_of("single_allocation")))
def test_single_allocation(path):
    r = parse_report(compiler_text(path))
    (a,) = r.allocations
    assert r.limit_kind == "physical" and a.size > r.limit and a.size_text is None
    assert r.memory_space == a.memory_space and a.allocation_type == "scoped"
    assert a.label and a.tag


def test_single_allocation_facts():
    (v5e,) = report("single-allocation-v5e").allocations
    assert (v5e.kind, v5e.operand_index, v5e.buffers, v5e.size) == ("input_window", 0, 1, 6144 * 6144 * 4)
    assert report("single-allocation-v4").limit == 16 * MiB
    (scratch,) = report("scratch-single-allocation-v6e").allocations
    assert (scratch.kind, scratch.window_shape, scratch.size) == (
        "scratch",
        Shape("f32", (16384, 4096)),
        16384 * 4096 * 4,
    )


@pytest.mark.parametrize("name", ["smem-prefetch-v5e", "smem-prefetch-v7x", "smem-scratch-v6e"])
def test_smem(name):
    r = report(name)
    (a,) = r.allocations
    assert r.memory_space == a.memory_space == "smem" and r.limit == MiB and a.size == 4 * MiB
    if "prefetch" in name:
        assert (a.kind, a.operand_index) == ("smem_prefetch", 0)
    else:
        assert (a.kind, a.window_shape) == ("scratch", Shape("s32", (1 << 20,)))


def test_block_shape_operands():
    assert (report("block-shape-v6e").operand_kind, report("block-shape-v6e").operand_index) == ("input", 0)
    assert (report("block-shape-rank-v6e").operand_kind, report("block-shape-rank-v6e").operand_index) == ("output", 0)
    mosaic = report("block-shape-mosaic-v6e")
    # Mosaic counts its windows: "input 0" is in_specs[0], after any scalar-prefetch operands
    assert (mosaic.error_code, mosaic.operand_kind, mosaic.operand_index) == ("E2002", "window_input", 0)
    err = report("err-block-mosaic-v6e")
    assert (err.error_code, err.operand_kind, err.operand_index) == ("E2002", "window_input", 0)


def test_block_shape_keeps_the_path_jax_names_the_operand_by():
    # The path in the call's arguments, as written: the worker matches it to the operand jax
    # gave that name (a pytree argument before it makes args[N] other than operand N).
    assert report("block-shape-v6e").operand_path == "args[0]"
    assert report("err-block-rank1-v6e").operand_path == "args[0]"
    assert report("block-shape-rank-v6e").operand_path == "outputs"
    assert report("block-shape-mosaic-v6e").operand_path is None  # Mosaic says "input 0"


# The kind of each captured compile error that is no block shape (mapping.BODY_CODES gives its
# code: alignment VMEM030, unsupported VMEM031, dtype VMEM032, memory_space VMEM033,
# partitioning VMEM034); tests/data/reports/ERRORS.md. A new err-* capture must be added here.
EXPECTED_KIND = {
    "err-align-v6e": "alignment",
    "err-prim-sort-v6e": "unsupported",
    "err-prim-mosaic-v6e": "unsupported",
    "err-dtype-int8-v4": "dtype",
    "err-dtype-fp8-v4": "dtype",
    "err-dtype-cmp-v4": "dtype",
    "err-dtype-cmp-v6e": "dtype",
    "err-dtype-bf16cmp-v6e": "dtype",
    "err-dtype-bf16cmp-v7x": "dtype",
    "err-dtype-scalar-v6e": "dtype",
    "err-dtype-int8-add-v6e": "dtype",
    "err-smem-load-v6e": "memory_space",
    "err-partition-v6e": "partitioning",
}


def test_every_captured_compile_error_that_is_no_block_shape_has_its_kind():
    failing = {
        p.stem for p in files_of("unknown") if p.stem.startswith("err-") and compiler_text(p) != "(compiled: no error)"
    }
    assert failing == set(EXPECTED_KIND)


@pytest.mark.parametrize("name", sorted(EXPECTED_KIND))
def test_error_kind_of_each_captured_compile_error(name):
    assert error_kind(report(name).text) == EXPECTED_KIND[name]


def test_an_int8_vector_op_the_vpu_refuses_is_a_dtype_error_though_mosaic_says_not_implemented():
    # "Not implemented: Only vector<i16> and vector<i32> are supported, but got 'i8'": the op
    # (here arith.addi) exists; its operands' element type does not, on every chip
    text = report("err-dtype-int8-add-v6e").text
    assert "Not implemented: Only vector<i16> and vector<i32> are supported, but got 'i8'" in text
    assert '"arith.addi"' in text
    assert error_kind(text) == "dtype"


def test_unknown_text_is_kept_whole():
    header = "".join((DATA / "physical-breakdown-v6e.txt").read_text().splitlines(keepends=True)[:3])
    for text in (compiler_text(DATA / "compiles-v6e.txt"), header, ""):
        r = parse_report(text)
        assert (r.form, r.text, r.allocations, r.used) == ("unknown", text, (), None)


def mutations(text: str, rng: random.Random):
    """Truncations at many cut points, and damaged copies of the text."""
    cuts = sorted({0, len(text)} | {round(len(text) * k / 97) for k in range(97)})
    for i in cuts:
        yield text[:i]
        yield text[i:]
    lines = text.splitlines(keepends=True)
    for i in range(len(lines)):
        yield "".join(lines[:i] + lines[i + 1 :])
    yield re.sub(r"\d", "9" * 40, text)
    yield re.sub(r"\d+", "", text)
    yield text.replace("'", "").replace('"', "")
    yield text.replace("M", "Q")
    for _ in range(20):
        i = rng.randrange(len(text) + 1)
        yield text[:i] + "".join(rng.choice("[]()'\"=:.,0123456789MK \n") for _ in range(8)) + text[i:]


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_never_raises_on_damaged_text(path):
    text = compiler_text(path)
    full = parse_report(text)
    rng = random.Random(path.stem)
    for damaged in mutations(text, rng):
        r = parse_report(damaged)
        assert r.text == damaged and r.form in FORMS
    for i in range(len(text) + 1):  # a cut report never gains allocations
        assert len(parse_report(text[:i]).allocations) <= len(full.allocations)


@pytest.mark.parametrize(
    "printed, n",
    [
        ("128.00M", 128 * MiB),
        ("64.0K", 65536),
        ("1.50G", 3 * 2**29),
        ("512B", 512),
        ("0B", 0),
        ("63.94M", round(63.94 * MiB)),
        ("1.6K", round(1.6 * 1024)),
        (" 4.00M ", 4 * MiB),
    ],
)
def test_parse_size(printed, n):
    assert parse_size(printed) == n


@pytest.mark.parametrize("bad", ["", "M", "12", "1.5X", "1,5M", "--1M", "1.5 M"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


@pytest.mark.parametrize(
    "n, printed",
    [
        (134217728, "128.00M"),
        (65536, "64.0K"),
        (512, "512B"),
        (1023, "1023B"),
        (1024, "1.0K"),
        (MiB - 1, "1024.0K"),
        (MiB, "1.00M"),
        (3 * 2**29, "1.50G"),
        (2**40, "1.00T"),
        (-65536, "-64.0K"),
    ],
)
def test_format_size(n, printed):
    assert format_size(n) == printed


@pytest.mark.parametrize(
    "name", ["pipeline-flat-v6e", "pipeline-in-a-row-v6e", "pipeline-buffered1-v6e", "run-scoped-v6e"]
)
def test_what_the_body_allocates_is_scoped_memory_of_the_function(name):
    """emit_pipeline's windows and run_scoped's buffers: "scoped memory for
    <jitted function>", a size and nothing more."""
    r = report(name)
    assert r.allocations and all(
        a.kind == "other" and a.tag.startswith("scoped memory for ") and a.window_shape is None for a in r.allocations
    )
