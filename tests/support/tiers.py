"""The test tiers, and the tag that puts a test in one by what it calls.

A helper that starts a process says which kind with `@starts(kind)`;
conftest.py's collection hook follows the names a test (and its fixtures, and
the test module's own functions they call) reach, and marks the test with
every kind it finds. A test that reaches none is `fast`, and a guard holds it
to that: in a fast test, starting a process or listening on a socket fails."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

# The markers, as pyproject.toml declares them.
COMPILER, EDITOR, CLUSTER, SLOW, FAST = "compiler", "editor", "cluster", "slow", "fast"
KINDS = (COMPILER, EDITOR, CLUSTER)

# What other packages' names start, by name: vmem_lsp's worker client (tests make one
# themselves to hold a worker across requests) and pytest-lsp's client, which a test
# starts itself when it must see the server's answer to `initialize`.
STARTERS = {"WorkerClient": COMPILER, "make_test_lsp_client": EDITOR}

T = TypeVar("T")


def starts(kind: str) -> Callable[[T], T]:
    """Tag a helper (function or class) that starts a process of `kind`."""
    assert kind in KINDS, kind

    def tag(helper: T) -> T:
        helper.tier = kind  # type: ignore[attr-defined]
        return helper

    return tag
