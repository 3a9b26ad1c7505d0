"""Notebooks: the code cells make one module; positions go back to
cells at the edges; --fix edits a cell's source and no other byte."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from support import EXAMPLES
from support.cli import run_cli, run_json
from support.notebooks import write_notebook

from vmem_lsp.source.model import Span, TextEdit
from vmem_lsp.source.notebook import NotebookError, mask_magics, read_notebook

# ---- the module a notebook makes --------------------------------------------------------------


def test_magics_are_masked_line_for_line_and_plain_python_is_left_alone():
    cell = "%timeit f(x)\nfiles = !ls\n  !pip install jax\nf?\nx = 1"
    assert mask_magics(cell) == "pass\nfiles = None\n  pass\npass\nx = 1"
    assert mask_magics("%%capture\nprint(1)") == "#%%capture\n#print(1)"
    doc = 'def f():\n    """\n!not a shell line\n    """'
    assert mask_magics(doc) == doc


def test_cells_join_in_order_and_positions_go_back_to_their_cell(tmp_path):
    where = write_notebook([EXAMPLES / "copy_whole.py"], tmp_path / "nb.ipynb")
    notebook = read_notebook((tmp_path / "nb.ipynb").read_text(), str(tmp_path / "nb.ipynb"))
    source = (EXAMPLES / "copy_whole.py").read_text().splitlines()
    module = notebook.module.splitlines()
    compile(notebook.module, "nb", "exec")
    for (_name, line), (cell, in_cell) in where.items():
        found = [
            n
            for n in range(1, len(module) + 1)
            if (p := notebook.cell_position(n, 0)) and (p.cell + 1, p.line) == (cell, in_cell)
        ]
        assert len(found) == 1 and module[found[0] - 1] == source[line - 1]


def test_a_position_in_the_file_is_inside_the_json_string_of_that_line(tmp_path):
    path = tmp_path / "nb.ipynb"
    write_notebook([EXAMPLES / "copy_whole.py"], path)
    raw = path.read_text()
    notebook = read_notebook(raw, str(path))
    module = notebook.module.splitlines()
    target = next(n for n, text in enumerate(module, 1) if "in_specs=" in text)
    col = module[target - 1].index("(n, m)")
    line, raw_col = notebook.file_position(target, col)
    assert raw.splitlines()[line - 1][raw_col:].startswith("(n, m), lambda")


@pytest.mark.parametrize(
    "text, says",
    [
        ('{"cells": [', "not valid JSON"),
        ("[]", "not an object"),
        ('{"nbformat": 3, "worksheets": []}', "nbformat 3"),
        ('{"nbformat": 4, "metadata": {}}', "no list of cells"),
    ],
)
def test_a_file_that_is_not_a_notebook_says_why(text, says):
    with pytest.raises(NotebookError, match=says):
        read_notebook(text, "bad.ipynb")


def test_a_source_written_as_one_string_is_read_and_edited_as_one(tmp_path):
    document = {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "outputs": [],
                "execution_count": None,
                "source": "x = (10, 20)  # «é»\ny = 2\n",
            }
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    raw = json.dumps(document, indent=2)  # no trailing newline, two-space indent
    notebook = read_notebook(raw, "one.ipynb")
    assert notebook.module == "x = (10, 20)  # «é»\ny = 2\n"
    after = notebook.apply_edits([TextEdit("one.ipynb", Span(1, 5, 1, 7), "30")])
    assert json.loads(after)["cells"][0]["source"] == "x = (30, 20)  # «é»\ny = 2\n"
    assert after.replace('"x = (30', '"x = (10') == raw


def test_an_edit_on_a_masked_magic_is_refused(tmp_path):
    path = tmp_path / "nb.ipynb"
    write_notebook([EXAMPLES / "copy_whole.py"], path)
    notebook = read_notebook(path.read_text(), str(path))
    with pytest.raises(NotebookError, match="magic"):
        notebook.apply_edits([TextEdit(str(path), Span(1, 0, 1, 4), "x")])


# ---- the CLI ----------------------------------------------------------------------------------


def cell_text(report_path: str, where: dict, name: str):
    """Replace `examples/NAME.py:LINE` in a .py message by where that line went in the
    notebook, and `(line N)` (a line of the message's own file, `of`) by `(cell C:L)`."""

    def swap(match):
        cell, line = where[(Path(match.group(1)).name, int(match.group(2)))]
        return f"{report_path}:cell {cell}:{line}"

    def same_file(of: str):
        def swap_line(match):
            cell, line = where[(of, int(match.group(1)))]
            return f"(cell {cell}:{line})"

        return swap_line

    return lambda message, of=None: re.sub(r"\(line (\d+)\)", same_file(of), re.sub(r"(\S+\.py):(\d+)", swap, message))


def test_the_examples_split_across_cells_give_the_diagnostics_of_the_py_files(tmp_path, examples_check, cache_dir):
    """A notebook gets the diagnostics of its .py files, on the right cells and lines."""
    files = sorted(EXAMPLES.glob("*.py"))
    where = write_notebook(files, tmp_path / "nb.ipynb")
    done, report = run_json("check", "nb.ipynb", "--target", "v5e,v6e", "--cache-dir", str(cache_dir), cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    _, expected_report = examples_check
    swap = cell_text("nb.ipynb", where, "nb.ipynb")

    def key(d, cell, start, end):
        return (d["code"], d["severity"], d["target"], cell, start, d["range"]["start_col"], end, d["range"]["end_col"])

    expected = set()
    for d in expected_report["diagnostics"]:
        if d["code"] == "VMEM020":
            continue
        name = Path(d["path"]).name
        cell, start = where[(name, d["range"]["start_line"])]
        _, end = where[(name, d["range"]["end_line"])]
        expected.add(key(d, cell, start, end) + (swap(d["message"], name),))
    found = {
        key(d, d["cell"], d["range"]["start_line"], d["range"]["end_line"]) + (d["message"],)
        for d in report["diagnostics"]
    }
    assert found == expected
    assert any(code == "VMEM001" for code, *_ in found)


def test_text_sarif_and_github_name_the_cell_or_the_file_line(tmp_path, cache_dir):
    path = tmp_path / "nb.ipynb"
    where = write_notebook([EXAMPLES / "copy_whole.py"], path)
    in_specs = next(
        n for n, t in enumerate((EXAMPLES / "copy_whole.py").read_text().splitlines(), 1) if "in_specs=" in t
    )
    cell, line = where[("copy_whole.py", in_specs)]
    common = ("check", "nb.ipynb", "--target", "v6e", "--cache-dir", str(cache_dir))
    text = run_cli(*common, cwd=tmp_path).stdout
    assert f"nb.ipynb:cell {cell}:{line}:32: error VMEM001 input 0 window" in text
    sarif = json.loads(run_cli(*common, "--format", "sarif", cwd=tmp_path).stdout)
    result = next(r for r in sarif["runs"][0]["results"] if r["message"]["text"].startswith("input 0"))
    assert result["properties"]["cell"] == cell
    location = result["locations"][0]
    assert location["properties"]["cellRegion"]["startLine"] == line
    region = location["physicalLocation"]["region"]
    raw_line = path.read_text().splitlines()[region["startLine"] - 1]
    assert raw_line[region["startColumn"] - 1 :].startswith("(n, m)")
    github = run_cli(*common, "--format", "github", cwd=tmp_path).stdout
    assert f"::error file=nb.ipynb,line={region['startLine']},col={region['startColumn']}," in github


def test_fix_edits_only_the_cell_it_fixes_and_keeps_every_other_byte(tmp_path, cache_dir):
    path = tmp_path / "nb.ipynb"
    where = write_notebook([EXAMPLES / "copy_whole.py"], path)
    before = path.read_text()
    diff = run_cli("check", "nb.ipynb", "--target", "v6e", "--cache-dir", str(cache_dir), "--diff", cwd=tmp_path)
    cell = where[("copy_whole.py", 13)][0]
    assert f"--- a/nb.ipynb:cell {cell}\n" in diff.stdout and "+        grid=" in diff.stdout, diff.stderr
    assert path.read_text() == before
    done = run_cli("check", "nb.ipynb", "--target", "v6e", "--cache-dir", str(cache_dir), "--fix", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    after = path.read_text()
    old, new = json.loads(before), json.loads(after)
    changed = [i for i, (a, b) in enumerate(zip(old["cells"], new["cells"])) if a != b]
    assert changed == [cell - 1]
    assert {k: v for k, v in old["cells"][cell - 1].items() if k != "source"} == {
        k: v for k, v in new["cells"][cell - 1].items() if k != "source"
    }
    # Byte for byte outside that cell's source: the same head and tail.
    notebook = read_notebook(before, str(path))
    node = next(c.node for c in notebook.cells if c.index == cell - 1)
    tail = len(before) - node.end
    assert after[: node.start] == before[: node.start] and after[len(after) - tail :] == before[node.end :]


def test_fix_on_a_notebook_vscode_wrote_changes_only_the_fixed_cells_source(tmp_path, cache_dir):
    """`--fix` on a notebook written by VS Code's own serializer.

    tests/data/notebooks/ holds what the VS Code UI test saved, copied out by the project's own
    script, never typed by hand:

        VMEM_UI_CAPTURE=tests/data/notebooks bash editors/vscode/test/ui/run.sh

    run.sh writes copy_whole.py cut into cells (tests/notebooks.py), e2e.js opens it in VS Code's
    notebook editor (code-server), and after each save by Ctrl+S copies the file VS Code wrote:
    vscode-written.ipynb after an edit of the imports cell that keeps the kernel overflowing, and
    vscode-fixed.ipynb after the quick fix picked in the kernel's cell (Ctrl+. on its BlockSpec
    line: the first "Split the array into blocks of ... rows with a grid ... compiler-verified").
    Capture them again that way when the UI test's notebook or the preferred fix changes."""
    captured = Path(__file__).parent / "data" / "notebooks"
    written = (captured / "vscode-written.ipynb").read_bytes()
    path = tmp_path / "nb.ipynb"
    path.write_bytes(written)
    before = written.decode()
    kernel = next(c for c in read_notebook(before, str(path)).cells if "pallas_call" in c.source)
    done = run_cli("check", "nb.ipynb", "--target", "v6e", "--cache-dir", str(cache_dir), "--fix", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"nb.ipynb:cell {kernel.index + 1}:1: fixed: Split the array" in done.stdout + done.stderr
    after = path.read_bytes().decode()
    old, new = json.loads(before), json.loads(after)
    assert [i for i, (a, b) in enumerate(zip(old["cells"], new["cells"], strict=True)) if a != b] == [kernel.index]
    assert {k: v for k, v in old["cells"][kernel.index].items() if k != "source"} == {
        k: v for k, v in new["cells"][kernel.index].items() if k != "source"
    }
    assert "grid=" in "".join(new["cells"][kernel.index]["source"])
    # Byte for byte outside that cell's source: VS Code's indentation, key order, the non-ASCII
    # Markdown and its trailing newline.
    tail = len(before) - kernel.node.end
    assert after[: kernel.node.start] == before[: kernel.node.start]
    assert after[len(after) - tail :] == before[kernel.node.end :]
    # And the whole file is what VS Code itself wrote after the same fix from the cell.
    assert path.read_bytes() == (captured / "vscode-fixed.ipynb").read_bytes(), (
        "the CLI's fix differs from the quick fix VS Code saved: capture the notebooks again (see above)"
    )


@pytest.mark.parametrize("text", ['{"cells": [{"cell_type": "code", "sour', '{"nbformat": 3, "worksheets": []}'])
def test_a_broken_notebook_gets_a_clear_error_on_the_file_and_no_traceback(tmp_path, text):
    (tmp_path / "bad.ipynb").write_text(text)
    shutil.copy(EXAMPLES / "add_fits.py", tmp_path)
    done, report = run_json("check", ".", "--target", "v6e", "--no-compile", cwd=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    bad = [d for d in report["diagnostics"] if d["path"] == "bad.ipynb"]
    assert [d["code"] for d in bad] == ["VMEM010"]
    assert "not valid JSON" in bad[0]["message"] or "nbformat 3" in bad[0]["message"]
