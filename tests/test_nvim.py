"""Neovim (Debian's package), headless: the built-in LSP client with our Lua
set-up, and the nvim-lint definition's command and parser."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from support import EXAMPLES, ROOT, line_of

NVIM = shutil.which("nvim")
pytestmark = [
    pytest.mark.editor,
    pytest.mark.skipif(
        NVIM is None and not os.environ.get("VMEM_REQUIRE_TOOLS"),
        reason="Neovim is not installed (apt-get install neovim)",
    ),
]


def run_nvim(script: str, tmp_path, **env) -> dict:
    if NVIM is None:
        pytest.fail("VMEM_REQUIRE_TOOLS is set but nvim is not installed")
    result = tmp_path / "result.json"
    command = [
        NVIM,
        "--headless",
        "-u",
        "NONE",
        "-i",
        "NONE",
        "--cmd",
        f"set rtp+={ROOT / 'editors' / 'nvim'}",
        "-c",
        "filetype on",
        "-c",
        f"luafile {ROOT / 'tests' / 'nvim' / script}",
    ]
    done = subprocess.run(
        command,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "VMEM_RESULT": str(result), **env},
    )
    assert result.exists(), f"nvim wrote no result: {done.stdout[-2000:]} {done.stderr[-2000:]}"
    return json.loads(result.read_text())


def workspace(tmp_path, percent: bool = False):
    """copy_whole.py; with `percent`, as jupytext pairs a notebook with it (the
    percent format: `# %%` starts a cell), line for line, so that the Lua
    script's positions hold. That is how Neovim users edit notebooks."""
    (tmp_path / "pyproject.toml").write_text('[tool.vmem-lsp]\ntargets = ["v6e"]\ncache-dir = ".cache"\n')
    path = tmp_path / "copy_whole.py"
    shutil.copy(EXAMPLES / "copy_whole.py", path)
    if percent:
        lines = path.read_text().split("\n")
        assert lines[2].endswith('"""') and lines[6] == lines[10] == ""
        lines[0:3] = ["# %% [markdown]", "# A copy kernel that takes the whole array in one step.", "# %%"]
        lines[6] = lines[10] = "# %%"
        path.write_text("\n".join(lines))
    return path


@pytest.mark.parametrize("percent", [False, True], ids=["file", "jupytext-percent"])
def test_neovim_lsp_client_shows_the_errors_and_applies_the_fix(tmp_path, percent):
    path = workspace(tmp_path, percent)
    expected = {
        (line_of(path, "in_specs="), "VMEM001"),
        (line_of(path, "out_specs="), "VMEM001"),
        (line_of(path, "pl.pallas_call("), "VMEM002"),
    }
    seen = run_nvim("lsp_test.lua", tmp_path, VMEM_PYTHON=sys.executable, VMEM_FILE=str(path))
    assert seen["failure"] is None, seen
    assert expected <= {(d["line"], d["code"]) for d in seen["diagnostics"]}
    assert seen["actions"][0].startswith("Split the array into blocks of")
    assert "grid=(n // " in path.read_text() and "lambda i: (i, 0)" in path.read_text()


def test_nvim_lint_definition_runs_the_check_and_parses_it(tmp_path):
    path = workspace(tmp_path)
    exe = str(ROOT / ".venv" / "bin" / "vmem-lsp") if (ROOT / ".venv" / "bin" / "vmem-lsp").exists() else "vmem-lsp"
    seen = run_nvim("lint_test.lua", tmp_path, VMEM_FILE=str(path), VMEM_EXE=exe)
    assert seen["exit"] == 1
    items = {(i["lnum"] + 1, i["code"]) for i in seen["items"]}
    assert {(line_of(path, "in_specs="), "VMEM001"), (line_of(path, "pl.pallas_call("), "VMEM002")} <= items
    assert all(i["source"] == "vmem-lsp" for i in seen["items"])
