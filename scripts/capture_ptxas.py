"""Capture ptxas's `-v` reports that the spill parser is tested against (check --spills).

Usage: python scripts/capture_ptxas.py [--out OUTDIR] [CASE ...]

Each case is an example of the test kernels (tests/data/kernels/gpu_spills.py and
gpu_kernels.py) checked for a GPU target with `spills` on, by vmem-lsp's own worker, as
`check --target <gpu> --spills` runs it: ptxas on the PTX XLA dumped for a Triton kernel,
Mosaic GPU's own printed report for a Mosaic GPU kernel (vmem_lsp/gpu/ptxas.py).
Needs jax's CUDA plugin and ptxas (`pip install 'vmem-lsp[gpu]'`), no GPU. It writes
OUTDIR/CASE.txt: three `#` header lines (target, versions with ptxas's, the example), then
the report as the worker carried it (CapturedCall.ptxas), verbatim, or "(no report: why)".
OUTDIR is by default tests/data/reports/gpu/ptxas.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
KERNELS = ROOT / "tests" / "data" / "kernels"
OUT = ROOT / "tests" / "data" / "reports" / "gpu" / "ptxas"
NO_REPORT = "(no report: "


@dataclass(frozen=True)
class Case:
    name: str
    target: str  # a key of vmem_lsp.gpus.GPUS
    file: str  # under tests/data/kernels
    example: str  # the `# vmem:` example's text, as written there


SPILLS = "gpu_spills.py"
KERNEL_FILE = "gpu_kernels.py"
ONE_WARP = "one_warp_matmul(f32[64, 64], f32[64, 64])"
MATMUL_64 = "triton_matmul(f32[1024, 512], f32[512, 1024], block=64)"
CASES = {
    c.name: c
    for c in [
        *(Case(f"triton-one-warp-{t}", t, SPILLS, ONE_WARP) for t in ("a100", "h100", "l4", "b200")),
        Case("triton-four-warps-a100", "a100", SPILLS, "four_warp_matmul(f32[64, 64], f32[64, 64])"),
        Case("triton-matmul-64-a100", "a100", KERNEL_FILE, MATMUL_64),
        Case("triton-matmul-64-h100", "h100", KERNEL_FILE, MATMUL_64),
        Case("mosaic-copy-h100", "h100", KERNEL_FILE, "mosaic_copy(f32[4096, 128], rows=32)"),
    ]
}


def ptxas_version() -> str:
    from vmem_lsp.gpu.ptxas import find_ptxas

    ptxas = find_ptxas()
    if ptxas is None:
        return "ptxas: none found"
    said = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    return f"ptxas {said[-2] if len(said) > 1 else said[-1]}".replace("Cuda compilation tools, ", "")


def header(case: Case) -> str:
    from vmem_lsp.gpu.targets import gpu

    target = gpu(case.target)
    return (
        f"# target: {case.target} ({target.device_kind}), {target.sm}\n"
        f"# versions: jax {version('jax')}, jax-cuda12-plugin {version('jax-cuda12-plugin')}, {ptxas_version()}\n"
        f"# example: {case.file}: {case.example}\n"
    )


def capture(cases: list[Case]) -> dict[str, str]:
    """Each case's report, from one worker (a fresh one where Mosaic GPU needs it)."""
    from vmem_lsp.compile.backend import runner_for
    from vmem_lsp.config import Settings
    from vmem_lsp.engine import request_for
    from vmem_lsp.source.directives import find_examples

    settings = Settings(jobs=1)
    runner = runner_for(settings)
    found = {}
    try:
        for case in cases:
            path = KERNELS / case.file
            examples, _ = find_examples(path.read_text(), str(path))
            [example] = [e for e in examples if e.text == case.example]
            result = runner.check(request_for(example, case.target, settings, spills=True), settings.limits())
            if result.error or not result.calls:
                found[case.name] = f"{NO_REPORT}the example failed: {result.error})"
                continue
            [call] = result.calls
            found[case.name] = call.ptxas if call.ptxas else f"{NO_REPORT}{call.no_ptxas})"
    finally:
        runner.stop()
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("cases", nargs="*", choices=[[], *CASES], default=[])
    args = parser.parse_args(argv)
    cases = [CASES[name] for name in args.cases or CASES]
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in capture(cases).items():
        (args.out / f"{name}.txt").write_text(header(CASES[name]) + text + "\n")
        print(f"{name}: {text.splitlines()[-1][:120] if text else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
