"""Which folders the user trusts to run code in: the examples of their files,
the modules those import, a worker command from their pyproject.toml.

Trust is the user's word, never a repository's: the list lives in the user's
config folder (`$XDG_CONFIG_HOME/vmem-lsp/trusted`, one resolved real path a
line), and an editor may add its own user-level list (`trustedFolders` in the
initialization options, VS Code's workspace trust). A folder's own files
(pyproject, `.vscode/settings.json`, `.nvim.lua`) cannot grant it.

Paths are compared so that neither `..` nor a symlink widens trust: a path
is trusted by an entry when, walking it from the root, it enters the entry
through a real folder (not through a symlink from elsewhere) and never leaves
it again (a symlink inside that points outside is not trusted through it).
"""

from __future__ import annotations

import os
from pathlib import Path

from .user_folders import user_config_folder


def trust_file() -> str:
    return os.path.join(user_config_folder(), "trusted")


def entries(path: str | None = None) -> list[str]:
    """The trusted folders, as resolved real paths."""
    try:
        with open(path or trust_file(), encoding="utf-8") as f:
            return [line.strip() for line in f if line.strip() and not line.startswith("#")]
    except OSError:
        return []


def stamp(path: str | None = None) -> tuple[int, int] | None:
    """(mtime, size) of the trust list, None when there is none: how a
    server waiting on it sees that `vmem-lsp trust` changed it."""
    try:
        found = os.stat(path or trust_file())
    except OSError:
        return None
    return found.st_mtime_ns, found.st_size


def _write(found: list[str], path: str | None = None) -> None:
    path = path or trust_file()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write("# Folders vmem-lsp may run code in (vmem-lsp trust / untrust). One real path a line.\n")
        f.writelines(f"{entry}\n" for entry in found)
    os.replace(temporary, path)


def add(folder: str, path: str | None = None) -> str:
    """Trust `folder` (and what is below it); returns the entry written."""
    entry = os.path.realpath(os.path.expanduser(folder))
    found = entries(path)
    if entry not in found:
        _write([*found, entry], path)
    return entry


def remove(folder: str, path: str | None = None) -> bool:
    """Stop trusting `folder`; False when it was not in the list."""
    entry = os.path.realpath(os.path.expanduser(folder))
    found = entries(path)
    if entry not in found:
        return False
    _write([e for e in found if e != entry], path)
    return True


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def trusted_by(path: str, folders) -> str | None:
    """The entry of `folders` (paths; `~` is the user's home, as an editor's settings write it)
    that trusts `path`, or None."""
    folders = [os.path.realpath(os.path.expanduser(f)) for f in folders]
    parts = Path(os.path.abspath(path)).parts
    current, inside = parts[0], None
    if any(_under(current, f) for f in folders):
        inside = next(f for f in folders if _under(current, f))
    for part in parts[1:]:
        current = os.path.join(current, part)
        real = os.path.realpath(current)
        holding = [f for f in folders if _under(real, f)]
        if inside is None:
            if holding and os.path.islink(current):
                return None  # a symlink from elsewhere into a trusted folder
            inside = holding[0] if holding else None
        elif not holding:
            return None  # a symlink inside that leads out
    return inside


def is_trusted(path: str, extra=()) -> bool:
    """Whether code under `path` may run: the user's list, plus `extra`
    folders an editor passed from its own user-level settings."""
    return trusted_by(path, [*entries(), *extra]) is not None
