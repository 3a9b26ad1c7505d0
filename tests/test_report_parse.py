"""The report parser against real compiler texts (tests/data/reports/<libtpu>/, made by
scripts/capture_reports.py in an environment of each libtpu the project tests).

Every compiler text here comes from a captured file; the checks compare what the parser extracts
with facts computable independently (sums, shapes times item sizes, the kernel each file compiled).
The checks of form and structure run on every version's texts; the facts of one kernel run on the
versions where the compiler states them alike, and say where another version differs.
"""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import pytest
from support import reports
from support.reports import REFERENCE, case_id, compiler_text

from vmem_lsp import versions
from vmem_lsp.render import size as format_size
from vmem_lsp.tpu.parse import error_kind, parse_report, parse_size
from vmem_lsp.tpu.report import Report, Shape

FILES = reports.every_file()
VERSIONS = reports.captured_versions()
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
# Where another libtpu's text of a case parses to another form: {libtpu: {case: form}}, each with why.
FORM_CHANGES: dict[str, dict[str, str]] = {
    "0.0.32.1": {
        "physical-breakdown-v6e": "scoped",  # v6e's whole-array windows met its 32M scoped limit first
        "pipeline-buffered1-v6e": "unknown",  # jax 0.8's emit_pipeline: a bare NotImplementedError()
    },
    "0.0.50.1": {
        "block-shape-mosaic-v6e": "unknown",  # s8 blocks of 8 rows compile from 0.0.50.1 on
        "err-block-mosaic-v6e": "unknown",
    },
}


def form_of(name: str, libtpu: str) -> str:
    """The form case `name`'s text must parse to on `libtpu`."""
    return FORM_CHANGES.get(libtpu, {}).get(name, EXPECTED_FORM[name])


def expected_form(path: Path) -> str:
    return form_of(path.stem, path.parent.name)


def report(name: str, libtpu: str = REFERENCE) -> Report:
    return parse_report(compiler_text(reports.folder(libtpu) / f"{name}.txt"))


def files_of(form: str) -> list[Path]:
    return [p for p in FILES if expected_form(p) == form]


def ids(paths: list[Path]) -> list[str]:
    return [case_id(p) for p in paths]


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


@pytest.mark.parametrize("libtpu", VERSIONS)
def test_every_captured_case_is_classified(libtpu):
    assert reports.files(libtpu), f"run scripts/capture_reports.py with libtpu {libtpu}"
    assert {p.stem for p in reports.files(libtpu)} == set(EXPECTED_FORM)


def test_the_reference_and_every_tested_libtpu_are_captured():
    assert set(VERSIONS) == set(versions.TESTED.values())


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_form_and_text_kept(path):
    text = compiler_text(path)
    r = parse_report(text)
    assert r.form == expected_form(path)
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


@pytest.mark.parametrize("libtpu", VERSIONS)
def test_single_buffered_whole_array_windows(libtpu):
    for name in ("physical-breakdown-v6e", "physical-breakdown-v5p", "physical-breakdown-v7x"):
        if form_of(name, libtpu) != "physical":
            continue  # libtpu 0.0.32.1 stops v6e's at the scoped limit
        r = report(name, libtpu)
        whole = Shape("f32", (4096, 4096))
        assert [(a.kind, a.operand_index, a.buffers) for a in r.allocations] == [
            ("input_window", 0, 1),
            ("output_window", 0, 1),
        ]
        assert all(a.window_shape == a.full_shape == whole for a in r.allocations)
        assert r.used == 2 * nbytes(whole)


@pytest.mark.parametrize("libtpu", VERSIONS)
def test_matmul_windows_scratch_and_spills(libtpu):
    for name in ("matmul-breakdown-v5p", "matmul-breakdown-v7x"):
        r = report(name, libtpu)
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


@pytest.mark.parametrize("libtpu", VERSIONS)
def test_buffered_one_single_buffers_that_window_only(libtpu):
    windows = {(a.kind, a.operand_index): a for a in report("matmul-buffered1-v5p", libtpu).allocations}
    assert windows[("input_window", 0)].buffers == 1
    assert windows[("input_window", 0)].size == 2048 * 2048 * 2
    assert windows[("input_window", 1)].buffers == 2
    assert windows[("output_window", 0)].buffers == 2


@pytest.mark.parametrize("libtpu", VERSIONS)
def test_spills_dominate_flash_attention(libtpu):
    r = report("spills-breakdown-v5e", libtpu)
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


