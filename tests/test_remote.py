"""A worker on another machine over SSH: a real sshd on 127.0.0.1, a key made
for the test, the real compiler behind it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import EXAMPLES, KERNELS
from support.cli import run_json
from support.sshd import SSHD, Sshd, descendants, keygen

from vmem_lsp.compile.client import CheckRequest, WorkerClient

pytestmark = pytest.mark.skipif(
    (SSHD is None or os.geteuid() != 0) and not os.environ.get("VMEM_REQUIRE_TOOLS"),
    reason="needs Debian's openssh-server and root (apt-get install openssh-server)",
)


@pytest.fixture
def sshd(tmp_path):
    server = Sshd(tmp_path)
    yield server
    server.kill()


def diagnostics_without_paths(report):
    return [{k: v for k, v in d.items() if k != "facts"} for d in report["diagnostics"]]


def test_remote_worker_gives_the_same_results_as_the_local_one(sshd, tmp_path):
    target = tmp_path / "copy_whole.py"
    shutil.copy(EXAMPLES / "copy_whole.py", target)
    local = run_json("check", str(target), "--target", "v6e", "--no-cache")[1]
    done, remote = run_json("check", str(target), "--target", "v6e", "--no-cache", "--worker", sshd.command())
    assert done.returncode == 1, done.stderr
    assert diagnostics_without_paths(remote) == diagnostics_without_paths(local)
    assert list((tmp_path / "remote-cache" / "workspaces").iterdir()), "the source was not shipped"


def test_unchanged_files_are_not_sent_again(sshd):
    worker = WorkerClient(sshd.command())
    try:
        request = CheckRequest("copy_whole(f32[1024, 1024])", "v6e", path=str(EXAMPLES / "copy_whole.py"))
        first = worker.check(request, 300)
        sent = worker.blobs_sent
        second = worker.check(request, 300)
    finally:
        worker.stop()
    assert first.error is None and second.error is None and first.calls[0].fits
    assert sent == len(list(EXAMPLES.glob("*.py"))) and worker.blobs_sent == sent
    assert first.calls[0].call_origin.file == str(EXAMPLES / "copy_whole.py")  # paths come back as ours


def test_a_remote_crash_is_placed_on_our_file(sshd, tmp_path):
    """faulthandler names the crashing frame by the remote worker's path (its
    workspace); the origin comes back as this machine's file, as results do."""
    (tmp_path / "crash.py").write_text(
        "import ctypes\n\n# vmem: boom(f32[8, 128])\n\n\ndef boom(x):\n    ctypes.string_at(0)\n"
    )
    worker = WorkerClient(sshd.command())
    try:
        result = worker.check(CheckRequest("boom(f32[8, 128])", "v6e", path=str(tmp_path / "crash.py")), 300)
    finally:
        worker.stop()
    assert "in boom at crash.py:7" in result.error, result.error
    assert (result.error_origin.file, result.error_origin.line) == (str(tmp_path / "crash.py"), 7)


def start_check_then_kill_sshd(sshd, *extra):
    """A slow compile (jax's flash attention) over SSH; sshd dies mid-compile."""
    command = [
        sys.executable,
        "-m",
        "vmem_lsp",
        "check",
        str(KERNELS / "flash_user.py"),
        "--target",
        "v5e",
        "--no-cache",
        "--format",
        "json",
        "--worker",
        sshd.command(),
        *extra,
    ]
    check = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the remote worker is up and compiling
        if subprocess.run(["pgrep", "-f", str(sshd.folder / "remote-cache")], capture_output=True).stdout:
            break
        time.sleep(0.2)
    time.sleep(6)
    sshd.kill()
    out, err = check.communicate(timeout=600)
    import json

    return check.returncode, json.loads(out), err


def test_losing_the_connection_mid_compile_is_a_clear_error(sshd):
    code, report, _ = start_check_then_kill_sshd(sshd)
    [d] = report["diagnostics"]
    assert d["code"] == "VMEM010" and "exited with code 255" in d["message"]


def test_losing_the_connection_falls_back_to_the_local_worker(sshd):
    code, report, _ = start_check_then_kill_sshd(sshd, "--worker-fallback")
    assert code == 1
    assert {d["code"] for d in report["diagnostics"]} >= {"VMEM002", "VMEM004"}


@pytest.mark.parametrize("problem", ["wrong host key", "no key"])
def test_bad_credentials_fail_fast_and_clearly(sshd, problem):
    if problem == "wrong host key":
        keygen(sshd.folder / "other_host")
        (sshd.folder / "wrong_known").write_text(
            f"[127.0.0.1]:{sshd.port} {(sshd.folder / 'other_host.pub').read_text()}"
        )
        command, expected = sshd.command(known_hosts="wrong_known"), "Host key verification failed"
    else:
        keygen(sshd.folder / "stranger_key")
        command, expected = sshd.command(key="stranger_key"), "Permission denied"
    started = time.monotonic()
    done, report = run_json(
        "check", str(EXAMPLES / "copy_whole.py"), "--target", "v6e", "--no-cache", "--worker", command
    )
    assert time.monotonic() - started < 60
    [d] = report["diagnostics"]
    assert d["code"] == "VMEM010" and expected in d["message"], d["message"]


def test_the_remote_worker_dies_when_the_connection_drops(sshd, tmp_path):
    """The ssh client is killed while the remote worker spins in user code:
    the remote side sees its input end and its session go, and exits."""
    import threading

    mark = tmp_path / "spinning"
    command = sshd.command().replace(f" {sys.executable} ", f" env VMEM_SPIN_MARK={mark} {sys.executable} ")
    worker = WorkerClient(command)
    request = CheckRequest("spin(f32[8, 128])", "v6e", path=str(KERNELS / "spins.py"))
    checking = threading.Thread(target=worker.check, args=(request, 300), daemon=True)
    checking.start()
    deadline = time.monotonic() + 120
    while not mark.exists():
        assert time.monotonic() < deadline, "the remote example never started"
        time.sleep(0.1)

    remote = [
        pid
        for pid in descendants(sshd.process.pid)
        if b"vmem_lsp\x00worker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    assert remote

    def alive():  # an orphan is no longer sshd's descendant: look the pids up
        return [
            pid
            for pid in remote
            if os.path.exists(f"/proc/{pid}")
            and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        ]

    os.kill(worker.process.pid, signal.SIGKILL)  # the client side of the connection, gone
    started = time.monotonic()
    while alive() and time.monotonic() - started < 2:
        time.sleep(0.05)
    left = alive()
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "the remote worker outlived its connection"
    checking.join(timeout=30)
    worker.stop()
