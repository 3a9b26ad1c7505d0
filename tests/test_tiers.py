"""The tiers are what the tests do: a test is marked by the processes its
helpers start, followed through the test module's own functions, and a fast
test that starts one anyway fails (the guard in conftest.py)."""

from __future__ import annotations

import multiprocessing
import socket
import subprocess

import pytest
from support.cli import hide, run_cli
from support.lsp_client import running_server
from support.tiers import COMPILER, EDITOR, SPAWNS, kinds_reached


def calls_the_cli():
    return run_cli("--version")


def calls_a_helper_that_calls_the_cli():
    return calls_the_cli()


async def opens_a_server_in_its_body(tmp_path):
    from support.lsp_client import running_server as started

    async with started(tmp_path):
        pass


# Reached through a dict, which the walk does not open: the tests that look at them start nothing.
SAMPLES = {
    "the CLI": calls_the_cli,
    "a helper that calls the CLI": calls_a_helper_that_calls_the_cli,
    "a server": lambda: running_server,
    "a server imported in the body": opens_a_server_in_its_body,
    "a folder": lambda tmp_path: hide(tmp_path, "libtpu"),
    "subprocess": lambda: subprocess.run(["true"]),
}


def test_a_helper_tag_is_followed_through_the_functions_that_call_it():
    kinds = {what: kinds_reached(function) for what, function in SAMPLES.items()}
    assert kinds == {
        "the CLI": {COMPILER},
        "a helper that calls the CLI": {COMPILER},
        "a server": {EDITOR},
        "a server imported in the body": {EDITOR},
        "a folder": set(),
        "subprocess": {SPAWNS},
    }


@pytest.mark.fast
def test_a_fast_test_that_starts_a_process_or_a_server_fails():
    with pytest.raises(AssertionError, match="marked fast but starts a process"):
        subprocess.run(["true"])
    with pytest.raises(AssertionError, match="marked fast but starts a process"):
        multiprocessing.get_context("spawn").Process(target=print).start()
    with socket.socket() as s, pytest.raises(AssertionError, match="marked fast but starts a process"):
        s.listen()