@pytest.mark.parametrize("libtpu", VERSIONS)
def test_padding_shows_in_sizes(libtpu):
    """Windows are printed as raw u8 bytes already padded to lanes; scratch keeps its typed shape."""
    rows = report("padded-rows-v5p", libtpu).allocations
    assert all(a.size == 131072 * 128 * 2 * a.buffers for a in rows)  # 100 lanes padded to 128
    windows = {(a.kind, a.operand_index): a for a in report("padded-windows-v6e", libtpu).allocations}
    assert {i for k, i in windows if k == "input_window"} == {0, 1, 2, 3}
    assert any(a.unpadded_size < a.size for a in windows.values())
    scratch = [a for a in report("padded-scratch-v6e", libtpu).allocations if a.kind == "scratch"]
    assert len(scratch) == 4
    for a in scratch:
        assert format_size(a.unpadded_size) == format_size(nbytes(a.window_shape))  # printed rounded
        assert a.unpadded_size <= a.size
        assert a.shape_text.startswith(str(a.window_shape) + "{")
        # libtpu 0.0.32.1 lays a bf16[8, 128] scratch out in T(8,128)(2,1) tiles, unpadded;
        # later ones in (16, 128) tiles, padded to 16 rows
        if versions.key(libtpu) >= (0, 0, 42):
            assert (a.unpadded_size < a.size) == (not tile_aligned(a.window_shape))


@pytest.mark.parametrize("libtpu", VERSIONS)
def test_v7x_keeps_small_inputs_out_of_the_kernel_windows(libtpu):
    windows = [(a.kind, a.operand_index) for a in report("padded-windows-v7x", libtpu).allocations]
    kept = [3] if versions.key(libtpu) >= (0, 0, 42) else [3, 0, 1, 2]  # 0.0.32.1 windows every input
    assert [i for k, i in windows if k == "input_window"] == kept
    assert sorted(i for k, i in windows if k == "output_window") == [0, 1, 2, 3]


@pytest.mark.parametrize("path", files_of("scoped"), ids=ids(files_of("scoped")))
def test_scoped_totals(path):
    text = compiler_text(path)
    r = parse_report(text)
    code = "E1001" if "E1001:" in text else None  # libtpu 0.0.32.1 prints no code
    assert (r.limit_kind, r.error_code, r.memory_space, r.allocations) == ("scoped", code, "vmem", ())
    assert r.used > r.limit
    assert abs(r.used - r.limit - r.exceeded_by) <= sum(map(precision, printed_sizes(r)))
    assert r.op_name.endswith("pallas_call")


@pytest.mark.parametrize("libtpu", VERSIONS)
def test_scoped_default_limits(libtpu):
    assert report("scoped-e1001-v5e", libtpu).limit == 16 * MiB
    assert report("scoped-e1001-v6e", libtpu).limit == 32 * MiB
    assert report("scoped-e1001-v6e", libtpu).used == 2 * 2 * 1024 * 4096 * 4  # in and out, 2 buffers each


PREFIXED = [p for p in files_of("scoped") if "E1001:" in compiler_text(p)]


def test_some_libtpu_prints_e1001_without_its_code():
    assert {p.parent.name for p in files_of("scoped")} - {p.parent.name for p in PREFIXED} == {"0.0.32.1"}


@pytest.mark.parametrize("path", PREFIXED, ids=ids(PREFIXED))
def test_scoped_without_error_code_prefix(path):
    """Older libtpu (0.0.32.1) prints the same text without "E1001: CompileTimeScopedVmemOom:"."""
    text = compiler_text(path)
    old = re.sub(r"E1001: CompileTimeScopedVmemOom:\s*", "", text)
    assert old != text
    r, new = parse_report(old), parse_report(text)
    assert r.form == "scoped" and r.error_code is None
    assert (r.used, r.limit, r.exceeded_by, r.op_name) == (new.used, new.limit, new.exceeded_by, new.op_name)


@pytest.mark.parametrize("path", files_of("single_allocation"), ids=ids(files_of("single_allocation")))
def test_single_allocation(path):
    text = compiler_text(path)
    r = parse_report(text)
    (a,) = r.allocations
    assert r.limit_kind == "physical" and a.size > r.limit and a.size_text is None
    scoped = ", scoped, tag" in text  # libtpu 0.0.32.1 leaves the allocation's type out
    assert r.memory_space == a.memory_space and a.allocation_type == ("scoped" if scoped else None)
    assert a.label and a.tag


