"""Fixes, end to end: the CLI rewrites files and the real compiler accepts them."""

from __future__ import annotations

import shutil

import pytest
from support import EXAMPLES, KERNELS
from support.cli import run_cli, run_json
from support.fixes import changed_outside, fixes_for

from vmem_lsp.engine import SourceFiles
from vmem_lsp.fixes.edits import inverse_edits
from vmem_lsp.source.text import apply_edits


def findings(report: dict) -> list[dict]:
    """What a check reports beyond what fits (VMEM007, information): a fixed file has none."""
    return [d for d in report["diagnostics"] if d["code"] != "VMEM007"]


def copy(tmp_path, source):
    target = tmp_path / source.name
    shutil.copy(source, target)
    return target


def test_matmul_fix_compiles_on_v5e(tmp_path):
    path = copy(tmp_path, EXAMPLES / "matmul.py")
    before = path.read_text()
    done = run_cli("check", str(path), "--target", "v5e", "--fix", "--no-cache")
    after = path.read_text()
    assert after != before and "fixed: Shrink blocks" in done.stderr, done.stderr
    # The recheck after the fix compiles nothing: the fix search compiled that kernel already.
    assert "(0 compiled, 1 already compiled by this run, 0 cached" in done.stdout, done.stdout
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    assert len(changed) == 1 and changed[0][0].startswith("# vmem: matmul(")  # only the example's numbers
    # The rewritten file, compiled again from scratch by the real compiler: it fits.
    done, report = run_json("check", str(path), "--target", "v5e", "--no-cache")
    assert done.returncode == 0 and findings(report) == [], report


def test_seed_fix_introduces_a_grid_and_raises_nothing(tmp_path):
    path = copy(tmp_path, EXAMPLES / "copy_whole.py")
    diff = run_cli("check", str(path), "--target", "v6e", "--diff", "--no-cache")
    assert diff.returncode == 1
    assert "+        grid=(n // " in diff.stdout and "lambda i: (i, 0)" in diff.stdout
    assert "vmem_limit_bytes" not in diff.stdout  # v6e's capacity is the limit: nothing to raise
    assert f"--- {path}\n+++ {path}\n" in diff.stdout  # outside the working folder: named as it is
    assert path.read_text() == (EXAMPLES / "copy_whole.py").read_text()  # --diff changes nothing
    run_cli("check", str(path), "--target", "v6e", "--fix", "--no-cache")
    done, report = run_json("check", str(path), "--target", "v6e", "--no-cache")
    assert done.returncode == 0 and findings(report) == [], report


def test_flash_attention_fix_edits_the_example_not_jax(tmp_path):
    import jax.experimental.pallas.ops.tpu.flash_attention as flash

    library_before = open(flash.__file__).read()
    path = copy(tmp_path, KERNELS / "flash_user.py")
    diff = run_cli("check", str(path), "--target", "v5e", "--diff", "--no-cache")
    assert "BlockSizes(block_q=" in diff.stdout
    assert [line for line in diff.stdout.splitlines() if line.startswith("+++")] == ["+++ b/" + path.name] or all(
        line.endswith("flash_user.py") for line in diff.stdout.splitlines() if line.startswith("+++")
    )
    run_cli("check", str(path), "--target", "v5e", "--fix", "--no-cache")
    done, report = run_json("check", str(path), "--target", "v5e", "--no-cache")
    assert done.returncode == 0, report
    assert open(flash.__file__).read() == library_before


@pytest.fixture(scope="module")
def planned_fixes(tmp_path_factory):
    """Every fix offered for every overflowing example, on v5e and v6e."""
    work = tmp_path_factory.mktemp("fixes")
    for name in ("copy_whole.py", "matmul.py"):
        shutil.copy(EXAMPLES / name, work / name)
    sources = SourceFiles()
    return sources, fixes_for(work, ("v5e", "v6e"), work / "cache", sources)


