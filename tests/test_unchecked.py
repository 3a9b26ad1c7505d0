"""No silent passes: a pallas_call that no example reaches is
reported, in the CLI run as a subprocess and in the server over stdio."""

from __future__ import annotations

import shutil

import pytest
from lsprotocol import types
from support import EXAMPLES, line_of
from support.cli import run_cli, run_json
from support.jax_ops import OPS
from support.lsp_client import Editor, running_server, wait_for

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
    required = run_cli(
        "check", str(folder), "--target", "v5e", "--require-examples", "--cache-dir", str(tmp_path / "c")
    )
    assert required.returncode == 1 and " error VMEM020 " in required.stdout


def test_a_kernel_an_example_reaches_is_not_reported_nor_are_files_with_examples(tmp_path):
    """matmul.py with its example: nothing new. Without it: one warning, on the pallas_call."""
    done, report = run_json("check", str(EXAMPLES / "matmul.py"), "--target", "v5e", "--cache-dir", str(tmp_path / "c"))
    assert not [d for d in report["diagnostics"] if d["code"] == "VMEM020"]
    assert "not checked" not in report["summary"]
    bare = tmp_path / "matmul.py"
    bare.write_text("".join(l for l in (EXAMPLES / "matmul.py").read_text().splitlines(True) if "# vmem:" not in l))
    done, report = run_json("check", str(bare), "--target", "v5e", "--cache-dir", str(tmp_path / "c"))
    [unchecked] = [d for d in report["diagnostics"] if d["code"] == "VMEM020"]
    assert unchecked["range"]["start_line"] == line_of(bare, "pl.pallas_call(")
    assert unchecked["message"].startswith(
        "pallas_call matmul_kernel (in matmul) is not checked: no example reaches it"
    )


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
        found = await wait_for(
            lambda: [d for d in lone.diagnostics() if d.code == "VMEM020"], what="VMEM020 on a file without examples"
        )
        assert found[0].severity == types.DiagnosticSeverity.Warning
        assert found[0].range.start.line + 1 == line_of(bare, "pl.pallas_call(")
        checked = Editor(client, tmp_path / "matmul.py")
        checked.open()
        await wait_for(lambda: [d for d in checked.diagnostics() if d.code == "VMEM002"], what="the compiled verdict")
        assert not [d for d in checked.diagnostics() if d.code == "VMEM020"]


# ---- an example, one action away -------------------------------------------------------------


def bare_matmul(folder):
    path = folder / "matmul.py"
    path.write_text("".join(l for l in (EXAMPLES / "matmul.py").read_text().splitlines(True) if "# vmem:" not in l))
    return path


TEST_MODULE = """import jax
import jax.numpy as jnp
from matmul import matmul


def test_matmul_runs():
    x = jnp.ones((2048, 1024), jnp.bfloat16)
    y = jax.random.normal(jax.random.PRNGKey(0), (1024, 2048), jnp.bfloat16)
    assert matmul(x, y, bm=1024, bk=1024, bn=1024).shape == (2048, 2048)
"""


def test_a_template_has_placeholders_for_arrays_and_keeps_the_written_defaults(tmp_path):
    from vmem_lsp.source.templates import template_for

    path = bare_matmul(tmp_path)
    text = path.read_text()
    [site] = locate(text, str(path)).sites
    template = template_for(text, str(path), site.span)
    assert template.call == "matmul(f32[...], f32[...], bm=512, bk=512, bn=512)" and template.unfinished
    assert template.line == line_of(path, "def matmul(") - 1  # above its decorator
    found = template_for(text, str(path), site.span, [(str(tmp_path / "tests" / "test_matmul.py"), TEST_MODULE)])
    assert found.call == "matmul(bf16[2048, 1024], bf16[1024, 2048], bm=1024, bk=1024, bn=1024)"
    assert found.found_in == "tests/test_matmul.py:9" and not found.unfinished


def test_add_examples_writes_templates_that_parse_once_and_only_once(tmp_path):
    import ast

    folder = ops_copy(tmp_path)
    first = run_cli("check", str(folder), "--target", "v5e", "--add-examples", "--cache-dir", str(tmp_path / "c"))
    assert first.returncode == 0, first.stderr
    added = [l for l in first.stderr.splitlines() if ": added # vmem: " in l]
    assert len(added) >= 10
    texts = {p: p.read_text() for p in folder.rglob("*.py")}
    directives = [l.split("# vmem: ", 1)[1] for t in texts.values() for l in t.splitlines() if "# vmem: " in l]
    assert len(directives) == len(added)
    for call in directives:
        assert isinstance(ast.parse(call, mode="eval").body, ast.Call), call
    second = run_cli("check", str(folder), "--target", "v5e", "--add-examples", "--cache-dir", str(tmp_path / "c"))
    assert "0 examples added" in second.stderr
    assert {p: p.read_text() for p in folder.rglob("*.py")} == texts
    done, report = run_json("check", str(folder / "matmul.py"), "--target", "v5e", "--cache-dir", str(tmp_path / "c"))
    hints = [d for d in report["diagnostics"] if d["code"] == "VMEM021"]
    assert len(hints) == 1 and hints[0]["severity"] == "information" and done.returncode == 0