@pytest.mark.parametrize("libtpu", VERSIONS)
def test_single_allocation_facts(libtpu):
    (v5e,) = report("single-allocation-v5e", libtpu).allocations
    assert (v5e.kind, v5e.operand_index, v5e.buffers, v5e.size) == ("input_window", 0, 1, 6144 * 6144 * 4)
    assert report("single-allocation-v4", libtpu).limit == 16 * MiB
    (scratch,) = report("scratch-single-allocation-v6e", libtpu).allocations
    assert (scratch.kind, scratch.window_shape, scratch.size) == (
        "scratch",
        Shape("f32", (16384, 4096)),
        16384 * 4096 * 4,
    )


@pytest.mark.parametrize("name", ["smem-prefetch-v5e", "smem-prefetch-v7x", "smem-scratch-v6e"])
@pytest.mark.parametrize("libtpu", VERSIONS)
def test_smem(libtpu, name):
    r = report(name, libtpu)
    (a,) = r.allocations
    assert r.memory_space == a.memory_space == "smem" and r.limit == MiB and a.size == 4 * MiB
    if "prefetch" in name:
        assert (a.kind, a.operand_index) == ("smem_prefetch", 0)
    else:
        assert (a.kind, a.window_shape) == ("scratch", Shape("s32", (1 << 20,)))


@pytest.mark.parametrize("libtpu", VERSIONS)
def test_block_shape_operands(libtpu):
    assert (report("block-shape-v6e", libtpu).operand_kind, report("block-shape-v6e", libtpu).operand_index) == (
        "input",
        0,
    )
    assert (
        report("block-shape-rank-v6e", libtpu).operand_kind,
        report("block-shape-rank-v6e", libtpu).operand_index,
    ) == ("output", 0)
    if form_of("block-shape-mosaic-v6e", libtpu) != "block_shape":
        return  # s8 blocks of 8 rows compile from 0.0.50.1 on: no Mosaic block-shape text
    code = "E2002" if versions.key(libtpu) >= (0, 0, 42) else None  # 0.0.32.1 prints no code
    mosaic = report("block-shape-mosaic-v6e", libtpu)
    # Mosaic counts its windows: "input 0" is in_specs[0], after any scalar-prefetch operands
    assert (mosaic.error_code, mosaic.operand_kind, mosaic.operand_index) == (code, "window_input", 0)
    err = report("err-block-mosaic-v6e", libtpu)
    assert (err.error_code, err.operand_kind, err.operand_index) == (code, "window_input", 0)


@pytest.mark.parametrize("libtpu", VERSIONS)
def test_block_shape_keeps_the_path_jax_names_the_operand_by(libtpu):
    # The path in the call's arguments, as written: the worker matches it to the operand jax
    # gave that name (a pytree argument before it makes args[N] other than operand N).
    assert report("block-shape-v6e", libtpu).operand_path == "args[0]"
    assert report("err-block-rank1-v6e", libtpu).operand_path == "args[0]"
    assert report("block-shape-rank-v6e", libtpu).operand_path == "outputs"
    assert report("block-shape-mosaic-v6e", libtpu).operand_path is None  # Mosaic says "input 0"


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


# Where another libtpu refuses what the reference compiles, or compiles what it refuses.
NEWLY_REFUSED = {"0.0.32.1": {"err-dtype-bf16cmp-v5e": "dtype"}}  # bf16 comparisons on v5e before 0.0.42.1
NEWLY_COMPILED = {  # int8 and bf16 comparisons lower from 0.0.50.1 on, on every chip
    "0.0.50.1": {"err-dtype-cmp-v4", "err-dtype-cmp-v6e", "err-dtype-bf16cmp-v6e", "err-dtype-bf16cmp-v7x"}
}


def expected_kinds(libtpu: str) -> dict[str, str]:
    kept = {name: kind for name, kind in EXPECTED_KIND.items() if name not in NEWLY_COMPILED.get(libtpu, set())}
    return kept | NEWLY_REFUSED.get(libtpu, {})


