"""Trust in the editor: the compiler tier imports a folder's modules, runs its
examples and may run the worker command of its pyproject.toml, so it runs
only for folders the user trusts (vmem_lsp/trust.py). An untrusted folder gets
the static tier, an information diagnostic on each example saying why it was
not compiled, and one notice that names what would run."""

from __future__ import annotations

import os

from .. import trust
from ..config import Settings
from ..diagnostics import Diagnostic
from ..source.directives import Example

TRUST = "Trust this folder"
NOT_NOW = "Not now"


def trusted(path: str, settings: Settings, extra=()) -> bool:
    """The file's folder, and the project whose pyproject.toml gave the
    settings (its examples, its worker), are both trusted."""
    if not trust.is_trusted(path, extra):
        return False
    return settings.config_path is None or trust.is_trusted(settings.root, extra)


def folder_to_trust(path: str, settings: Settings, workspace_folders) -> str:
    """What answering "Trust this folder" trusts: the project (the folder of the
    pyproject.toml that configures it), else the workspace folder holding
    the file, else the file's folder."""
    if settings.config_path is not None:
        return settings.root
    holding = [f for f in workspace_folders if path.startswith(f.rstrip(os.sep) + os.sep)]
    return max(holding, key=len) if holding else os.path.dirname(path)


def what_would_run(path: str, settings: Settings, examples: list[Example], worker_from_project: bool) -> str:
    shown = [f"`{e.text}`" for e in examples[:3]] + [f"`{e}`" for e in settings.examples[:3]]
    more = len(examples) + len(settings.examples) - len(shown)
    parts = [
        f"the example{'s' * (len(shown) > 1)} {', '.join(shown)}{f' and {more} more' if more > 0 else ''} "
        f"of {os.path.basename(path)}, with the modules they import"
    ]
    if worker_from_project and settings.worker:
        parts.append(f"the worker command `{settings.worker}` from {os.path.basename(settings.config_path or '')}")
    elif python := project_python(settings):
        parts.append(f"the project's Python `{python}`")
    return "; ".join(parts)


def project_python(settings: Settings) -> str | None:
    """The interpreter of the project's own choosing the worker would start in (its
    pyproject's python, its .venv), None when it is not the folder's: an interpreter
    runs code of the environment it is in (.pth files, sitecustomize)."""
    from ..compile.backend import PythonNotFound, find_python

    python = settings.python
    if python and settings.python_source != os.path.basename(settings.config_path or ""):
        return None  # the user's choice (the editor, --python)
    try:
        found = find_python(python, settings.python_source, settings.root, environ={})
    except PythonNotFound:
        return python
    return None if found.own or found.source == "vmem-lsp's own" else found.path


def notice(folder: str, would_run: str) -> str:
    return (
        f"vmem-lsp has run nothing in {folder}: it is not a trusted folder. Compiling its kernels would run "
        f"{would_run}. Trust the folder to compile them (or run `vmem-lsp trust {folder}`)."
    )


def not_run(examples: list[Example], folder: str) -> list[Diagnostic]:
    """One information diagnostic per example: it was not compiled, and why."""
    return [
        Diagnostic(
            e.path,
            e.span,
            "information",
            "VMEM013",
            f"not compiled: {folder} is not a trusted folder (vmem-lsp trust {folder})",
            origin="model",
        )
        for e in examples
    ]
