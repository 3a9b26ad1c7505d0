"""For tuners that propose one config at a time (Optuna's trials, a hand-written loop): does it fit?

    from vmem_lsp.tuners.filter import FitFilter

    fits = FitFilter(matmul, (x, y), targets="v6e")

    def objective(trial):
        config = {"bm": trial.suggest_categorical("bm", [256, 512, 1024]), ...}
        verdict = fits(config)
        if not verdict.fits:
            raise optuna.TrialPruned(verdict.why_not)  # never compiled, never timed
        return run_and_time(config)

The partial order first, as tpu-inference's tuner and `vmem-lsp sweep` use it: a config no smaller
in every block size than one that overflows overflows; one no larger than one that fits, fits
(knobs that are not numbers must be equal to compare). Only what it does not decide goes to
vmem-lsp (`api.decide` on that one config: the layout model where it is sure, else the compiler).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..api import Decided, Verdict, decide
from ..sweep.decide import value_no_larger


def below(a: Mapping[str, object], b: Mapping[str, object]) -> bool:
    """`a` is no larger than `b` in every knob, as the sweep orders values (numbers by size, the rest equal)."""
    return a.keys() == b.keys() and all(value_no_larger(a[key], b[key]) for key in a)


@dataclass
class FitFilter:
    """Whether `fn(*args, **config)` fits on every target; remembers what it decided."""

    fn: Callable[..., object]
    args: Sequence[object]
    targets: str | tuple[str, ...] = "v6e"
    decided: list[Decided] = field(default_factory=list)  # what vmem-lsp was asked, in order
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def asked(self) -> int:
        """Configs vmem-lsp was asked about (the partial order decided the others)."""
        return len(self.decided)

    def __call__(self, config: Mapping[str, object]) -> Decided:
        config = dict(config)
        known = self.by_order(config)
        if known is not None:
            return known
        [found] = decide(self.fn, self.args, [config], self.targets)
        with self.lock:
            self.decided.append(found)
        return found

    def by_order(self, config: dict) -> Decided | None:
        """A verdict the configs decided so far imply, or None."""
        with self.lock:
            for earlier in self.decided:
                over = next((v for v in earlier.verdicts if v.fits is False), None)
                if over is not None and below(earlier.config, config):
                    why = f"no smaller than {earlier.config}, which does not fit ({earlier.why_not})"
                    return Decided(config, (Verdict(False, None, None, (), "monotonicity", over.target, why=why),))
                if earlier.fits and below(config, earlier.config):
                    why = f"no larger than {earlier.config}, which fits"
                    return Decided(
                        config,
                        tuple(
                            Verdict(True, None, None, (), "monotonicity", v.target, why=why) for v in earlier.verdicts
                        ),
                    )
        return None
