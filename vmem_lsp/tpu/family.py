"""TPU chips through libtpu, as a family (family.Family): the chips and their figures
(chips.py), the worker's deviceless compile (worker.py), the report parser (parse.py), the
layout model and budgets (layout.py, budget.py), the mapping of a report onto the BlockSpecs
(mapping.py), explain's reader (explain.py), the fixes (fixes.py), a sweep's model and
verdicts (sweep.py), the roofline and cycle estimates (speed.py, profile.py), doctor's
tiny compiles (doctor.py).

The worker process imports this module too (to find a target's family and its worker side):
only what names the targets is imported here; each answer imports its module when asked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..family import Family, SweepSize
from . import chips, profile


class TpuFamily(Family):
    name = "tpu"
    platform = "tpu"
    noun = "TPU"
    compiler = "libtpu"
    compiler_package = "libtpu"  # without it the project's Python is refused: the fallback is vmem-lsp's own
    space = "VMEM"
    kernel_words = "a TPU kernel"
    params_modules = ("mosaic", "mosaic_tpu")
    worker_module = "vmem_lsp.tpu.worker"
    # libtpu logs a file per process and level, by default to /tmp/tpu_logs (TMPDIR ignored; an
    # unusable value sends them to /tmp), never removed: an LLO_CHECK abort under the cycle
    # estimate wrote 0.5-1 GB of INFO and ERROR each, and a sweep filled a 62 GB disk.
    log_folder_variable = "TPU_LOG_DIR"
    default_targets = chips.DEFAULT_TARGETS
    model_without_compiler = True  # no libtpu (macOS): the layout model's verdict on a trace
    scoped_limits = True
    headroom_warnings = True
    speed_estimates = True
    doctor_section = "chips"

    def targets(self) -> tuple[str, ...]:
        return tuple(chips.CHIPS)

    def canonical(self, text: str) -> str | None:
        try:
            return chips.chip(text).name
        except ValueError:
            return None

    def label(self, target: str) -> str:
        return chips.chip(target).label

    def prepare_estimates(self) -> str | None:
        return profile.enable()

    def estimate_left(self, folder: str) -> tuple[int | None, int | None]:
        return profile.estimate_in(folder)[0], profile.steps_in(folder)

    def diagnostics(self, example, result, sources):
        from . import mapping

        return mapping.diagnostics(example, result, sources)

    def learn(self, call, result, state):
        from . import budget

        return budget.learn(call, result, state)

    def estimate(self, site, known, target, headroom):
        from . import budget

        return budget.estimated(site, known, target, headroom)

    def model_budget(self, call, target, version=None):
        from . import budget

        return budget.from_compile(call, None, target, version)

    def account_kind(self, call, target):
        from .layout import account_kind

        return account_kind(call, target)

    def fixes(self, problem):
        from . import fixes

        return fixes.fixes(problem)

    def shrinks(self, problem):
        from . import fixes

        return fixes.shrinks(problem, [t for t in problem.targets if problem.family(t) is self])

    def fix_figures(self, problem, calls, target, scale):
        from . import fixes

        return fixes.figures(problem, calls, target, scale)

    def sweep_size(self, calls: Sequence, target: str, version: str | None) -> SweepSize:
        from . import sweep

        return sweep.size(calls, target, version)

    def sweep_verdict(self, item, result):
        from . import sweep

        return sweep.verdict(item, result)

    def roofline(self, traced, target):
        from . import speed

        return speed.example_seconds(traced, target)

    def log_reader(self):
        from . import explain

        return explain.Reader()

    def explained(self, found) -> Any:
        from . import parse

        return parse.parse_report(found.text)

    def explain_text(self, report, found, head, target, site=None):
        from . import explain

        return explain.explain_text(report, found, head, target, site)

    def explain_json(self, report, found, target):
        from . import explain

        return explain.explain_json(report, found, target)

    def placing(self, report, found, target, log_name, sources):
        from . import explain

        return explain.placing(report, found, target, log_name, sources)

    def doctor(self, tiny, limits, version):
        from . import doctor

        return doctor.chip_checks(tiny, limits, version)


TPU = TpuFamily()