def test_every_fix_round_trips_by_undo_and_touches_only_its_tokens(planned_fixes):
    import ast

    sources, planned = planned_fixes
    offered = [(example, fix) for example, fixes in planned for fix in fixes]
    assert {example.path.rsplit("/", 1)[-1] for example, _ in offered} == {"copy_whole.py", "matmul.py"}
    for _example, fix in offered:
        for path in {e.path for e in fix.edits}:
            before = sources.text(path)
            edits = [e for e in fix.edits if e.path == path]
            after = apply_edits(before, edits)
            ast.parse(after)  # still Python
            assert apply_edits(after, inverse_edits(before, edits)) == before  # undo restores every byte
            assert changed_outside(before, after, edits) == []  # nothing outside the edited tokens


def test_fixes_on_two_chips_are_verified_on_both(planned_fixes):
    _, planned = planned_fixes
    matmul = next(fixes for example, fixes in planned if example.path.endswith("matmul.py"))
    assert matmul and matmul[0].verified and matmul[0].kind == "shrink"
    assert set(matmul[0].estimated_total) == {"v5e", "v6e"}
    kinds = {f.kind for f in matmul}
    assert "raise_limit" in kinds  # 18.36M fits both chips' capacity: raising is offered
    assert all(f.compiles <= 8 for f in matmul)


def test_block_sizes_in_a_dataclass_are_edited_where_they_live(tmp_path):
    path = copy(tmp_path, KERNELS / "dataclass_blocks.py")
    before = path.read_text()
    run_cli("check", str(path), "--target", "v6e", "--fix", "--no-cache")
    changed = [(a, b) for a, b in zip(before.splitlines(), path.read_text().splitlines()) if a != b]
    assert changed == [("    rows: int = 4096", "    rows: int = 1024")]
    done, report = run_json("check", str(path), "--target", "v6e", "--no-cache")
    assert done.returncode == 0 and findings(report) == [], report


def test_raising_the_limit_inserts_compiler_params_that_compile(tmp_path):
    path = copy(tmp_path, KERNELS / "dataclass_blocks.py")
    [(_, fixes)] = fixes_for(path, ("v6e",), tmp_path / "cache")
    [raise_limit] = [f for f in fixes if f.kind == "raise_limit"]
    # 96 MiB of blocks and the compiler's own: 107 MiB leaves 10% of the limit free (no VMEM005 after the fix)
    assert raise_limit.verified and "107 MiB" in raise_limit.title
    path.write_text(apply_edits(path.read_text(), list(raise_limit.edits)))
    text = path.read_text()
    assert "compiler_params=pltpu.CompilerParams(vmem_limit_bytes=107 * 1024 * 1024)" in text
    assert "from jax.experimental.pallas import tpu as pltpu" in text
    done, report = run_json("check", str(path), "--target", "v6e", "--no-cache")
    assert done.returncode == 0 and findings(report) == [], report


def test_fixes_on_a_copy_of_jax_matmul_keep_the_file_intact(tmp_path):
    """jax's own ops/tpu matmul (two-space indents, a PrefetchScalarGridSpec,
    block_shape as a tuple keyword) with an example that overflows v5e."""
    import ast

    import jax.experimental.pallas.ops.tpu.matmul as jax_matmul

    path = tmp_path / "jax_matmul.py"
    path.write_text(
        open(jax_matmul.__file__).read() + "\n# vmem: matmul(bf16[8192, 8192], bf16[8192, 8192], "
        "block_shape=(2048, 2048), block_k=1024)\n"
    )
    [(_, fixes)] = fixes_for(path, ("v5e",), tmp_path / "cache")
    assert fixes and fixes[0].verified, [f.title for f in fixes]
    assert {f.kind for f in fixes} >= {"shrink", "raise_limit"}
    before = path.read_text()
    for fix in fixes:
        edits = list(fix.edits)
        after = apply_edits(before, edits)
        ast.parse(after)
        assert changed_outside(before, after, edits) == []
        assert apply_edits(after, inverse_edits(before, edits)) == before
    path.write_text(apply_edits(before, list(fixes[0].edits)))
    done, report = run_json("check", str(path), "--target", "v5e", "--no-cache")
    assert done.returncode == 0, report


