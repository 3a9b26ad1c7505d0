"""How fast `vmem-lsp explain` reads a big log, and in how much memory.

Writes a log of SIZE MB (default 100) of job output with every captured
report of tests/data/reports embedded behind timestamps, runs `python -m
vmem_lsp explain LOG --format json` on it as a user would, and prints the
time, the throughput, the peak memory of that process, and whether every
report was found. Usage: python bench/bench_explain.py [SIZE_MB]"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "tests" / "data" / "reports" / "0.0.42.1"  # the reference libtpu's texts (tests/support/reports.py)


def main(size_mb: int) -> None:
    sys.path.insert(0, str(ROOT))
    from vmem_lsp.tpu.parse import parse_report

    texts = [
        t
        for t in (p.read_text().split("\n", 3)[3] for p in sorted(REPORTS.glob("*.txt")))
        if parse_report(t).form not in ("unknown", "block_shape")
    ]
    rng = random.Random(0)
    noise = [
        f"2026-11-30 12:00:{s:02d},{ms:03d} INFO train step {s * 1000 + ms}: loss={rng.random():.6f} "
        f"lr=3e-4 tokens/s={rng.randint(1000, 9000)}\n"
        for s in range(60)
        for ms in range(0, 1000, 7)
    ]
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "train.log"
        target = size_mb << 20
        placed = 0
        with open(log, "w") as out:
            written, every = 0, target // (len(texts) + 1)
            while written < target:
                chunk = "".join(rng.choice(noise) for _ in range(2000))
                out.write(chunk)
                written += len(chunk)
                if written >= (placed + 1) * every and placed < len(texts):
                    report = "".join(f"2026-11-30 12:00:00,000 ERROR {l}\n" for l in texts[placed].splitlines())
                    out.write(report)
                    written += len(report)
                    placed += 1
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "vmem_lsp", "explain", str(log), "--format", "json"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        seconds = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        found = json.loads(done.stdout)["reports"]
        mb = os.path.getsize(log) / (1 << 20)
    print(
        f"explain: {mb:.0f} MB log, {placed} reports embedded, {len(found)} found, "
        f"{seconds:.1f} s ({mb / seconds:.0f} MB/s), peak memory {max(peak, before) / 1024:.0f} MB"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
