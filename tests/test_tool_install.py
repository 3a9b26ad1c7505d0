"""vmem-lsp installed as a tool (in its own venv: this one), compiling with the project's
Python: a project whose .venv has jax[tpu] and nothing of vmem-lsp. `check` finds that venv
by itself, reports what an install inside the project reports, and leaves the venv as it
was; an interpreter without jax is a clear error; the server takes the editor's `python`.

The project venv comes from VMEM_TEST_PROJECT_VENV (tests/support/project_env.py)."""

from __future__ import annotations

import venv as venvs
from importlib.metadata import version
from pathlib import Path

import pytest
from lsprotocol import types
from support.cli import run_cli, run_json
from support.lsp_client import Editor, compiler_tier, running_server, wait_for
from support.project_env import installed, project_venv, project_with_examples, without_virtual_env

from vmem_lsp.compile.interpreter import probe

TARGETS = "v5e,v6e,v7x"


def v7x_capacity(libtpu: str | None) -> str:
    """The VMEM the compiler reports for v7x: 63.94M from libtpu 0.0.48 on, 64.00M before."""
    numbers = tuple(int(part) for part in (libtpu or "0").split(".")[:3] if part.isdigit())
    return "63.94M" if numbers >= (0, 0, 48) else "64.00M"


def verdicts(report: dict) -> set[tuple]:
    """(file, line, code, chips) of each diagnostic: what must agree across installs."""
    return {(d["path"], d["range"]["start_line"], d["code"], d["target"]) for d in report["diagnostics"]}


def v7x_messages(report: dict) -> list[str]:
    """Every finding's sentence that states v7x's figures: a message of v7x alone, or, where a
    finding names several chips in brief, v7x's whole sentence in its related information.
    What fits (VMEM007) states the scoped limit, not the chip's VMEM."""
    findings = [d for d in report["diagnostics"] if d["code"] != "VMEM007"]
    said = [t for d in findings for t in (d["message"], *(r["message"] for r in d["related"]))]
    return [t for t in said if "on TPU v7x" in t]


def bare_venv(folder: Path) -> Path:
    """A venv with the standard library only: no jax, no libtpu, no pip."""
    venvs.create(folder, with_pip=False, symlinks=True)
    return folder / "bin" / "python"


def test_check_compiles_in_the_projects_venv_found_by_itself(tmp_path):
    venv = project_venv()
    project_libtpu = (probe(str(venv / "bin" / "python")).packages or {}).get("libtpu")
    tool = project_with_examples(tmp_path / "as-a-tool", venv)
    in_project = project_with_examples(tmp_path / "in-the-project")  # no .venv: this one's jax
    before = installed(venv)
    env = without_virtual_env()

    done, report = run_json(
        "check", "examples/", "--target", TARGETS, "--no-cache", "--verbose", cwd=tool, env=env, inherit=False
    )
    found = f"compiling in {tool / '.venv' / 'bin' / 'python'} (from .venv in the project root)"
    assert found in done.stderr, done.stderr[-3000:]
    assert f"libtpu {project_libtpu}" in done.stderr
    ours, reference = run_json(
        "check", "examples/", "--target", TARGETS, "--no-cache", cwd=in_project, env=env, inherit=False
    )
    assert "compiling in" not in ours.stderr  # vmem-lsp's own Python: the worker as it always was

    assert done.returncode == ours.returncode == 1, (done.stderr[-2000:], ours.stderr[-2000:])
    assert report["diagnostics"], "the examples' overflows"
    assert verdicts(report) == verdicts(reference)
    # Where the two compilers differ, each verdict is its own compiler's: v7x's VMEM.
    assert all(v7x_capacity(project_libtpu) in m for m in v7x_messages(report)), v7x_messages(report)
    assert all(v7x_capacity(version("libtpu")) in m for m in v7x_messages(reference)), v7x_messages(reference)
    assert v7x_messages(report)
    # Nothing was installed in the project's environment.
    assert installed(venv) == before


def test_a_project_venv_without_jax_is_a_clear_error(tmp_path):
    project = project_with_examples(tmp_path / "project")
    python = bare_venv(project / ".venv")
    done = run_cli("check", "examples/", cwd=project, env=without_virtual_env(), inherit=False, timeout=300)
    assert done.returncode == 2, done.stderr
    message = done.stderr.strip().splitlines()[-1]
    assert str(python) in message and ".venv in the project root" in message
    assert "has no jax and no libtpu" in message
    assert f"`{python} -m pip install 'jax[tpu]'`" in message
    assert "Traceback" not in done.stderr


def test_a_configured_python_that_is_not_there_is_named(tmp_path):
    project = project_with_examples(tmp_path / "project")
    done = run_cli("check", "examples/", "--python", "envs/typo", cwd=project, env=without_virtual_env(), inherit=False)
    assert done.returncode == 2, done.stderr
    assert f"the worker's Python from --python, {project / 'envs' / 'typo'}, does not exist" in done.stderr


@pytest.mark.asyncio
async def test_the_server_compiles_in_the_editors_python_and_says_an_unusable_one(tmp_path):
    venv = project_venv()
    project_libtpu = (probe(str(venv / "bin" / "python")).packages or {}).get("libtpu")
    # Not at .venv: only the editor's option (relative to the workspace folder) leads there.
    work = project_with_examples(tmp_path / "work", venv, venv_name="envs/project")
    bare = bare_venv(tmp_path / "bare")
    path = work / "examples" / "copy_whole.py"
    async with running_server(work, options={"python": "envs/project", "targets": ["v7x"]}) as client:
        editor = Editor(client, path)
        editor.open()
        found = await wait_for(
            lambda: [d for d in compiler_tier(editor.diagnostics()) if d.code == "VMEM002"],
            what="the compiler's verdict on v7x",
        )
        assert all(f"of {v7x_capacity(project_libtpu)} VMEM on TPU v7x" in d.message for d in found), found
        assert not [m for m in client.messages if m.type == types.MessageType.Warning]

        # The editor now names a Python without jax: said in a window message, the server goes on.
        client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"vmemLsp": {"python": str(bare), "targets": ["v7x"]}})
        )
        said = await wait_for(
            lambda: [m for m in client.messages if "has no jax and no libtpu" in m.message],
            what="the window message about the unusable interpreter",
        )
        assert str(bare) in said[0].message and "the editor's python setting" in said[0].message
        hover = await client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(editor.uri), types.Position(0, 0))
        )
        assert hover is None or hover.contents is not None  # still answering
