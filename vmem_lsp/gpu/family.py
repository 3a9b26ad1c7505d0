"""NVIDIA GPUs through XLA's CUDA plugin, as a family (family.Family): the targets and their
GpuTargetConfig (targets.py), the worker's compile-only CUDA device and compile (worker.py,
compile.py, kernel.py, ptxas.py), the report parser (report.py), the shared-memory model and
budgets (layout.py, budget.py), the diagnostics (diagnostics.py, spills.py), explain's reader
(explain.py), the fixes (fixes.py), a sweep's figures (sweep.py), doctor's tiny compiles
(doctor.py).

The worker process imports this module too (to find a target's family and its worker side):
only what names the targets is imported here; each answer imports its module when asked."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from typing import Any

from ..family import Family, SweepSize
from . import layout, targets
from .compile import compiling_path, printed_path
from .ptxas import remove_left_dumps


class GpuFamily(Family):
    name = "gpu"
    platform = "gpu"
    noun = "GPU"
    compiler = "XLA's GPU compiler"
    space = "shared memory"
    kernel_words = "a GPU kernel (Triton or Mosaic GPU compiler params)"
    params_modules = ("triton", "mosaic_gpu")
    worker_module = "vmem_lsp.gpu.worker"
    spills_on_request = True
    doctor_section = "gpus"
    log_first = True  # a GPU report is one line: it ends a TPU report being read
    space_in_fix_titles = True
    no_estimate = "the compiler's cycle estimate is libtpu's: a GPU target has none"

    def targets(self) -> tuple[str, ...]:
        return tuple(targets.GPUS)

    def canonical(self, text: str) -> str | None:
        return targets.gpu(text).name if targets.is_gpu(text) else None

    def label(self, target: str) -> str:
        return targets.gpu(target).label

    def decode_facts(self, data: Any) -> Any:
        return layout.decode_facts(data)

    def diagnostics(self, example, result, sources):
        from . import diagnostics

        return diagnostics.diagnostics(example, result, sources)

    def ended(self, example, result, sources):
        from . import diagnostics

        return diagnostics.ended(example, result, sources)

    def left_by_crash(self, pid: int) -> tuple[list[str], dict]:
        """What a GPU compile that ended worker `pid` printed, and what it said it was compiling."""
        printed, where = read_left(printed_path(pid)), read_left(compiling_path(pid))
        try:
            said = json.loads(where or "{}")
        except ValueError:
            said = {}
        return printed.splitlines(), said if isinstance(said, dict) else {}

    def clean_after(self, pid: int) -> None:
        remove_left_dumps(pid)
        for path in (compiling_path(pid), printed_path(pid)):
            with contextlib.suppress(OSError):
                os.unlink(path)

    def learn(self, call, result, state):
        from . import budget

        return budget.learn(call, result, state)

    def estimate(self, site, known, target, headroom):
        from . import budget

        return budget.estimated(site, known, target)

    def model_budget(self, call, target, version=None):
        from . import budget

        return budget.from_gpu_compile(call, None, target)

    def model_doubt(self, call, target):
        from . import not_compiled

        return not_compiled.doubt(call, targets.gpu(target))

    def fixes(self, problem):
        from . import fixes

        return fixes.fixes(problem)

    def shrinks(self, problem):
        from . import fixes

        return fixes.shrinks(problem, [t for t in problem.targets if problem.family(t) is self])

    def fix_figures(self, problem, calls, target, scale):
        from . import fixes

        return fixes.figures(problem, calls, target, scale)

    def compiled_figures(self, problem, variant):
        from . import fixes

        return fixes.compiled_figures(problem, variant)

    def sweep_size(self, calls: Sequence, target: str, version: str | None) -> SweepSize:
        from . import sweep

        return sweep.size(calls, target)

    def sweep_verdict(self, item, result):
        from . import sweep

        return sweep.verdict(item, result)

    def log_reader(self):
        from . import explain

        return explain.Reader()

    def explained(self, found) -> Any:
        from . import explain

        return explain.parsed(found.text)

    def explain_text(self, report, found, head, target, site=None):
        from . import explain

        return explain.explain_text(report, head, target, found.frames)

    def explain_json(self, report, found, target):
        from . import explain

        return explain.explain_json(report, found.line, target, found.frames)

    def placing(self, report, found, target, log_name, sources):
        from . import explain

        return explain.placing(report, found, target, log_name, sources)

    def doctor(self, tiny, limits, version):
        from . import doctor

        return doctor.gpu_checks(tiny, limits)


def read_left(path: str) -> str:
    """A file a GPU compile left for the client, read; "" when there is none."""
    try:
        with open(path, errors="replace") as left:
            return left.read()
    except OSError:
        return ""


GPU = GpuFamily()
