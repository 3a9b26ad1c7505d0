"""Process trees, found by a tag in their environment (which every child
inherits) and read from /proc: what a test of `check` or `serve` being killed
needs to say that nothing they started outlives them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

from support import KERNELS
from support.tiers import COMPILER, starts

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


def wait_for_file(path: Path, timeout: float = 120) -> None:
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


@starts(COMPILER)
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


def lsp_message(body: dict) -> bytes:
    data = json.dumps(body).encode()
    return b"Content-Length: %d\r\n\r\n" % len(data) + data


def open_over_stdio(
    server: subprocess.Popen, root: Path, source: Path, targets: list[str], process_id: int | None
) -> None:
    """initialize (trusting `root`, no cache), initialized and didOpen of `source`, written raw to the
    server's stdin as an editor would: a test that kills the server reads no answer."""
    options = {"targets": targets, "cache": False, "trustedFolders": [str(root)]}
    params = {"processId": process_id, "rootUri": root.as_uri(), "capabilities": {}, "initializationOptions": options}
    document = {"uri": source.as_uri(), "languageId": "python", "version": 1, "text": source.read_text()}
    for message in (
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params},
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
        {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": document}},
    ):
        assert server.stdin is not None
        server.stdin.write(lsp_message(message))
    server.stdin.flush()
