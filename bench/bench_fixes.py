"""Time to the first verified fix, and compiles spent, per overflowing example.

    .venv/bin/python bench/bench_fixes.py

Warm: the worker is started and the example's own verdict compiled before the
clock starts; the fix search itself runs without the cache, so every trace and
compile it needs is counted.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vmem_lsp.compile.client import WorkerClient  # noqa: E402
from vmem_lsp.config import Settings  # noqa: E402
from vmem_lsp.engine import SourceFiles, check  # noqa: E402
from vmem_lsp.families import family_of  # noqa: E402
from vmem_lsp.fixes.plan import overflowing  # noqa: E402
from vmem_lsp.fixes.search import Problem, find_fixes  # noqa: E402

CASES = [
    ("examples/matmul.py", ("v5e",)),
    ("examples/copy_whole.py", ("v6e",)),
    ("tests/data/kernels/flash_user.py", ("v5e",)),
    ("examples/matmul.py", ("v5e", "v6e")),
]


def main() -> None:
    print(f"machine: {os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}")
    worker = WorkerClient()
    worker.start()
    compiles, seconds = [], []
    with tempfile.TemporaryDirectory() as work:
        for name, targets in CASES:
            path = Path(work) / Path(name).name
            shutil.copy(ROOT / name, path)
            outcome = check([str(path)], Settings(targets=targets), use_cache=False, worker=worker)
            sources = SourceFiles()
            for example, per_target in overflowing(outcome.results).items():
                problem = Problem(
                    example,
                    sources.text(example.path),
                    targets,
                    per_target,
                    lambda r: worker.check(r, 300),
                    sources.sites_of,
                    family_of=family_of,
                )
                started = time.perf_counter()
                fixes = find_fixes(problem)
                elapsed = time.perf_counter() - started
                first = next((f for f in fixes if f.verified), None)
                compiles.append(first.compiles if first else problem.compiles)
                seconds.append(elapsed)
                print(
                    f"{name} on {','.join(targets)}: {len(fixes)} fixes in {elapsed:.2f} s, "
                    f"first verified after {first.compiles if first else '-'} compiles "
                    f"({problem.compiles} compiles, {problem.traces} traces in all): "
                    f"{first.title if first else 'none'}"
                )
    worker.stop()
    print(
        f"\nfix search: median {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s; "
        f"compiles to the first verified fix: mean {statistics.mean(compiles):.1f}"
    )


if __name__ == "__main__":
    main()
