"""No silent passes (issue 16): a pallas_call that no example reaches is
reported, in the CLI run as a subprocess and in the server over stdio."""
from __future__ import annotations

import shutil

import pytest
from lsprotocol import types

from conftest import EXAMPLES, line_of, run_cli, run_json
from jax_ops import OPS
from lsp_client import Editor, running_server, wait_for
from vmem_lsp.source.locate import locate


def ops_copy(tmp_path):
    """jax's ops/tpu folder with no examples, as a new user's repository."""
    folder = tmp_path / "ops"
    shutil.copytree(OPS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def located_sites(folder) -> set[tuple[str, int]]:
    found = set()
    for path in folder.rglob("*.py"):
        for site in locate(path.read_text(), str(path)).sites:
            found.add((str(path), site.name_span.start_line))
    return found


def test_every_pallas_call_of_a_folder_without_examples_is_reported_once(tmp_path):
    folder = ops_copy(tmp_path)
    done, report = run_json("check", str(folder), "--target", "v5e", "--cache-dir", str(tmp_path / "c"))
    assert done.returncode == 0, done.stderr
    unchecked = [d for d in report["diagnostics"] if d["code"] == "VMEM020"]
    assert all(d["severity"] == "warning" for d in unchecked)
    where = [(d["abs_path"], d["range"]["start_line"]) for d in unchecked]
    assert len(where) == len(set(where))
    assert set(where) == located_sites(folder) and len(where) > 10
    assert report["summary"].endswith(f"; {len(where)} kernels not checked")
    required = run_cli("check", str(folder), "--target", "v5e", "--require-examples",
                       "--cache-dir", str(tmp_path / "c"))
    assert required.returncode == 1 and " error VMEM020 " in required.stdout


def test_a_kernel_an_example_reaches_is_not_reported_nor_are_files_with_examples(tmp_path):
    """matmul.py with its example: nothing new. Without it: one warning, on the pallas_call."""
    done, report = run_json("check", str(EXAMPLES / "matmul.py"), "--target", "v5e",
                            "--cache-dir", str(tmp_path / "c"))
    assert not [d for d in report["diagnostics"] if d["code"] == "VMEM020"]
    assert "not checked" not in report["summary"]
    bare = tmp_path / "matmul.py"
    bare.write_text("".join(l for l in (EXAMPLES / "matmul.py").read_text().splitlines(True) if "# vmem:" not in l))
    done, report = run_json("check", str(bare), "--target", "v5e", "--cache-dir", str(tmp_path / "c"))
    [unchecked] = [d for d in report["diagnostics"] if d["code"] == "VMEM020"]
    assert unchecked["range"]["start_line"] == line_of(bare, "pl.pallas_call(")
    assert unchecked["message"].startswith("pallas_call matmul_kernel (in matmul) is not checked: no example reaches it")


def test_pyproject_require_examples_makes_it_an_error(tmp_path):
    bare = tmp_path / "matmul.py"
    bare.write_text("".join(l for l in (EXAMPLES / "matmul.py").read_text().splitlines(True) if "# vmem:" not in l))
    (tmp_path / "pyproject.toml").write_text('[tool.vmem-lsp]\nrequire-examples = true\ntargets = ["v5e"]\n')
    done = run_cli("check", str(bare), "--cache-dir", str(tmp_path / "c"), cwd=tmp_path)
    assert done.returncode == 1 and " error VMEM020 " in done.stdout, done.stdout + done.stderr


@pytest.mark.asyncio
async def test_the_editor_shows_an_unchecked_kernel_and_not_one_an_example_reaches(tmp_path):
    shutil.copy(EXAMPLES / "matmul.py", tmp_path / "matmul.py")
    bare = tmp_path / "bare.py"
    bare.write_text("".join(l for l in (EXAMPLES / "matmul.py").read_text().splitlines(True) if "# vmem:" not in l))
    (tmp_path / "pyproject.toml").write_text('[tool.vmem-lsp]\ntargets = ["v5e"]\n')
    async with running_server(tmp_path) as client:
        lone = Editor(client, bare)
        lone.open()
        found = await wait_for(lambda: [d for d in lone.diagnostics() if d.code == "VMEM020"],
                               what="VMEM020 on a file without examples")
        assert found[0].severity == types.DiagnosticSeverity.Warning
        assert found[0].range.start.line + 1 == line_of(bare, "pl.pallas_call(")
        checked = Editor(client, tmp_path / "matmul.py")
        checked.open()
        await wait_for(lambda: [d for d in checked.diagnostics() if d.code == "VMEM002"], what="the compiled verdict")
        assert not [d for d in checked.diagnostics() if d.code == "VMEM020"]