NESTED = """
import jax
from jax.experimental import pallas as pl


def outer(x):
    def inner(y):
        return pl.pallas_call(lambda x_ref, o_ref: None, out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype))(y)

    return inner(x)
"""


def test_the_unchecked_kernels_suggestion_calls_what_add_examples_writes(tmp_path):
    """VMEM020 names where the call sits (`in outer.inner`) and suggests the example
    --add-examples then writes (`outer(...)`), for a nested function and for jax's ops."""
    (tmp_path / "nested.py").write_text(NESTED)
    folder = ops_copy(tmp_path)
    (folder / "nested.py").write_text(NESTED)
    _, report = run_json("check", str(folder), "--target", "v5e", "--no-compile", "--cache-dir", str(tmp_path / "c"))
    suggested = {
        (d["abs_path"], d["message"].split("# vmem: ")[1].split("(")[0])
        for d in report["diagnostics"]
        if d["code"] == "VMEM020"
    }
    nested = [d["message"] for d in report["diagnostics"] if d["code"] == "VMEM020" and "nested.py" in d["path"]]
    assert len(nested) == 1 and "(in outer.inner)" in nested[0] and "`# vmem: outer(f32[...], ...)`" in nested[0]
    done = run_cli("check", str(folder), "--target", "v5e", "--add-examples", "--cache-dir", str(tmp_path / "c"))
    added = {
        (
            str((folder / l.split(":")[0]).resolve()) if not l.startswith("/") else l.split(":")[0],
            l.split(": added # vmem: ")[1].split("(")[0],
        )
        for l in done.stderr.splitlines()
        if ": added # vmem: " in l
    }
    assert {name for _, name in added} == {name for _, name in suggested}, (added, suggested)
    assert ({n for p, n in added if p.endswith("nested.py")}) == {"outer"}


def test_shapes_from_the_projects_tests_make_an_example_that_compiles(tmp_path):
    path = bare_matmul(tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_matmul.py").write_text(TEST_MODULE)
    (tmp_path / "pyproject.toml").write_text('[tool.vmem-lsp]\ntargets = ["v5e"]\n')
    added = run_cli("check", str(path), "--add-examples", "--cache-dir", str(tmp_path / "c"), cwd=tmp_path)
    assert "(shapes from tests/test_matmul.py:9)" in added.stderr, added.stderr
    done, report = run_json("check", str(path), "--cache-dir", str(tmp_path / "c"), cwd=tmp_path)
    assert report["summary"].startswith("0 errors in 1 example on v5e (1 compiled"), report["summary"]
    assert not [d for d in report["diagnostics"] if d["code"] in ("VMEM020", "VMEM021", "VMEM010")]


@pytest.mark.asyncio
async def test_the_add_example_action_inserts_a_snippet_where_the_client_takes_one(tmp_path):
    from support.lsp_client import PUSH_CAPABILITIES

    path = bare_matmul(tmp_path)
    capabilities = types.ClientCapabilities(
        text_document=PUSH_CAPABILITIES.text_document,
        workspace=types.WorkspaceClientCapabilities(
            workspace_edit=types.WorkspaceEditClientCapabilities(snippet_edit_support=True)
        ),
    )
    for caps, snippet in ((PUSH_CAPABILITIES, False), (capabilities, True)):
        async with running_server(tmp_path, capabilities=caps) as client:
            editor = Editor(client, path)
            editor.open()
            await wait_for(lambda: [d for d in editor.diagnostics() if d.code == "VMEM020"], what="VMEM020")
            line = line_of(path, "pl.pallas_call(") - 1
            actions = await client.text_document_code_action_async(
                types.CodeActionParams(
                    types.TextDocumentIdentifier(editor.uri),
                    types.Range(types.Position(line, 4), types.Position(line, 4)),
                    types.CodeActionContext(diagnostics=[]),
                )
            )
            [adding] = [a for a in actions if a.title.startswith("Add a # vmem: example")]
            assert adding.title == "Add a # vmem: example: matmul(f32[...], f32[...], bm=512, bk=512, bn=512)"
            if snippet:
                [change] = adding.edit.document_changes
                [edit] = change.edits
                assert edit.snippet.value.startswith("# vmem: matmul(${1:f32[...]}, ${2:f32[...]}, bm=512")
            else:
                [edit] = adding.edit.changes[editor.uri]
                assert edit.new_text == "# vmem: matmul(f32[...], f32[...], bm=512, bk=512, bn=512)\n"
                assert edit.range.start.line == line_of(path, "def matmul(") - 2  # above the decorator
