"""A third hardware family, made and registered by the tests alone (support/fake_family.py, issue
40): a target of its own ("fakechip"), a toy compiler that refuses a block over 64 KiB in words of
its own, and its own diagnostics, budgets, fix figures and sweep verdicts. `check`, the language
server (a compile on save, an estimate while typing), a verified fix and `sweep` run on it as on a
TPU chip, with no line of vmem_lsp changed: the family interface is all the core asks."""

from __future__ import annotations

import json
import os

import pytest
from support import ROOT, line_of
from support.cli import run_cli, run_json
from support.lsp_client import Editor, compiler_tier, estimate_tier, running_server, wait_for

from vmem_lsp import families
from vmem_lsp.families import FAMILIES_VARIABLE

KERNEL = """import jax
from jax.experimental import pallas as pl


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


# vmem: copy(f32[1024, 256], block=512)
def copy(x, block=128):
    return pl.pallas_call(
        copy_kernel,
        grid=(x.shape[0] // block,),
        in_specs=[pl.BlockSpec((block, 256), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((block, 256), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x)
"""
TESTS = str(ROOT / "tests")


def fake_environment() -> dict:
    """What a process vmem-lsp starts needs to know the fake family: its module named, tests/ on the path."""
    path = os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH", "")) if p)
    return {FAMILIES_VARIABLE: "support.fake_family:FAMILY", "PYTHONPATH": path}


@pytest.fixture
def project(tmp_path):
    (tmp_path / "fake_copy.py").write_text(KERNEL)
    (tmp_path / "pyproject.toml").write_text('[tool.vmem-lsp]\ntargets = ["fakechip"]\ncache-dir = ".cache"\n')
    return tmp_path


def test_the_registry_takes_a_family_from_outside_the_package():
    from support.fake_family import FAMILY

    families.register(FAMILY)
    try:
        assert families.target_name("FakeChip") == "fakechip"
        assert families.family_of("fakechip") is FAMILY
        assert families.target_label("fakechip") == "Fake Chip"
        assert "fakechip" in families.all_targets() and families.default_targets() == ("v5e", "v6e")
        with pytest.raises(ValueError, match="belong to another family"):
            families.register(_clash())
    finally:
        families.unregister("fake")
    with pytest.raises(ValueError, match="unknown target 'fakechip'"):
        families.family_of("fakechip")


def _clash():
    """A family that claims a TPU chip's name: refused."""
    from support.fake_family import FakeFamily

    class Clash(FakeFamily):
        name = "clash"

        def targets(self):
            return ("v5e",)

    return Clash()


def test_check_puts_the_toy_compilers_refusal_on_the_blockspec_lines(project):
    done, report = run_json("check", "fake_copy.py", "--no-cache", cwd=project, env=fake_environment())
    assert done.returncode == 1, done.stderr
    found = {(d["code"], d["range"]["start_line"]) for d in report["diagnostics"]}
    path = project / "fake_copy.py"
    assert ("VMEM001", line_of(path, "in_specs=[pl.BlockSpec((block, 256)")) in found
    assert ("VMEM001", line_of(path, "out_specs=pl.BlockSpec((block, 256)")) in found
    assert ("VMEM002", line_of(path, "return pl.pallas_call(")) in found
    [window] = [d for d in report["diagnostics"] if d["code"] == "VMEM001" and "input 0" in d["message"]]
    assert window["target"] == "fakechip" and window["facts"]["size"] == 512 * 256 * 4
    assert "input 0 block = 512.0K, over FAKECC's limit; 64.0K a block on Fake Chip" == window["message"]


def test_a_shrink_fix_is_verified_by_the_toy_compiler(project):
    done = run_cli("check", "fake_copy.py", "--diff", "--no-cache", cwd=project, env=fake_environment())
    # block=64 fills the 64 KiB exactly: the fake family has no headroom warning to leave room for
    # (fixes/search.HEADROOM is for families that warn), so the largest block that fits comes first
    said = "would fix: Shrink blocks: block=64 (in the example) (fits: ~64.0K of 64.0K of block memory on Fake Chip"
    assert said in done.stderr and "compiler-verified" in done.stderr, done.stderr
    assert "+# vmem: copy(f32[1024, 256], block=64)" in done.stdout


def test_sweep_finds_the_frontier_on_the_fake_chip(project):
    spec = "fake_copy.py:copy(f32[1024, 256], block=[32, 64, 128, 256])"
    done = run_cli("sweep", spec, "--format", "json", "--no-cache", cwd=project, env=fake_environment())
    assert done.returncode in (0, 1), done.stderr
    configs = json.loads(done.stdout)["configs"]
    assert {c["params"]["block"]: c["fits"] for c in configs} == {32: True, 64: True, 128: False, 256: False}
    assert {c["target"] for c in configs} == {"fakechip"}
    assert {c["decided_by"] for c in configs} <= {"compiler", "monotonicity"}  # no model error measured: compiled


@pytest.mark.asyncio
async def test_the_language_server_shows_the_fake_chip_on_save_and_while_typing(project, monkeypatch):
    for name, value in fake_environment().items():
        monkeypatch.setenv(name, value)  # the server the client starts, and its workers, inherit it
    path = project / "fake_copy.py"
    async with running_server(project) as client:
        editor = Editor(client, path)
        editor.open()
        compiled = await wait_for(
            lambda: [d for d in compiler_tier(editor.diagnostics()) if d.code == "VMEM001"], what="fakechip diagnostics"
        )
        assert {d.range.start.line + 1 for d in compiled} == {
            line_of(path, "in_specs=[pl.BlockSpec((block, 256)"),
            line_of(path, "out_specs=pl.BlockSpec((block, 256)"),
        }
        editor.change(
            editor.text.replace(
                "pl.BlockSpec((block, 256), lambda i: (i, 0))]", "pl.BlockSpec((block // 8, 256), lambda i: (i, 0))]"
            )
        )
        estimated = await wait_for(
            lambda: [d for d in estimate_tier(editor.diagnostics()) if d.code == "VMEM001"], what="an estimate"
        )
        assert [d.range.start.line + 1 for d in estimated] == [line_of(path, "out_specs=pl.BlockSpec((block, 256)")]
        assert "~512.0K" in estimated[0].message and "Fake Chip" in estimated[0].message