@pytest.mark.parametrize("libtpu", VERSIONS)
def test_every_captured_compile_error_that_is_no_block_shape_has_its_kind(libtpu):
    failing = {
        p.stem
        for p in reports.files(libtpu)
        if expected_form(p) == "unknown" and p.stem.startswith("err-") and compiler_text(p) != reports.NO_ERROR
    }
    assert failing == set(expected_kinds(libtpu))
    for name, kind in expected_kinds(libtpu).items():
        assert error_kind(report(name, libtpu).text) == kind, name


def test_an_int8_vector_op_the_vpu_refuses_is_a_dtype_error_though_mosaic_says_not_implemented():
    # "Not implemented: Only vector<i16> and vector<i32> are supported, but got 'i8'": the op
    # (here arith.addi) exists; its operands' element type does not, on every chip
    text = report("err-dtype-int8-add-v6e").text
    assert "Not implemented: Only vector<i16> and vector<i32> are supported, but got 'i8'" in text
    assert '"arith.addi"' in text
    assert error_kind(text) == "dtype"


def test_unknown_text_is_kept_whole():
    header = "".join((reports.folder() / "physical-breakdown-v6e.txt").read_text().splitlines(keepends=True)[:3])
    for text in (compiler_text(reports.folder() / "compiles-v6e.txt"), header, ""):
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
    # A cut report never gains allocations: cut at every character of the reference's texts, and
    # every 11th of the other versions' (the same forms; every character there triples the fast tier).
    step = 1 if path.parent.name == REFERENCE else 11
    for i in cut_points(text, step):
        assert len(parse_report(text[:i]).allocations) <= len(full.allocations)


def cut_points(text: str, step: int) -> list[int]:
    """Every `step`th offset of `text` and its end, but inside a serialized kernel only its first,
    middle and last: libtpu 0.0.32.1 prints one in each XLA label, 3.5 KB of base64 that are 73% of
    its texts, and a cut anywhere in one leaves the parser the same thing (a label cut in one opaque
    word) at the cost of a parse of up to 33 KB; every 11th offset in them was half of this test."""
    words = [(m.start() + len('"body":"'), m.end() - 1) for m in reports.SERIALIZED_KERNEL.finditer(text)]
    inside = {i for start, end in words if end - start > 3 for i in range(start + 1, end - 1)}
    kept = {start + k for start, end in words for k in (0, (end - start) // 2, end - start - 1) if end > start}
    return sorted({*(i for i in range(0, len(text), step) if i not in inside), *kept, len(text)})


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
@pytest.mark.parametrize("libtpu", VERSIONS)
def test_what_the_body_allocates_is_scoped_memory_of_the_function(libtpu, name):
    """emit_pipeline's windows and run_scoped's buffers: "scoped memory for
    <jitted function>", a size and nothing more (libtpu 0.0.32.1 adds register spills)."""
    if form_of(name, libtpu) != "physical":
        return  # jax 0.8's emit_pipeline has no Buffered(1)
    r = report(name, libtpu)
    body = [a for a in r.allocations if a.kind != "spill"]
    assert body and all(
        a.kind == "other" and a.tag.startswith("scoped memory for ") and a.window_shape is None for a in body
    )
    assert len(body) < len(r.allocations) if libtpu == "0.0.32.1" else len(body) == len(r.allocations)


# A quick case of each form that this libtpu reports: compiled again here, each must give the text
# captured for this libtpu, so that every folder holds what its own compiler says.
RECAPTURED = ("physical-breakdown-v5p", "scoped-e1001-v5e", "single-allocation-v4", "block-shape-v6e", "err-align-v6e")


@pytest.mark.range
@pytest.mark.compiler  # scripts/capture_reports.py in a process of its own
def test_this_libtpu_still_says_what_was_captured(tmp_path):
    folder = reports.here()
    assert folder.is_dir(), f"no texts captured for this libtpu ({folder.name}): run scripts/capture_reports.py"
    reports.capture(tmp_path, RECAPTURED)
    for name in RECAPTURED:
        now, then = ((where / f"{name}.txt").read_text() for where in (tmp_path, folder))
        assert reports.comparable(now) == reports.comparable(then), name


@pytest.mark.parametrize("libtpu", VERSIONS)
def test_the_primitive_a_lowering_lacks_is_read_in_every_versions_words(libtpu):
    """The worker puts the error on the body line of that primitive: jax 0.8 says "for KernelType.TC"."""
    from vmem_lsp.compile.capture import UNIMPLEMENTED

    found = UNIMPLEMENTED.search(report("err-prim-sort-v6e", libtpu).text)
    assert found and found[1] == "sort"
