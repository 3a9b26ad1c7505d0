"""vmem-lsp's folders in the user's home, as the XDG base directories name them: what is kept
for the user across projects (the trusted folders, worker peaks, managed jax environments),
never in a project. A leaf: config, the compile side and trust all read it."""

from __future__ import annotations

import os


def user_cache_folder(environ=None) -> str:
    """$XDG_CACHE_HOME/vmem-lsp, else ~/.cache/vmem-lsp."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "vmem-lsp")


def user_config_folder(environ=None) -> str:
    """$XDG_CONFIG_HOME/vmem-lsp, else ~/.config/vmem-lsp."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "vmem-lsp")
