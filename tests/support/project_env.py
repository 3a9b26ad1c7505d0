"""A project's own Python for the "installed as a tool" tests: a pure jax[tpu] venv with
nothing of vmem-lsp in it, named by VMEM_TEST_PROJECT_VENV (CI makes one); without it
those tests skip, and with VMEM_REQUIRE_TOOLS set they fail instead, as the other tests
that need a tool do. Also: a project folder that uses it, and what such a venv holds."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support import EXAMPLES
from support.tiers import COMPILER, starts

VARIABLE = "VMEM_TEST_PROJECT_VENV"


def project_venv() -> Path:
    """The venv VMEM_TEST_PROJECT_VENV names; skips (fails under VMEM_REQUIRE_TOOLS) without one."""
    named = os.environ.get(VARIABLE)
    if not named:
        if os.environ.get("VMEM_REQUIRE_TOOLS"):
            pytest.fail(f"VMEM_REQUIRE_TOOLS is set but {VARIABLE} (a pure jax[tpu] venv) is not")
        pytest.skip(f"{VARIABLE} is not set (a venv with jax[tpu] and nothing of vmem-lsp)")
    venv = Path(named).absolute()
    if not (venv / "bin" / "python").exists():
        pytest.fail(f"{VARIABLE}={named}: no bin/python there")
    return venv


def project_with_examples(folder: Path, venv: Path | None = None, venv_name: str = ".venv") -> Path:
    """A project as a user has it: a pyproject.toml with [tool.vmem-lsp], the bundled
    examples, and (given `venv`) its virtual environment at `venv_name`, linked."""
    folder.mkdir(parents=True)
    (folder / "pyproject.toml").write_text("[tool.vmem-lsp]\n")
    shutil.copytree(EXAMPLES, folder / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    if venv is not None:
        (folder / venv_name).parent.mkdir(parents=True, exist_ok=True)
        (folder / venv_name).symlink_to(venv, target_is_directory=True)
    return folder


def without_virtual_env() -> dict:
    """This environment without an activated venv: what an editor or a shell outside one has."""
    return {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}


@starts(COMPILER)
def installed(venv: Path) -> tuple[list[str], str | None]:
    """What `venv` holds: its site-packages' top-level entries (a package, a .pth, an
    .egg-link written there shows), and `pip freeze` where it has pip."""
    entries = sorted(
        str(p.relative_to(venv)) for p in venv.glob("lib/python*/site-packages/*") if p.name != "__pycache__"
    )
    python = str(venv / "bin" / "python")
    done = subprocess.run([python, "-m", "pip", "freeze"], capture_output=True, text=True, timeout=120)
    return entries, done.stdout if done.returncode == 0 else None
