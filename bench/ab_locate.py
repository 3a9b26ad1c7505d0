"""The locator before (`--base`, as check_locate_equivalence.py builds it) and now, timed in turn on the
same texts: bench_server's typing (a space at the end of a random non-empty line) on the largest jax ops
file, one long-lived locator each, so that load on the machine falls on both alike.

    .venv/bin/python bench/ab_locate.py [--edits 200] [--base REV | --tree REV]

Wall and CPU time (`time.process_time`) of each locate; on a shared machine the CPU figures move less.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from check_locate_equivalence import BEFORE_CACHES, build  # noqa: E402


def largest_ops_file() -> Path:
    """bench_server's file, without importing jax (its heap would slow down every collection here)."""
    import importlib.util

    ops = Path(importlib.util.find_spec("jax").submodule_search_locations[0]) / "experimental/pallas/ops/tpu"
    return max(ops.rglob("*.py"), key=lambda p: len(p.read_text().splitlines()))


def row(label: str, values: list[float]) -> str:
    values = sorted(values)
    return (
        f"{label:12s} p50 {statistics.median(values):6.2f}  p95 {values[int(0.95 * (len(values) - 1))]:6.2f}  "
        f"mean {statistics.fmean(values):6.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--edits", type=int, default=200)
    parser.add_argument("--base", default=BEFORE_CACHES)
    parser.add_argument("--tree", help="before is all of vmem_lsp/source at this revision")
    parser.add_argument("--only", choices=("before", "now"), help="time one of them alone")
    args = parser.parse_args()
    path = largest_ops_file()
    lines, rng = path.read_text().split("\n"), random.Random(0)
    texts = ["\n".join(lines)]
    for _ in range(args.edits):
        line = rng.choice([i for i, text in enumerate(lines) if text.strip()])
        lines[line] += " "
        texts.append("\n".join(lines))
    with tempfile.TemporaryDirectory() as folder:
        before, _ = build(Path(folder), "vmem_before", args.base, None, args.tree)
        now, _ = build(Path(folder), "vmem_now", None, None)
        times: dict[str, list[float]] = {"before": [], "now": [], "before [cpu]": [], "now [cpu]": []}
        for number, text in enumerate(texts):
            for label, module in (("before", before), ("now", now)):
                if args.only not in (None, label):
                    continue
                started, cpu = time.perf_counter(), time.process_time()
                module.locate(text, str(path))
                if number:  # the open is left out, as in bench_server
                    times[label].append((time.perf_counter() - started) * 1000)
                    times[label + " [cpu]"].append((time.process_time() - cpu) * 1000)
    print(f"locate in-process, {args.edits} edits to {path.name}, in turn (load {os.getloadavg()[0]:.2f}):")
    for label, values in times.items():
        if values:
            print(row(label, values))


if __name__ == "__main__":
    main()