def test_block_sizes_written_in_the_blockspecs_change_with_their_grid(tmp_path):
    path = copy(tmp_path, KERNELS / "literal_blocks.py")
    run_cli("check", str(path), "--target", "v5e", "--fix", "--no-cache")
    text = path.read_text()
    assert "grid=(16, 16, 16)," in text and "pl.BlockSpec((512, 512), lambda i, j, k: (i, k))" in text
    assert "pltpu.VMEM((512, 512), jnp.float32)" in text
    done, report = run_json("check", str(path), "--target", "v5e", "--no-cache")
    assert done.returncode == 0 and findings(report) == [], report


def test_a_fix_keeps_windows_line_ends_and_replaces_the_file_whole(tmp_path):
    """A CRLF file stays CRLF (only the example's numbers change), and the
    write is a rename: no half-written file, the file's mode kept."""
    import stat

    path = tmp_path / "matmul.py"
    original = (EXAMPLES / "matmul.py").read_text().replace("\n", "\r\n")
    path.write_bytes(original.encode())
    path.chmod(0o640)
    inode = path.stat().st_ino
    done = run_cli("check", str(path), "--target", "v5e", "--fix", "--no-cache")
    assert "fixed: Shrink blocks" in done.stderr, done.stderr
    after = path.read_bytes().decode()
    assert after.count("\r\n") == original.count("\r\n") and "\n" not in after.replace("\r\n", "")
    changed = [(a, b) for a, b in zip(original.split("\r\n"), after.split("\r\n")) if a != b]
    assert len(changed) == 1 and changed[0][0].startswith("# vmem: matmul(")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640 and path.stat().st_ino != inode
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".vmem-fix-")] == []


def test_a_file_changed_since_it_was_checked_is_not_fixed(tmp_path):
    """--fix writes over exactly the text it checked, or not at all."""
    from vmem_lsp.cli.fix import write_edits
    from vmem_lsp.source.model import Span, TextEdit

    path = tmp_path / "k.py"
    checked = "BLOCK = 1024\n"
    edit = TextEdit(str(path), Span(1, 8, 1, 12), "512")
    path.write_text("BLOCK = 1024  # edited in the editor meanwhile\n")
    assert "changed on disk" in write_edits(str(path), checked, [edit])
    assert path.read_text() == "BLOCK = 1024  # edited in the editor meanwhile\n"
    path.write_text(checked)
    assert write_edits(str(path), checked, [edit]) is None and path.read_text() == "BLOCK = 512\n"


def test_a_file_that_could_not_be_read_is_neither_diffed_nor_written(tmp_path, capsys):
    """A file whose text the check could not read (not UTF-8) has no text to diff or to compare
    the disk with: --diff and --fix say so and go on, never an internal error."""
    from vmem_lsp.cli.fix import apply_fixes
    from vmem_lsp.engine import SourceFiles
    from vmem_lsp.source.model import Span, TextEdit

    unreadable, fine = tmp_path / "latin1.py", tmp_path / "k.py"
    unreadable.write_bytes(b"# caf\xe9\nBLOCK = 1024\n")
    fine.write_text("BLOCK = 1024\n")
    edits = {
        str(unreadable): [TextEdit(str(unreadable), Span(2, 8, 2, 12), "512")],
        str(fine): [TextEdit(str(fine), Span(1, 8, 1, 12), "512")],
    }
    refused = f"{unreadable.name}: not fixed: it could not be read when it was checked"

    assert apply_fixes(edits, SourceFiles(), write=False) == 1  # --diff
    said = capsys.readouterr()
    assert refused in said.err and "+BLOCK = 512" in said.out and "caf" not in said.out
    assert fine.read_text() == "BLOCK = 1024\n"

    assert apply_fixes(edits, SourceFiles(), write=True) == 1  # --fix
    assert refused in capsys.readouterr().err
    assert fine.read_text() == "BLOCK = 512\n" and unreadable.read_bytes() == b"# caf\xe9\nBLOCK = 1024\n"


