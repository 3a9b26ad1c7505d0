"""CI shards sum to one run: each (example, chip) pair done exactly once.

    .venv/bin/python bench/bench_shards.py [--targets v5e,v6e] [--counts 2,4] [PATH ...]

Runs `vmem-lsp check PATH... --format json` unsharded, then as N shards (one
after the other, each with its own empty cache, as N CI jobs would), reads the
pairs each shard says it did from its JSON, and prints: pairs per shard, pairs
done twice, pairs missed, each shard's wall time against the unsharded run's,
and whether `vmem-lsp merge` gives the unsharded diagnostics and exit code.
Default PATHs: examples/ and tests/data/kernels/compile_errors.py.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def check(paths: list[str], targets: str, cache: str, *extra: str) -> tuple[dict, int, float]:
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "vmem_lsp",
            "check",
            *paths,
            "--target",
            targets,
            "--format",
            "json",
            "--cache-dir",
            cache,
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout), done.returncode, time.perf_counter() - started


def diagnostics_key(report: dict) -> list:
    return sorted(
        (d["path"], d["range"]["start_line"], d["code"], d["target"], d["message"]) for d in report["diagnostics"]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["examples", "tests/data/kernels/compile_errors.py"])
    parser.add_argument("--targets", default="v5e,v6e")
    parser.add_argument("--counts", default="2,4")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        whole, whole_code, whole_seconds = check(args.paths, args.targets, f"{folder}/whole")
        print(f"unsharded: {whole['summary']} ({whole_seconds:.1f} s, exit {whole_code})")
        for count in map(int, args.counts.split(",")):
            pairs, times, files = Counter(), [], []
            for index in range(1, count + 1):
                report, _, seconds = check(
                    args.paths, args.targets, f"{folder}/n{count}-{index}", "--shard", f"{index}/{count}"
                )
                path = Path(folder) / f"n{count}-{index}.json"
                path.write_text(json.dumps(report))
                files.append(str(path))
                work = [tuple(sorted(p.items())) if isinstance(p, dict) else tuple(p) for p in report["shard"]["work"]]
                pairs.update(work)
                times.append((len(work), seconds))
            planned = report["shard"]["plan"]["pairs"]
            merged = subprocess.run(
                [sys.executable, "-m", "vmem_lsp", "merge", *files, "--format", "json"],
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            same = (
                diagnostics_key(json.loads(merged.stdout)) == diagnostics_key(whole) and merged.returncode == whole_code
            )
            print(
                f"N={count}: pairs per shard {[n for n, _ in times]} (plan {planned}); done twice "
                f"{sum(c > 1 for c in pairs.values())}; missed {planned - len(pairs)}; shard seconds "
                f"{[round(s, 1) for _, s in times]} (longest {max(s for _, s in times):.1f} against {whole_seconds:.1f}); "
                f"merge equals the unsharded run: {same}"
            )


if __name__ == "__main__":
    main()
