"""What `check --spills` costs per kernel (issue 33): each example of the GPU test kernels
(tests/data/kernels/gpu_spills.py, gpu_kernels.py) checked for each GPU target by a fresh
local worker without spills, then by another fresh one with them, no cache; prints each
kernel's lower+compile seconds both ways (the worker's clock, CapturedCall.compile_seconds,
which holds the ptxas run), the difference, and ptxas's own "Compile time" from its report.

    .venv/bin/python bench/bench_gpu_spills.py [--targets a100,h100] [--repeat 2]

Fresh workers both ways: Mosaic GPU prints its ptxas report only the first time a process
compiles a kernel, and the first compile of a process pays for the GPU backend's setup.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vmem_lsp.compile.backend import worker_command_for  # noqa: E402
from vmem_lsp.compile.client import CheckRequest, WorkerClient  # noqa: E402
from vmem_lsp.config import Settings  # noqa: E402
from vmem_lsp.results import PhaseLimits  # noqa: E402
from vmem_lsp.source.directives import find_examples  # noqa: E402

FILES = [ROOT / "tests" / "data" / "kernels" / name for name in ("gpu_spills.py", "gpu_kernels.py")]
PTXAS_TIME = re.compile(r"Compile time = ([\d.]+) ms")


def run(target: str, spills: bool) -> dict[str, tuple[float, float | None, bool]]:
    """example -> (seconds, ptxas's own seconds, whether it compiled) in one fresh worker."""
    worker = WorkerClient(worker_command_for(Settings()))
    found = {}
    try:
        for path in FILES:
            examples, _ = find_examples(path.read_text(), str(path))
            for example in examples:
                request = CheckRequest(example.text, target, path=str(path), spills=spills)
                result = worker.check(request, PhaseLimits(60, 600))
                calls = result.calls
                own = [float(ms) / 1000 for c in calls for ms in PTXAS_TIME.findall(c.ptxas or "")]
                compiled = bool(calls) and not result.error and all(c.fits for c in calls)
                found[example.text] = (sum(c.compile_seconds for c in calls), sum(own) if own else None, compiled)
    finally:
        worker.stop()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="a100,h100")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    added = []
    print(f"{'target':6}  {'example':62}  {'plain s':>7}  {'spills s':>8}  {'added s':>7}  {'ptxas s':>7}")
    for target in args.targets.split(","):
        rounds = [(run(target, False), run(target, True)) for _ in range(args.repeat)]
        for example in rounds[0][0]:
            plain = statistics.median(r[0][example][0] for r in rounds)
            spilled = statistics.median(r[1][example][0] for r in rounds)
            own = [r[1][example][1] for r in rounds if r[1][example][1] is not None]
            compiled = rounds[0][0][example][2]
            ptxas = f"{statistics.median(own):7.2f}" if own else f"{'-':>7}"
            note = "" if compiled else "  (refused: no ptxas run)"
            print(f"{target:6}  {example[:62]:62}  {plain:7.2f}  {spilled:8.2f}  {spilled - plain:7.2f}  {ptxas}{note}")
            if compiled:
                added.append(spilled - plain)
    if added:
        print(
            f"\n{len(added)} kernels that compile: --spills added median {statistics.median(added):.2f} s, "
            f"max {max(added):.2f} s per kernel (lower + compile + ptxas, the worker's clock)"
        )


if __name__ == "__main__":
    main()
