"""Nothing outlives vmem-lsp: whatever kills `check` or `serve` (TERM, INT,
HUP, KILL, or closed stdin), every process it started is gone within 2 s,
even a worker spinning in the user's Python. Processes are found by a tag in
their environment, which every child inherits; the process table is read
from /proc."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from support.processes import (
    SPINS,
    describe,
    environment,
    kill_and_expect_nothing_left,
    open_over_stdio,
    started,
    tagged,
    wait_for_file,
)


@pytest.mark.parametrize(
    "how,jobs", [("SIGTERM", 1), ("SIGINT", 1), ("SIGHUP", 1), ("SIGKILL", 1), ("SIGTERM", 2), ("SIGKILL", 2)]
)
def test_check_leaves_nothing_behind(tmp_path, how, jobs):
    tag, env, mark = environment(tmp_path)
    command = [
        sys.executable,
        "-m",
        "vmem_lsp",
        "check",
        str(SPINS),
        "--target",
        "v6e",
        "--no-cache",
        "--jobs",
        str(jobs),
    ]
    with started(
        command, tag, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as check:
        wait_for_file(mark)
        assert len(tagged(tag)) >= 2, "no worker was started"
        kill_and_expect_nothing_left(check, how, tag)
        check.wait()
        assert check.returncode == -getattr(signal, how), check.returncode  # dies of it, as a shell expects


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGHUP", "SIGKILL", "stdin"])
def test_serve_leaves_nothing_behind(tmp_path, how):
    tag, env, mark = environment(tmp_path)
    source = tmp_path / "spins.py"
    source.write_text(SPINS.read_text())
    with started(
        [sys.executable, "-m", "vmem_lsp", "serve"],
        tag,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as server:
        open_over_stdio(server, tmp_path, source, ["v6e"], process_id=os.getpid())
        wait_for_file(mark)
        deadline = time.monotonic() + 30  # the parser process, too, is up by now
        while len(tagged(tag)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(tagged(tag)) >= 3, describe(tagged(tag))
        kill_and_expect_nothing_left(server, how, tag)
