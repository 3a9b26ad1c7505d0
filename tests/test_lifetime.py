"""Nothing outlives vmem-lsp: whatever kills `check` or `serve` (TERM, INT,
HUP, KILL, or closed stdin), every process it started is gone within 2 s,
even a worker spinning in the user's Python. Processes are found by a tag in
their environment, which every child inherits; the process table is read
from /proc."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import KERNELS

GONE_WITHIN = 2.0
SPINS = KERNELS / "spins.py"


def tagged(tag: str) -> list[int]:
    """Live (not zombie) processes whose environment holds the tag."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if tag.encode() not in f.read():
                    continue
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(entry))
    return found


def wait_for(path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"the example never started spinning ({path})"
        time.sleep(0.1)


def left_after(tag: str, started: subprocess.Popen) -> tuple[list[int], float]:
    """What still runs GONE_WITHIN seconds after the kill (or sooner, once nothing)."""
    began = time.monotonic()
    while time.monotonic() - began < GONE_WITHIN:
        started.poll()
        if not [p for p in tagged(tag) if p != started.pid]:
            return [], time.monotonic() - began
        time.sleep(0.05)
    return [p for p in tagged(tag) if p != started.pid], time.monotonic() - began


def describe(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            out.append(f"{pid}: {Path(f'/proc/{pid}/cmdline').read_bytes().replace(bytes(1), b' ').decode()}")
        except OSError:
            pass
    return out


def environment(tmp_path: Path) -> tuple[str, dict, Path]:
    tag = f"VMEM_TEST_TAG={uuid.uuid4()}"
    mark = tmp_path / "spinning"
    env = {**os.environ, "VMEM_TEST_TAG": tag.split("=", 1)[1], "VMEM_SPIN_MARK": str(mark)}
    return tag.split("=", 1)[1], env, mark


@contextlib.contextmanager
def started(command: list[str], tag: str, **popen):
    """The process, killed with anything left of its tree when the test ends."""
    process = subprocess.Popen(command, **popen)
    try:
        yield process
    finally:
        process.kill()
        process.communicate()
        for pid in tagged(tag):
            os.kill(pid, signal.SIGKILL)


def kill_and_expect_nothing_left(process: subprocess.Popen, how: str, tag: str) -> None:
    if how == "stdin":
        process.stdin.close()
    else:
        process.send_signal(getattr(signal, how))
    left, _ = left_after(tag, process)
    assert not left, f"after {how}: {describe(left)}"


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
        wait_for(mark)
        assert len(tagged(tag)) >= 2, "no worker was started"
        kill_and_expect_nothing_left(check, how, tag)
        check.wait()
        assert check.returncode == -getattr(signal, how), check.returncode  # dies of it, as a shell expects


def lsp_message(body: dict) -> bytes:
    data = json.dumps(body).encode()
    return b"Content-Length: %d\r\n\r\n" % len(data) + data


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
        for message in (
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "processId": os.getpid(),
                    "rootUri": tmp_path.as_uri(),
                    "capabilities": {},
                    "initializationOptions": {"targets": ["v6e"], "cache": False, "trustedFolders": [str(tmp_path)]},
                },
            },
            {"jsonrpc": "2.0", "method": "initialized", "params": {}},
            {
                "jsonrpc": "2.0",
                "method": "textDocument/didOpen",
                "params": {
                    "textDocument": {
                        "uri": source.as_uri(),
                        "languageId": "python",
                        "version": 1,
                        "text": source.read_text(),
                    }
                },
            },
        ):
            server.stdin.write(lsp_message(message))
        server.stdin.flush()
        wait_for(mark)
        deadline = time.monotonic() + 30  # the parser process, too, is up by now
        while len(tagged(tag)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(tagged(tag)) >= 3, describe(tagged(tag))
        kill_and_expect_nothing_left(server, how, tag)
