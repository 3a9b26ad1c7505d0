"""What a GPU compile costs (issue 33): each example of tests/data/kernels/gpu_kernels.py
compiled for each GPU target by one local worker, no cache, as `check --target <gpu>`
would; prints the worker's start, each kernel's lower+compile seconds (the worker's own
clock, CapturedCall.compile_seconds) and the request's wall time.

    .venv/bin/python bench/bench_gpu_compile.py [--targets h100,h200,a100,l4,b200]

Each target gets a fresh worker: Mosaic GPU keeps the first architecture it compiled
for in a process, and the first compile of a process pays for the GPU backend's setup.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vmem_lsp.compile.backend import worker_command_for  # noqa: E402
from vmem_lsp.compile.client import CheckRequest, WorkerClient  # noqa: E402
from vmem_lsp.config import Settings  # noqa: E402
from vmem_lsp.results import PhaseLimits  # noqa: E402
from vmem_lsp.source.directives import find_examples  # noqa: E402

KERNELS = ROOT / "tests" / "data" / "kernels" / "gpu_kernels.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="h100,h200,a100,l4,b200")
    args = parser.parse_args()
    examples, _ = find_examples(KERNELS.read_text(), str(KERNELS))
    every = []
    print(f"{'target':6}  {'example':70}  {'compile s':>9}  {'wall s':>7}  verdict")
    for target in args.targets.split(","):
        worker = WorkerClient(worker_command_for(Settings()))
        try:
            started = time.perf_counter()
            worker.start()
            print(f"{target:6}  {'(worker start)':70}  {'':>9}  {time.perf_counter() - started:7.2f}")
            for example in examples:
                started = time.perf_counter()
                result = worker.check(CheckRequest(example.text, target, path=str(KERNELS)), PhaseLimits(60, 300))
                wall = time.perf_counter() - started
                seconds = sum(c.compile_seconds for c in result.calls)
                verdict = (
                    result.error_kind or "error"
                    if result.error
                    else "fits"
                    if all(c.fits for c in result.calls)
                    else "rejected"
                )
                if not result.error:
                    every.append(seconds)
                print(f"{target:6}  {example.text[:70]:70}  {seconds:9.2f}  {wall:7.2f}  {verdict}")
        finally:
            worker.stop()
    if every:
        print(
            f"\n{len(every)} compiles: median {statistics.median(every):.2f} s, "
            f"max {max(every):.2f} s (lower + compile, the worker's clock)"
        )


if __name__ == "__main__":
    main()