def test_a_block_size_passed_positionally_is_named_by_its_parameter(tmp_path):
    """Fix titles read `arg4=512` where the example passed a block
    size by position; the function's own parameter names it."""
    path = tmp_path / "matmul.py"
    path.write_text(
        (EXAMPLES / "matmul.py")
        .read_text()
        .replace("def matmul(x, y, *, bm=512", "def matmul(x, y, bm=512")
        .replace("bf16[8192, 8192], bm=1024, bk=1024, bn=1024)", "bf16[8192, 8192], 1024, 1024, 1024)")
    )
    [(example, fixes)] = fixes_for(path, ("v5e",), tmp_path / "cache")
    best = next(f for f in fixes if f.verified)
    assert "bk=512" in best.title and "arg" not in best.title, best.title
    assert not any("arg" in f.title for f in fixes), [f.title for f in fixes]


def test_a_default_that_other_callers_share_is_set_by_the_example_and_offered_last(tmp_path):
    """`add`'s bm=4096 default is also what `model_step` runs with.
    The first fixes add bm= to the example; editing the default comes after,
    and its title says that it changes a shared default."""
    path = tmp_path / "shared_default.py"
    path.write_text((KERNELS / "shared_default.py").read_text())
    [(example, fixes)] = fixes_for(path, ("v5e",), tmp_path / "cache")
    shrinks = [f for f in fixes if f.kind == "shrink"]
    assert shrinks and "added to the example" in shrinks[0].title and shrinks[0].verified, [f.title for f in fixes]
    first = shrinks[0].edits
    assert all(e.span.start_line == example.line for e in first)
    assert apply_edits(path.read_text(), list(first)).splitlines()[example.line - 1].endswith(", bm=512)")
    shared = [i for i, f in enumerate(shrinks) if "default argument" in f.title]
    assert all("shared default" in shrinks[i].title for i in shared)
    own = [i for i, f in enumerate(shrinks) if "added to the example" in f.title]
    assert not shared or max(own) < min(shared)


def test_knobs_know_what_they_share_and_titles_say_so():
    """Fast, no compiler: a default another function calls with is shared; a
    constant two functions read is shared; the keyword knob edits the example."""
    from vmem_lsp.fixes.knobs import constant_knobs, default_knobs, keyword_knobs
    from vmem_lsp.fixes.search import knob_label
    from vmem_lsp.source.directives import find_examples

    path = str(KERNELS / "shared_default.py")
    text = (KERNELS / "shared_default.py").read_text()
    [example], _ = find_examples(text, path)
    [default] = default_knobs(example, text)
    assert default.name == "bm" and default.shared
    [keyword] = keyword_knobs(example, text)
    assert keyword.where == "keyword" and keyword.span.start_line == example.line and not keyword.shared
    assert "shared default" in knob_label([(default, 512)]) and "shared" not in knob_label([(keyword, 512)])
    alone = text.replace("    return add(x) * 2      # another caller relies on the default\n", "    return x\n")
    assert not default_knobs(example, alone)[0].shared
    constants = "BLOCK = 512\n\ndef f():\n    return BLOCK\n\ndef g():\n    return BLOCK * 2\n"
    [constant] = constant_knobs("c.py", constants)
    assert constant.shared


def test_fixes_that_touch_only_the_example_rank_before_shared_ones():
    """The ranking, with a runner whose every compile fits: a shared variant
    that would leave more room still comes after the example's own."""
    from vmem_lsp.families import family_of
    from vmem_lsp.fixes.search import Problem, Scored, Variant, verified_best
    from vmem_lsp.results import ExampleResult
    from vmem_lsp.source.directives import find_examples

    text = (KERNELS / "shared_default.py").read_text()
    [example], _ = find_examples(text, str(KERNELS / "shared_default.py"))
    problem = Problem(
        example, text, ("v5e",), {}, lambda request: ExampleResult("v5e", None, ()), None, family_of=family_of
    )
    own = Variant((), example.text, text, "own")
    shared = Variant((), example.text, text, "shared", shared=True)
    scored = [Scored(10, shared, {"v5e": (10, 100)}), Scored(50, own, {"v5e": (50, 100)})]
    assert [f.title.split(" ")[0] for f in verified_best(problem, "shrink", scored)] == ["own", "shared"]
