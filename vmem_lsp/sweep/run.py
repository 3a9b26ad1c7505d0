"""A sweep's I/O: trace every config (no compile) in the worker pool, size
each with the layout model, then compile what the model cannot decide, on
all the pool's cores and through the disk cache (decide.Plan says which)."""

from __future__ import annotations

import dataclasses
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ..compile.backend import cache_for, estimate_runner, runner_for
from ..compile.cache import ResultCache
from ..config import Settings
from ..engine import Progress, Silent, request_for
from ..families import family_of
from ..results import ExampleResult
from . import rank as speed
from .decide import CompileBudget, Config, Plan, Verdict, size_up
from .spec import Configs, SweepError

UNKNOWN_PARAMETER = re.compile(r"unexpected keyword argument '(\w+)'|got an unexpected keyword argument (\S+)")


S = TypeVar("S", bound=Configs)  # what was swept: a Sweep (its axes plot), or the API's listed configs


@dataclass
class SweepOutcome(Generic[S]):
    sweep: S
    verdicts: list[Verdict] = field(default_factory=list)
    compiles: int = 0  # configs x chips sent to the compiler (a cached answer counts: it was compiled once)
    cache_hits: int = 0
    traces: int = 0
    seconds: float = 0.0
    broken: dict = field(default_factory=dict)  # chip -> why monotonicity was turned off
    estimates: int = 0  # configs x chips the compiler estimated for --rank speed (a cached answer counts)
    estimate_cache_hits: int = 0
    no_estimates: dict = field(default_factory=dict)  # chip -> why its configs have no estimate, said once
    caveats: dict = field(default_factory=dict)  # chip -> why its estimates may not rank as a run would, once
    # chip -> why no compiler for it is here (VMEM012's words), said once: its configs the model did
    # not decide were not checked, never guessed (a sweep with one exits 1)
    no_compiler: dict = field(default_factory=dict)

    @property
    def configs_total(self) -> int:
        return len(self.verdicts)


def check_parameters(traced: list[ExampleResult], sweep: Configs) -> None:
    """A parameter the function does not take fails every trace the same way:
    say so once, before anything compiles."""
    errors = [r.error for r in traced if r.error]
    if traced and len(errors) == len(traced):
        first = errors[0]
        if (match := UNKNOWN_PARAMETER.search(first)) is not None:
            name = (match.group(1) or match.group(2)).strip("'\"")
            raise SweepError(f"{sweep.example.text.split('(')[0]} takes no parameter {name!r}: {first.splitlines()[0]}")
        raise SweepError(f"no config of the sweep runs: {first.strip().splitlines()[0]}")


def run_sweep(
    sweep: S,
    settings: Settings,
    *,
    budget: int | None = None,
    use_cache: bool = True,
    worker=None,
    progress: Progress | None = None,
    rank: bool = False,
    rank_top: int | None = None,
) -> SweepOutcome[S]:
    """Every config of `sweep` on every chip of `settings`; `progress` (engine.Progress)
    is told of the traces, then of the compiles. With `rank`, the configs that fit
    are ranked by the compiler's cycle estimate, the best `rank_top` of each chip's
    roofline (all when None) estimated (rank_speed)."""
    progress = progress or Silent()
    started = time.perf_counter()
    outcome = SweepOutcome(sweep)
    cache = cache_for(settings, enabled=use_cache)  # keyed by the worker's compiler, as check's is
    own = worker is None
    worker = worker or runner_for(settings)
    lanes = getattr(worker, "size", 1)

    def run(request) -> ExampleResult:
        result = cache.get(request)
        if result is not None:
            outcome.cache_hits += request.compile
            return result
        result = worker.check(request, settings.limits())
        cache.put(request, result)
        return result

    def in_parallel(function, items):
        if lanes > 1 and len(items) > 1:
            with ThreadPoolExecutor(lanes) as pool:
                return list(pool.map(function, items))
        return [function(i) for i in items]

    try:
        configs = sweep.configs()
        jobs = [(n, config, target) for target in settings.targets for n, config in enumerate(configs)]

        def trace(job):
            number, config, target = job
            request = dataclasses.replace(request_for(sweep.example_for(config), target, settings), compile=False)
            item = Config(number, config, target, run(request))
            progress.advance(f"traced {target}")
            return item

        progress.start(len(jobs))
        items = in_parallel(trace, jobs)
        outcome.traces = len(items)
        check_parameters([i.traced for i in items], sweep)
        for item in items:
            if not item.traced.error:
                if not item.traced.calls:
                    item.traced = dataclasses.replace(item.traced, error="the example reaches no pallas_call")
                else:
                    size_up(item, family_of(item.target))

        unchecked: list[tuple[str, str]] = []  # (chip, why) of each compile that found no compiler

        def compile_one(item: Config) -> ExampleResult:
            result = run(request_for(sweep.example_for(item.config), item.target, settings))
            if result.error_kind == "no_compiler":
                unchecked.append((item.target, result.error or "no compiler here"))
            progress.advance(f"compiled {item.target}")
            return result

        def compile_batch(chosen: list[Config]) -> list[ExampleResult]:
            return in_parallel(compile_one, chosen)

        progress.start(
            sum(1 for i in items if i.model_says is None and not i.traced.error)
        )  # at most this many compiles
        # Every chip's plan at once: the pool's lanes stay busy while one chip waits for its batch.
        shared = CompileBudget(budget)
        plans = [
            Plan([i for i in items if i.target == target], compile_batch, family_of(target), budget=shared, batch=lanes)
            for target in settings.targets
        ]
        verdicts = in_parallel(Plan.run, plans)  # one worker (no pool) takes one request at a time
        for target, plan, decided in zip(settings.targets, plans, verdicts):
            outcome.verdicts += decided
            outcome.compiles += plan.compiles - sum(chip == target for chip, _ in unchecked)
            if plan.broken:
                outcome.broken[target] = plan.broken[0]
        for chip, why in unchecked:
            outcome.no_compiler.setdefault(chip, why)
        if rank:
            outcome.verdicts = rank_speed(
                outcome,
                items,
                lambda item: request_for(sweep.example_for(item.config), item.target, settings),
                settings,
                cache,
                rank_top,
                progress,
            )
    finally:
        if own:
            worker.stop()
    outcome.seconds = time.perf_counter() - started
    return outcome


