"""Compile errors other than VMEM overflows on the line that causes them
(issue 17), through the CLI as a user runs it, with the real compiler."""
from __future__ import annotations

import shutil

import pytest

from conftest import KERNELS, line_of, run_cli, run_json

UNTILEABLE = KERNELS / "untileable.py"


def test_an_untileable_block_is_marked_on_its_blockspec_and_fixed_by_a_verified_legal_size(tmp_path):
    path = tmp_path / "untileable.py"
    shutil.copy(UNTILEABLE, path)
    done, report = run_json("check", str(path), "--target", "v5e,v6e", "--cache-dir", str(tmp_path / "c"))
    assert done.returncode == 1
    [at_spec] = [d for d in report["diagnostics"] if d["code"] == "VMEM030"
                 and d["range"]["start_line"] == line_of(path, "pl.BlockSpec((b, b)")]
    text = path.read_text().splitlines()[at_spec["range"]["start_line"] - 1]
    assert text[at_spec["range"]["start_col"]:].startswith("(b, b)")
    assert "(8, 128) for f32" in at_spec["message"] and at_spec["message"].endswith("fails on TPU v5e, TPU v6e")
    assert len([d for d in report["diagnostics"] if d["code"] == "VMEM030"]) == 2      # the spec and the directive
    fixed = run_cli("check", str(path), "--target", "v5e,v6e", "--fix", "--cache-dir", str(tmp_path / "c"))
    assert "fixed: Make the block tile: b=1000 (the whole dimension for f32)" in fixed.stderr, fixed.stderr
    assert fixed.returncode == 0, fixed.stdout
    assert path.read_text().rstrip().endswith("# vmem: add(f32[1000, 1000], f32[1000, 1000], b=1000)")


ERRORS = KERNELS / "compile_errors.py"
# (the code's line: text that starts it, its code, what the message says) per kind; see tests/data/reports/ERRORS.md
LANDS = [
    ("spec = pl.BlockSpec((100, 100)", "VMEM030", "(8, 128) for f32"),                   # block-jax
    ("spec = pl.BlockSpec((100,)", "VMEM030", "a rank-1 block must be"),                 # block-rank1
    ("spec = pl.BlockSpec((8, 256)", "VMEM030", "(32, 128) for s8"),                     # block-mosaic
    ("x_ref[:, pl.ds(start", "VMEM030", "cannot statically prove"),                      # align (E2003)
    ("jnp.sort(", "VMEM031", "Unimplemented primitive in Pallas TPU lowering for tc: sort"),
    (".reshape(", "VMEM031", "unsupported shape cast"),                                  # prim-mosaic
]


def test_each_kind_of_compile_error_lands_on_its_line_with_the_chips_it_fails_and_compiles_on(tmp_path):
    done, report = run_json("check", str(ERRORS), "--target", "v4,v6e", "--cache-dir", str(tmp_path / "c"))
    assert done.returncode == 1
    diagnostics = [d for d in report["diagnostics"] if d["code"] in
                   ("VMEM011", "VMEM030", "VMEM031", "VMEM032", "VMEM033", "VMEM034")]
    lines = ERRORS.read_text().splitlines()
    text_at = lambda d: lines[d["range"]["start_line"] - 1]
    directives = {i + 1 for i, l in enumerate(lines) if l.startswith("# vmem:")}
    calls = {i + 1 for i, l in enumerate(lines) if "pl.pallas_call(" in l}
    placed = [d for d in diagnostics if d["range"]["start_line"] not in directives]
    on_cause = [d for d in placed if d["range"]["start_line"] not in calls]
    assert len(on_cause) / len(placed) >= 0.95, [(d["range"]["start_line"], d["message"][:80]) for d in placed]
    for needle, code, says in LANDS:
        assert any(needle in text_at(d) and d["code"] == code and says in d["message"] for d in placed), needle
    [int8] = [d for d in placed if "Unsupported matmul RHS type" in d["message"] and "i8" in d["message"]]
    assert "fails on TPU v4; compiles on TPU v6e" in int8["message"]
    [mask] = [d for d in placed if "Invalid relayout" in d["message"]]
    assert mask["message"].endswith("fails on TPU v6e; compiles on TPU v4")
    assert all("\n" not in d["message"] for d in placed if d["code"] != "VMEM011")       # the key line; whole below
    kinds = {d["code"] for d in placed}
    assert {"VMEM030", "VMEM031", "VMEM032", "VMEM033"} <= kinds, kinds
    [smem] = [d for d in placed if d["code"] == "VMEM033" and d["range"]["start_line"] not in directives]
    assert "Can only load scalars from SMEM" in smem["message"]
    # The compiler's whole text, per chip, is in the related information and the facts.
    assert all(any(r["message"].startswith("TPU v") for r in d["related"]) for d in placed
               if d["code"] in ("VMEM031", "VMEM032", "VMEM033", "VMEM034"))


@pytest.mark.asyncio
async def test_the_editor_marks_the_blockspec_and_offers_the_verified_legal_size(tmp_path):
    from lsprotocol import types
    from lsp_client import Editor, running_server, wait_for
    path = tmp_path / "untileable.py"
    shutil.copy(UNTILEABLE, path)
    (tmp_path / "pyproject.toml").write_text('[tool.vmem-lsp]\ntargets = ["v5e"]\n')
    async with running_server(tmp_path) as client:
        editor = Editor(client, path)
        editor.open()
        [at_spec] = await wait_for(lambda: [d for d in editor.diagnostics() if d.code == "VMEM030"
                                            and d.range.start.line + 1 == line_of(path, "pl.BlockSpec((b, b)")],
                                   what="VMEM030 on the BlockSpec")
        actions = await client.text_document_code_action_async(types.CodeActionParams(
            types.TextDocumentIdentifier(editor.uri), at_spec.range, types.CodeActionContext(diagnostics=[at_spec])))
        best = next(a for a in actions if a.is_preferred)
        assert best.title.startswith("Make the block tile: b=1000") and "compiler-verified" in best.title
        [edit] = best.edit.changes[editor.uri]
        assert edit.new_text == ", b=1000"
