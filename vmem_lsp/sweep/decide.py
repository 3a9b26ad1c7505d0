"""Which configs of a sweep fit, with as few compiles as can be had and no
guess: pure, the compiles come in through a function.

1. The target's family's model sizes every traced config (Family.sweep_size).
   Where it may decide (on a TPU chip: its total is further from the limit
   than the layout model's measured error for that chip and kind of kernel,
   and every block tiles legally), it decides.
2. The rest are compiled, nearest the frontier first: a config whose windows
   are each no larger than those of one that fits, fits too; one whose
   windows are each no smaller than those of one that overflows, overflows
   (monotonicity). Each compile is checked against that rule: a pair of
   compiled configs that breaks it turns it off for the chip, and what it
   decided is compiled instead.
3. A compile budget stops the compiles; what is left is "undecided".
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..budget import Budget
from ..results import ExampleResult

if TYPE_CHECKING:
    from ..family import Family

OTHER_PLATFORM = "its compiler params are another platform's (a Triton kernel on a TPU chip): not compiled for it"


@dataclass(frozen=True)
class Verdict:
    """One config on one chip."""

    config: dict
    target: str
    fits: bool | None  # None: undecided, or it did not compile for another reason
    used: int | None  # bytes: the compiler's figure when it decided, else the model's
    limit: int | None
    decided_by: str  # "compiler" | "model" | "monotonicity" | "undecided" | "error"
    why: str = ""
    error: str | None = None  # the compile error or trace error, when there was one
    roofline_seconds: float | None = None  # the screen's time at best (--rank speed), for a config that fits
    estimated_cycles: int | None = None  # the compiler's static estimate, all the example's kernels
    no_estimate: str | None = None  # why a config that fits has no estimate (not screened in, libtpu aborted...)
    speed_rank: int | None = None  # 1: the fewest cycles among the configs of this chip that fit
    estimate_caveat: str | None = None  # why the estimate may not rank as a run would (rank.LOOPS_CAVEAT)
    estimate_loops: str | None = None  # its loops' trips counted from the example's values, and their cycles

    @property
    def headroom(self) -> int | None:
        return None if self.used is None or self.limit is None else self.limit - self.used


@dataclass
class Config:
    """What the decision knows of one (config, chip)."""

    number: int
    config: dict
    target: str
    traced: ExampleResult
    model_total: int = 0
    model_limit: int = 0
    model_says: bool | None = None
    model_why: str = ""  # why the model alone decides it, when it does
    costs: tuple = ()  # per call: sorted (kind, index, bytes) of the model's windows, scratch, scoped
    verdict: Verdict | None = None
    compiled: ExampleResult | None = None


def tightest(budgets_) -> Budget:
    """Of a config's kernels, the one nearest its limit (or furthest over): the config's figure."""
    return max(budgets_, key=lambda b: b.total / max(b.limit, 1))


def size_up(item: Config, family: Family) -> None:
    """The model's total, limit and verdict for a traced config, by its target's family."""
    if all(c.other_platform for c in item.traced.calls):
        item.verdict = Verdict(
            item.config, item.target, None, None, None, "error", "not compiled here", error=OTHER_PLATFORM
        )
        return
    size = family.sweep_size(item.traced.calls, item.target, item.traced.libtpu)
    item.model_total, item.model_limit, item.model_says, item.costs = size.total, size.limit, size.says, size.costs
    item.model_why = size.why


def value_no_larger(x, y) -> bool:
    """A config value no larger than another: numbers by size, tuples item by
    item; anything else (a string, a flag) only when equal."""
    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
        return x <= y
    if isinstance(x, tuple) and isinstance(y, tuple) and len(x) == len(y):
        return all(value_no_larger(p, q) for p, q in zip(x, y))
    return x == y


def no_larger(a: Config, b: Config) -> bool:
    """a needs no more VMEM than b: each of its values is no larger (a block
    size the windows do not show, such as flash attention's inner block_k,
    still sizes the body's scratch) and each of its windows, scratch and
    scoped buffers is no larger (the same kernels with the same parts)."""
    if len(a.costs) != len(b.costs) or not all(value_no_larger(a.config[k], b.config[k]) for k in a.config):
        return False
    for (name_a, costs_a), (name_b, costs_b) in zip(a.costs, b.costs):
        if name_a != name_b or [c[:2] for c in costs_a] != [c[:2] for c in costs_b]:
            return False
        if any(x[2] > y[2] for x, y in zip(costs_a, costs_b)):
            return False
    return True


def compiled_verdict(item: Config, result: ExampleResult, family: Family) -> Verdict:
    """What a compile said: fits, overflows (its figures), or another error (the family reads it)."""
    if result.error:
        return Verdict(
            item.config, item.target, None, None, None, "error", "the example did not run", error=result.error
        )
    return family.sweep_verdict(item, result)


def error_verdict(item: Config, text: str | None) -> Verdict:
    """A config that does not compile for another reason than memory: the error's first line."""
    first = (text or "").strip().split("\n")[0]
    return Verdict(item.config, item.target, None, None, None, "error", "does not compile", error=first)


def model_verdict(item: Config) -> Verdict:
    """What the model alone decided, with why it may."""
    return Verdict(
        item.config, item.target, item.model_says, item.model_total, item.model_limit, "model", item.model_why
    )


class CompileBudget:
    """Compiles left, shared by the plans of every chip running at once."""

    def __init__(self, total: int | None):
        self.left = total
        self.lock = threading.Lock()

    def take(self, wanted: int) -> int:
        """How many of `wanted` compiles may run (all of them with no budget)."""
        with self.lock:
            if self.left is None:
                return wanted
            granted = min(wanted, self.left)
            self.left -= granted
            return granted

    def give_back(self, unused: int) -> None:
        with self.lock:
            if self.left is not None:
                self.left += unused


@dataclass
class Plan:
    """The decision for one chip, step by step; `compile_batch` is the only I/O."""

    items: list[Config]
    compile_batch: Callable[[list[Config]], list[ExampleResult]]
    family: Family  # the chip's: its compiler's words read into verdicts
    budget: CompileBudget = field(default_factory=lambda: CompileBudget(None))
    batch: int = 1
    monotone: bool = True
    compiles: int = 0
    broken: list[str] = field(default_factory=list)  # pairs that broke monotonicity

    def open(self) -> list[Config]:
        return [i for i in self.items if i.verdict is None]

    def run(self) -> list[Verdict]:
        for item in self.items:
            if item.verdict is None and item.traced.error:
                item.verdict = Verdict(
                    item.config,
                    item.target,
                    None,
                    None,
                    None,
                    "error",
                    "the example did not trace",
                    error=item.traced.error,
                )
            elif item.verdict is None and item.model_says is not None:
                item.verdict = model_verdict(item)
        while self.open() and (room := self.budget.take(self.batch)):
            chosen = self.choose(room)
            if len(chosen) < room:
                self.budget.give_back(room - len(chosen))
            results = self.compile_batch(chosen)
            self.compiles += len(chosen)
            for item, result in zip(chosen, results):
                item.compiled, item.verdict = result, compiled_verdict(item, result, self.family)
            if self.monotone and not self.consistent():
                self.monotone = False
                for item in self.items:
                    if item.verdict is not None and item.verdict.decided_by == "monotonicity":
                        item.verdict = None
            elif self.monotone:
                for item in chosen:
                    self.imply(item)
        for item in self.open():
            item.verdict = Verdict(
                item.config,
                item.target,
                None,
                item.model_total,
                item.model_limit,
                "undecided",
                "the compile budget ran out; the model alone cannot say",
            )
        return [i.verdict for i in self.items if i.verdict is not None]  # every one, the open ones just now

    def choose(self, room: int) -> list[Config]:
        """The open configs whose verdict would settle the most others: the
        middle of the open ones, as a bisection; ties nearest the limit."""
        candidates = self.open()

        def settles(item: Config) -> tuple:
            if not self.monotone:
                return (0, -abs(item.model_total - item.model_limit))
            below = sum(no_larger(o, item) for o in candidates if o is not item)
            above = sum(no_larger(item, o) for o in candidates if o is not item)
            return (min(below, above), below + above, -abs(item.model_total - item.model_limit))

        ranked = sorted(candidates, key=settles, reverse=True)
        chosen: list[Config] = []
        for item in ranked:  # a batch of configs that do not decide each other
            if len(chosen) == room:
                break
            if not any(no_larger(item, c) or no_larger(c, item) for c in chosen):
                chosen.append(item)
        return chosen or ranked[:room]

    def imply(self, item: Config) -> None:
        verdict = item.verdict
        if verdict is None or verdict.decided_by != "compiler" or verdict.fits is None:
            return
        for other in self.open():
            if verdict.fits and no_larger(other, item):
                other.verdict = replace(
                    verdict,
                    config=other.config,
                    used=other.model_total,
                    limit=other.model_limit,
                    decided_by="monotonicity",
                    why=f"no block larger than {describe(item.config)}, which fits",
                )
            elif not verdict.fits and no_larger(item, other):
                other.verdict = replace(
                    verdict,
                    config=other.config,
                    used=other.model_total,
                    limit=other.model_limit,
                    decided_by="monotonicity",
                    why=f"no block smaller than {describe(item.config)}, which overflows",
                )

    def consistent(self) -> bool:
        """No compiled config that fits is at least as large as one that overflows."""
        compiled = [
            (i, v) for i in self.items if (v := i.verdict) and v.decided_by == "compiler" and v.fits is not None
        ]
        for small, small_verdict in compiled:
            for large, large_verdict in compiled:
                if small is not large and not small_verdict.fits and large_verdict.fits and no_larger(small, large):
                    self.broken.append(f"{describe(small.config)} overflows but {describe(large.config)} fits")
                    return False
        return True


def describe(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())