def loops_unknown(item: Config) -> bool:
    """Whether the config's kernels loop a number of times known only at run time (its trace)."""
    return any(call.loops_unknown for call in item.traced.calls)


def rank_speed(
    outcome: SweepOutcome,
    items: list[Config],
    request_of,
    settings: Settings,
    cache: ResultCache,
    top: int | None,
    progress: Progress,
) -> list[Verdict]:
    """The verdicts again, each config that fits with its roofline, the compiler's
    cycle estimate (the best `top` of its chip by roofline) and its rank on its chip.
    Estimates run in workers of their own (the profile can abort libtpu); a chip
    whose compiles abort ABORTS_BEFORE_GIVING_UP times in a row, none estimated,
    is not tried further, and says why once (outcome.no_estimates)."""
    by_chip: dict[str, list[Config]] = {}
    for item in items:
        if item.verdict is not None and item.verdict.fits:
            by_chip.setdefault(item.target, []).append(item)
    # The roofline does not see a loop of run-time length (the trips the estimate counts from the
    # example's values): it cannot screen such a kernel's configs, so every one is estimated.
    screened = {target: None if any(loops_unknown(i) for i in fitting) else top for target, fitting in by_chip.items()}
    chosen: dict[int, Verdict] = {}
    runner = None
    try:
        progress.start(sum(len(v) if (n := screened[t]) is None else min(n, len(v)) for t, v in by_chip.items()))
        for target, fitting in by_chip.items():
            family = family_of(target)
            seconds = {i.number: family.roofline(i.traced, target) for i in fitting}
            by_number = {i.number: i for i in fitting}
            estimates: dict[int, speed.Estimate] = {}
            aborts = 0
            if not family.speed_estimates:  # the estimate is libtpu's static profile
                outcome.no_estimates[target] = family.no_estimate
            for number in speed.screen(seconds, screened[target]) if family.speed_estimates else []:
                item = by_number[number]
                if aborts >= speed.ABORTS_BEFORE_GIVING_UP and not any(e.cycles for e in estimates.values()):
                    estimates[number] = speed.Estimate(None, f"not tried: {outcome.no_estimates[target]}")
                    continue
                request = dataclasses.replace(request_of(item), estimate=True)
                result = cache.get(request)
                outcome.estimate_cache_hits += result is not None
                if result is None:
                    runner = runner or estimate_runner(settings)
                    result = runner.check(request, settings.limits())
                    if not result.error or result.estimate_left is not None:  # libtpu aborts alike each time
                        cache.put(request, result)
                outcome.estimates += 1
                progress.advance(f"estimated {target}")
                found = estimates[number] = speed.estimate_from(result, item.traced)
                said = outcome.caveats.get(target)
                if found.caveat and (said is None or found.caveat.startswith(said)):  # the first, or more of it
                    outcome.caveats[target] = found.caveat
                if found.aborted:
                    aborts += 1
                    outcome.no_estimates.setdefault(target, f"libtpu aborted while estimating ({found.why_none})")
            ranked = speed.ranks({n: e.cycles for n, e in estimates.items() if e.cycles is not None})
            for item in fitting:
                said = estimates.get(item.number)
                assert item.verdict is not None
                chosen[id(item.verdict)] = dataclasses.replace(
                    item.verdict,
                    roofline_seconds=seconds[item.number],
                    estimated_cycles=said.cycles if said else None,
                    no_estimate=(said.why_none if said else f"not among the {screened[target]} best by roofline"),
                    speed_rank=ranked.get(item.number),
                    estimate_caveat=said.caveat if said else None,
                    estimate_loops=said.loops if said else None,
                )
    finally:
        if runner is not None:
            runner.stop()
    return [chosen.get(id(v), v) for v in outcome.verdicts]
