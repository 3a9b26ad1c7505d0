"""Managed jax environments (vmem_lsp/compile/environments.py) as the tests use them: made
in a folder of the test's, and the pip settings that send pip to a registry that is not
there (a closed port on this machine), so that making one fails as it would offline."""

from __future__ import annotations

import socket

from support.tiers import COMPILER, starts
from vmem_lsp.compile import environments


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unreachable_registry(port: int) -> dict[str, str]:
    """pip's environment for an index at a closed local port, with no other index, no
    find-links and no config file (this machine's adds local wheel folders), one quick try."""
    return {
        "PIP_CONFIG_FILE": "/dev/null",
        "PIP_INDEX_URL": f"http://127.0.0.1:{port}/simple",
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_FIND_LINKS": "",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_RETRIES": "0",
        "PIP_DEFAULT_TIMEOUT": "3",
        "UV_INDEX_URL": f"http://127.0.0.1:{port}/simple",
        "UV_OFFLINE": "1",
    }


@starts(COMPILER)
def make_environment(version: str, environ: dict, said: list[str]) -> environments.Managed:
    """environments.ensure for `version` (a venv and pip run, as a user's check would)."""
    return environments.ensure(version, said.append, environ)
