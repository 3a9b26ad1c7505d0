"""How long until a hanging example is reported, with default settings, and
how long a killed `check` leaves anything running.

    .venv/bin/python bench/bench_limits.py

Hang: `vmem-lsp check` on an example whose Python spins forever (trace limit,
default 60 s), wall time until the CLI exits with its message. Kill: the same
check killed by SIGTERM while the example spins, time until no process it
started is left (read from /proc by an environment tag).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPINS = os.path.join(ROOT, "tests", "data", "kernels", "spins.py")


def tagged(tag: bytes) -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if tag in f.read():
                    with open(f"/proc/{entry}/stat") as stat:
                        if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                            found.append(int(entry))
        except OSError:
            pass
    return found


def hang_reported() -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as work:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "vmem_lsp", "check", SPINS, "--target", "v6e", "--no-cache"],
            cwd=work,
            capture_output=True,
            text=True,
        )
        return time.perf_counter() - started, done.stdout.strip().splitlines()[0]


def kill_cleaned(how: signal.Signals) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as work:
        tag, mark = str(uuid.uuid4()), os.path.join(work, "spinning")
        check = subprocess.Popen(
            [sys.executable, "-m", "vmem_lsp", "check", SPINS, "--target", "v6e", "--no-cache"],
            cwd=work,
            env={**os.environ, "VMEM_BENCH_TAG": tag, "VMEM_SPIN_MARK": mark},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while not os.path.exists(mark):
            time.sleep(0.05)
        check.send_signal(how)
        killed = time.perf_counter()
        while [p for p in tagged(tag.encode()) if p != check.pid] and time.perf_counter() - killed < 10:
            time.sleep(0.01)
        seconds, left = time.perf_counter() - killed, len([p for p in tagged(tag.encode()) if p != check.pid])
        check.wait()
        return seconds, left


def main() -> None:
    seconds, message = hang_reported()
    print(f"hanging example reported after {seconds:.1f} s (default trace limit 60 s):\n  {message}")
    for how in (signal.SIGTERM, signal.SIGKILL):
        seconds, left = kill_cleaned(how)
        print(f"check killed by {how.name} mid-example: {left} process(es) left after {seconds:.2f} s")
    print(f"machine: {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
