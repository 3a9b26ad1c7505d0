"""Cold and warm `vmem-lsp check examples/`, wall time, as a user runs it.

    .venv/bin/python bench/bench_check.py [--runs 3]

Cold: an empty cache folder (the worker starts, libtpu loads, every example
compiles). Warm: the same folder again, nothing changed (no worker starts).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed_check(cache: str) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "vmem_lsp", "check", "examples", "--cache-dir", cache],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return time.perf_counter() - started, done.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    cold, warm = [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as cache:
            seconds, summary = timed_check(cache)
            cold.append(seconds)
            print(f"cold {seconds:6.2f} s  {summary}")
            for _ in range(3):
                seconds, summary = timed_check(cache)
                warm.append(seconds)
                print(f"warm {seconds:6.2f} s  {summary}")
    print(f"\ncheck examples/ cold: median {statistics.median(cold):.2f} s over {len(cold)} runs")
    print(f"check examples/ warm: median {statistics.median(warm):.2f} s, max {max(warm):.2f} s over {len(warm)} runs")
    print(f"machine: {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
