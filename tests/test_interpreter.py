"""Which Python the local worker runs in, found as editors find it: the configured one
(pyproject's python, --python, the editor's option), else VIRTUAL_ENV, else a .venv in
the project root, else vmem-lsp's own. Folders on disk, nothing started: what the
interpreter is found to be, never what it says (tests/test_tool_install.py runs them)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from vmem_lsp.compile.backend import BackendError, local_interpreter
from vmem_lsp.compile.interpreter import BOOTSTRAP, Interpreter, PythonNotFound, find_python, worker_command
from vmem_lsp.config import Settings
from vmem_lsp.server.options import Options, options_from
from vmem_lsp.server.trusting import project_python


def venv(folder: Path) -> Path:
    """A folder shaped as a virtual environment: bin/python, executable (never run here)."""
    python = folder / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    (folder / "pyvenv.cfg").write_text("home = /usr/bin\n")
    return python


def test_a_configured_venv_folder_means_its_python(tmp_path):
    python = venv(tmp_path / "envs" / "jax")
    found = find_python(str(tmp_path / "envs" / "jax"), "--python", str(tmp_path), environ={})
    assert found == Interpreter(str(python), "--python")
    assert not found.own


def test_a_relative_path_is_the_project_roots(tmp_path):
    python = venv(tmp_path / "project" / "envs" / "a")
    found = find_python("envs/a/bin/python", "pyproject.toml", str(tmp_path / "project"), environ={})
    assert found.path == str(python)
    # The folder form, relative too, and with a `..` that stays inside the path it names.
    assert find_python("envs/a", "pyproject.toml", str(tmp_path / "project"), environ={}).path == str(python)
    assert find_python("../project/envs/a", "x", str(tmp_path / "project"), environ={}).path == str(python)


def test_a_missing_path_is_a_clear_error_naming_it(tmp_path):
    with pytest.raises(PythonNotFound) as raised:
        find_python("envs/typo/bin/python", "pyproject.toml", str(tmp_path), environ={})
    message = str(raised.value)
    assert str(tmp_path / "envs" / "typo" / "bin" / "python") in message
    assert "pyproject.toml" in message and "does not exist" in message
    # Never silently vmem-lsp's own Python, nor the project's .venv, instead.
    venv(tmp_path / ".venv")
    with pytest.raises(PythonNotFound):
        find_python("nope", "--python", str(tmp_path), environ={})


def test_a_folder_that_is_no_venv_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(PythonNotFound, match=r"empty, is a folder without bin/python"):
        find_python("empty", "the editor's python setting", str(tmp_path), environ={})


def test_the_order_configured_then_virtual_env_then_dot_venv_then_own(tmp_path):
    configured = venv(tmp_path / "configured")
    active = venv(tmp_path / "active")
    dot_venv = venv(tmp_path / "project" / ".venv")
    root = str(tmp_path / "project")
    environ = {"VIRTUAL_ENV": str(tmp_path / "active")}
    assert find_python(str(configured), "--python", root, environ).path == str(configured)
    assert find_python(None, None, root, environ) == Interpreter(str(active), "VIRTUAL_ENV")
    assert find_python(None, None, root, {}) == Interpreter(str(dot_venv), ".venv in the project root")
    # A VIRTUAL_ENV that is no venv (removed since it was activated) is passed over.
    assert find_python(None, None, root, {"VIRTUAL_ENV": str(tmp_path / "gone")}).path == str(dot_venv)
    own = find_python(None, None, str(tmp_path / "elsewhere"), {})
    assert own.path == sys.executable and own.own


def test_own_python_runs_the_installed_worker_another_loads_the_package_folder(tmp_path):
    assert worker_command(Interpreter(sys.executable, "vmem-lsp's own")) == [sys.executable, "-m", "vmem_lsp", "worker"]
    other = str(venv(tmp_path / "project"))
    command = worker_command(Interpreter(other, "--python"))
    assert command[:3] == [other, "-c", BOOTSTRAP] and command[-1] == "worker"
    assert os.path.isfile(os.path.join(command[3], "compile", "worker_server.py"))


def test_the_backend_says_a_missing_python_as_a_backend_error(tmp_path):
    settings = Settings(python="nope/bin/python", python_source="pyproject.toml", root=str(tmp_path))
    with pytest.raises(BackendError, match="nope/bin/python, does not exist"):
        local_interpreter(settings)


def test_the_editors_python_is_the_workspace_folders_and_reaches_the_settings(tmp_path):
    python = venv(tmp_path / "workspace" / ".venv-jax")
    options, problems = options_from({"vmemLsp": {"python": ".venv-jax"}}, folder=str(tmp_path / "workspace"))
    assert problems == [] and options.python == str(tmp_path / "workspace" / ".venv-jax")
    # The project's pyproject sits deeper, with a python of its own: the editor's wins.
    project = tmp_path / "workspace" / "pkg"
    project.mkdir()
    (project / "pyproject.toml").write_text('[tool.vmem-lsp]\npython = "elsewhere/bin/python"\n')
    settings = options.settings(str(project / "kernel.py"))
    assert settings.python_source == "the editor's python setting"
    assert find_python(settings.python, settings.python_source, settings.root, {}).path == str(python)
    # An absolute path stays itself; unset, pyproject's is used.
    assert options_from({"python": str(python)}, folder="/elsewhere")[0].python == str(python)
    assert Options().settings(str(project / "kernel.py")).python == "elsewhere/bin/python"


def test_an_untrusted_folders_notice_names_its_own_python(tmp_path):
    python = venv(tmp_path / ".venv")
    (tmp_path / "pyproject.toml").write_text("[tool.vmem-lsp]\n")
    from vmem_lsp.config import load_settings

    assert project_python(load_settings(str(tmp_path))) == str(python)
    chosen = Settings(python="/usr/bin/python3", python_source="--python", root=str(tmp_path))
    assert project_python(chosen) is None  # the user's own choice runs nothing of the folder's
