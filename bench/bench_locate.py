"""Locate time of every file of jax's TPU kernels (jax/experimental/pallas/ops/tpu), as the editor sees it.

    .venv/bin/python bench/bench_locate.py [--runs 15]

Cold: the parsed-statement cache is cleared before each run (a file just
opened). Warm: the same text again (a keystroke elsewhere, nothing to reparse).
Times are the median of the runs; the target is the largest file under 150 ms cold.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import jax.experimental.pallas.ops.tpu as jax_tpu_ops

from vmem_lsp.source.locate import clear_cache, locate

TARGET_MS = 150.0


def timed(source: str, path: str, cold: bool) -> tuple[float, int]:
    if cold:
        clear_cache()
    started = time.perf_counter()
    result = locate(source, path)
    return (time.perf_counter() - started) * 1000, len(result.sites)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    root = Path(jax_tpu_ops.__path__[0])
    print(f"{'file':50} {'lines':>6} {'sites':>5} {'cold median':>12} {'cold max':>9} {'warm median':>12}")
    cold_medians = {}
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        cold = [timed(source, str(path), cold=True) for _ in range(args.runs)]
        warm = [timed(source, str(path), cold=False) for _ in range(args.runs)]
        name = str(path.relative_to(root))
        cold_medians[name] = statistics.median(ms for ms, _ in cold)
        print(
            f"{name:50} {source.count(chr(10)):>6} {cold[0][1]:>5} {cold_medians[name]:>9.1f} ms"
            f" {max(ms for ms, _ in cold):>6.1f} ms {statistics.median(ms for ms, _ in warm):>9.1f} ms"
        )
    slowest = max(cold_medians, key=cold_medians.get)
    verdict = "under" if cold_medians[slowest] < TARGET_MS else "OVER"
    print(
        f"\nslowest cold median: {slowest} {cold_medians[slowest]:.1f} ms ({verdict} the {TARGET_MS:.0f} ms target),"
        f" {args.runs} runs per file"
    )


if __name__ == "__main__":
    main()
