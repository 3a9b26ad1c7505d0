"""Blocks the TPU cannot tile, written as numbers in the BlockSpecs themselves,
through the CLI as a user runs it, with the real
compiler: VMEM030 on the BlockSpec's line, a compiler-verified fix that writes
a legal size where the numbers are and recounts the grid, and a file that
compiles clean once it is applied. One kernel has non-ASCII and astral text
before its numbers: edit columns are code points."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest
from support import KERNELS, line_of
from support.cli import run_cli, run_json

KERNEL = KERNELS / "literal_untileable.py"
TARGETS = "v5e,v6e"
NON_ASCII = '    _ñ = "ß😀𝔘"; spëc = pl.BlockSpec('


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One copy of the kernel: checked, its fixes shown (--diff), fixed (--fix, which checks again)."""
    folder = tmp_path_factory.mktemp("literal_untileable")
    path, cache = folder / KERNEL.name, str(folder / "cache")
    shutil.copy(KERNEL, path)
    done, report = run_json("check", str(path), "--target", TARGETS, "--cache-dir", cache)
    diff = run_cli("check", str(path), "--target", TARGETS, "--diff", "--cache-dir", cache)
    fixed = run_cli("check", str(path), "--target", TARGETS, "--fix", "--cache-dir", cache)
    return SimpleNamespace(path=path, done=done, report=report, diff=diff, fixed=fixed, after=path.read_text())


def expected_after() -> str:
    """The kernel with the legal sizes written where the numbers were, by hand."""
    lines = KERNEL.read_text().splitlines(keepends=True)

    def change(needle: str, old: str, new: str, nth: int = 0) -> None:
        at = line_of(KERNEL, needle, nth) - 1
        assert old in lines[at]
        lines[at] = lines[at].replace(old, new)

    change("grid=(10, 4)", "grid=(10, 4)", "grid=(5, 4)")
    change("in_specs=[pl.BlockSpec((100, 256)", "(100, 256)", "(200, 256)")
    change("out_specs=pl.BlockSpec((100, 256)", "(100, 256)", "(200, 256)")
    change(NON_ASCII, "(100, 256)", "(80, 256)")
    change("x.shape[0] // 100, x.shape[1] // 256", "// 100", "// 80")
    change("pl.BlockSpec((100, 100)", "(100, 100)", "(200, 128)")
    change(
        "x.shape[0] // 100, x.shape[1] // 100",
        "x.shape[0] // 100, x.shape[1] // 100",
        "x.shape[0] // 200, x.shape[1] // 128",
    )
    change("grid=(5, 2)", "grid=(5, 2)", "grid=(1, 2)")
    for nth in (0, 1):
        change("pl.BlockSpec((100, 256), lambda i, j, s: (i, j))", "(100, 256)", "(500, 256)", nth)
    return "".join(lines)


@pytest.mark.parametrize(
    "needle, dtype",
    [
        ("in_specs=[pl.BlockSpec((100, 256)", "f32"),
        (NON_ASCII, "bf16"),
        ("pl.BlockSpec((100, 100)", "f32"),
        ("lambda i, j, s: (i, j))],", "f32"),
    ],
)
def test_an_untileable_literal_is_marked_on_its_blockspec_at_its_code_point_column(run, needle, dtype):
    assert run.done.returncode == 1
    line = line_of(KERNEL, needle)
    [at_spec] = [d for d in run.report["diagnostics"] if d["code"] == "VMEM030" and d["range"]["start_line"] == line]
    text = KERNEL.read_text().splitlines()[line - 1]
    assert text[at_spec["range"]["start_col"] :].startswith("(100, "), (text, at_spec["range"])
    assert f"for {dtype}" in at_spec["message"] and at_spec["message"].endswith("fails on TPU v5e, TPU v6e")


@pytest.mark.parametrize(
    "title",
    [
        "Make the block tile: rows 100 -> 200 in the BlockSpecs (a multiple of 8 for f32)",
        "Make the block tile: rows 100 -> 80 in the BlockSpecs (a multiple of 16 for bf16)",
        "Make the block tile: rows 100 -> 200, lanes 100 -> 128 in the BlockSpecs (a multiple of 8; a multiple of 128 "
        "for f32)",
        "Make the block tile: rows 100 -> 500 in the BlockSpecs (the whole dimension for f32)",
    ],
)
def test_the_nearest_legal_size_is_offered_verified_by_the_compiler(run, title):
    [said] = [line for line in run.diff.stderr.splitlines() if title in line]
    assert ": would fix: " in said and "compiler-verified" in said, run.diff.stderr


def test_the_fix_writes_the_numbers_where_they_are_and_recounts_the_grid(run):
    removed = sorted(line[1:] for line in run.diff.stdout.splitlines() if line.startswith("-") and "---" not in line)
    added = sorted(line[1:] for line in run.diff.stdout.splitlines() if line.startswith("+") and "+++" not in line)
    changed = [(a, b) for a, b in zip(KERNEL.read_text().splitlines(), expected_after().splitlines()) if a != b]
    assert removed == sorted(a for a, _ in changed) and added == sorted(b for _, b in changed), run.diff.stdout


def test_the_fixed_file_compiles_clean_with_only_the_numbers_changed(run):
    assert run.fixed.stderr.count(": fixed: Make the block tile: ") == 4, run.fixed.stderr
    assert run.after == expected_after()
    assert run.fixed.returncode == 0, run.fixed.stdout
    assert run.fixed.stdout.startswith("0 errors in 4 examples"), run.fixed.stdout


def test_the_non_ascii_line_is_edited_at_its_code_points(run):
    [line] = [line for line in run.after.splitlines() if line.startswith(NON_ASCII)]
    assert line == NON_ASCII + "(80, 256), lambda i, j: (i, j))  # ü 𝔘"
