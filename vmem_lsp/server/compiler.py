"""Compiling off the editor's loop: one background thread owns the workers,
takes jobs from a queue, and hands results back to the loop. A newer job for
a document supersedes its older one. A job's chips compile at once, each on
its own worker, where there are cores for it (compile.backend.SaveRunners)."""

from __future__ import annotations

import asyncio
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..compile.backend import BackendError, LaneRunner, ResultCache, SaveRunners, cache_for
from ..config import Settings
from ..engine import model_judged, run_example
from ..results import ExampleResult
from ..source.directives import Example


class Superseded(Exception):
    """A newer job for the same document arrived: stop this one's extra work."""


@dataclass
class CompileJob:
    uri: str
    version: int
    settings: Settings
    examples: list[Example]
    use_cache: bool = True
    cancelled: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class CompileEvent:
    """For progress and the status item: "starting", "compiling", "ready", "crashed", "no_compiler"."""

    state: str
    message: str
    done: int = 0
    total: int = 0
    targets: tuple[str, ...] = ()  # the chips the job checks, wherever they were configured
    internal: str | None = None  # a bug of ours ended the job: its traceback, counted by the server


class CompileService:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_result: Callable[[CompileJob, list[tuple[Example, ExampleResult]]], None],
        on_event: Callable[[CompileEvent], None],
        on_fixes: Callable[[CompileJob, list | None, bool], None] | None = None,
    ):
        self.loop = loop
        self.on_result = on_result
        self.on_event = on_event
        self.on_fixes = on_fixes
        self.pending: dict[str, CompileJob] = {}
        self.current: CompileJob | None = None
        self.wakeup = threading.Condition()
        self.stopping = False
        self.runners = SaveRunners()
        self.estimators: tuple | None = None  # (worker command, pool) with the cycle estimate on: faster-fixes
        self.thread = threading.Thread(target=self._run, name="vmem-lsp-compile", daemon=True)
        self.thread.start()

    # -- called from the loop ---------------------------------------------------------
    def submit(self, job: CompileJob) -> None:
        with self.wakeup:
            if self.current is not None and self.current.uri == job.uri:
                self.current.cancelled.set()
            old = self.pending.pop(job.uri, None)
            if old is not None:
                old.cancelled.set()
            self.pending[job.uri] = job
            self.wakeup.notify()

    def warm_up(self, settings: Settings) -> None:
        """Start the worker now: libtpu takes seconds to load."""
        self.submit(CompileJob("<warm-up>", 0, settings, []))

    def stop(self) -> None:
        with self.wakeup:
            self.stopping = True
            for job in [*self.pending.values(), *([self.current] if self.current else [])]:
                job.cancelled.set()
            self.wakeup.notify()
        self.runners.stop()
        self._stop_estimators()
        self.thread.join(timeout=5)

    def _stop_estimators(self) -> None:
        if self.estimators is not None:
            self.estimators[1].stop()
            self.estimators = None

    def _estimator_for(self, settings: Settings):
        """The pool whose compiles give the cycle estimate, kept from save to save
        (libtpu takes seconds to load); started when faster-fixes first asks."""
        from ..compile.backend import estimate_runner, worker_command_for

        made_for = str(worker_command_for(settings))
        if self.estimators is None or self.estimators[0] != made_for:
            self._stop_estimators()
            self.estimators = (made_for, estimate_runner(settings))
        return self.estimators[1]

    # -- the thread ------------------------------------------------------------------
    def _call(self, callback: Callable, *args) -> None:
        """Run callback(*args) on the loop, in the order asked."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(callback, *args)

    def _emit(self, event: CompileEvent) -> None:
        self._call(self.on_event, event)

    def _next(self) -> CompileJob | None:
        with self.wakeup:
            while not self.pending and not self.stopping:
                self.wakeup.wait()
            if self.stopping:
                return None
            uri = next(iter(self.pending))
            self.current = self.pending.pop(uri)
            return self.current

    def _workers_for(self, settings: Settings) -> LaneRunner:
        """The runner for these settings' chips (compile.backend.SaveRunners),
        each local worker they use started; BackendError (no ray, no cluster)
        ends the job with its message on the status."""
        workers = self.runners.runner_for(settings, lambda state, message: self._emit(CompileEvent(state, message)))
        idle = self.runners.unstarted(tuple(settings.targets))
        if idle:  # libtpu takes seconds to load: every worker loads it at once
            # Another chip's lane beside a running worker is no start of vmem-lsp: the status
            # says "starting" only when no worker runs yet (the editor reads it as a restart).
            first = not self.runners.any_running()
            with ThreadPoolExecutor(len(idle), thread_name_prefix="vmem-lsp-start") as starting:
                list(starting.map(lambda w: self._start(w, first), idle))
        return workers

    def _start(self, worker, announce: bool = True) -> None:
        if announce:
            self._emit(CompileEvent("starting", "starting the TPU compiler worker"))
        try:
            hello = worker.start()
            self._emit(
                CompileEvent(
                    "ready",
                    f"worker ready (pid {hello.get('pid')}): jax {hello.get('jax')}, libtpu {hello.get('libtpu')}",
                )
            )
        except Exception as error:  # reported, and the next job tries again
            self._emit(CompileEvent("crashed", f"the worker did not start: {error}"))

    def _run(self) -> None:
        while (job := self._next()) is not None:
            try:
                self._run_job(job)
            except BackendError as error:  # no ray, no cluster: said as it is
                self._emit(CompileEvent("crashed", str(error)))
            except Exception as error:  # never let one job end the thread; a bug of ours, counted
                self._emit(CompileEvent("crashed", f"compile job failed: {error!r}", internal=traceback.format_exc()))
            finally:
                with self.wakeup:
                    self.current = None

    def _run_job(self, job: CompileJob) -> None:
        workers = self._workers_for(job.settings)
        if not job.examples:
            return
        cache = cache_for(job.settings, enabled=job.use_cache)
        targets = tuple(job.settings.targets)
        pairs = [(example, target) for example in job.examples for target in targets]
        total = len(pairs)
        results: list = [None] * total
        done, counting = 0, threading.Lock()
        restarts = workers.restarts

        def run_lane(numbered: list[tuple[int, Example, str]]) -> None:
            """This lane's pairs, one after another; the other lanes' meanwhile."""
            nonlocal done
            for number, example, target in numbered:
                if job.cancelled.is_set() or self.stopping:
                    return
                announce = lambda target=target, example=example, done=done: self._emit(
                    CompileEvent("compiling", f"{target}: {example.text}", done, total, targets)
                )
                result, _ = run_example(example, target, job.settings, cache, workers, announce)
                results[number] = (example, result)
                with counting:
                    done += 1

        lanes: dict[int, list] = {}
        for number, (example, target) in enumerate(pairs):
            lanes.setdefault(workers.lane(target), []).append((number, example, target))
        if len(lanes) == 1:
            run_lane(*lanes.values())
        else:
            with ThreadPoolExecutor(len(lanes), thread_name_prefix="vmem-lsp-lane") as running:
                for future in [running.submit(run_lane, numbered) for numbered in lanes.values()]:
                    future.result()  # a lane's exception, raised here
        if None in results:  # a lane stopped early: a newer job, or the server, is waiting
            return
        if workers.restarts != restarts:
            self._emit(
                CompileEvent(
                    "crashed",
                    f"the worker died or hung {workers.restarts - restarts} time(s) and was restarted",
                    targets=targets,
                )
            )
        missing = [r.error for _, r in results if r.error_kind == "no_compiler" and r.error]
        if missing:  # not checked (VMEM012, an error): what to install, in a window
            self._emit(CompileEvent("no_compiler", missing[0], total, total, targets))
        elif any(model_judged(c) for _, r in results for c in r.calls):  # a family's model instead (no libtpu)
            self._emit(
                CompileEvent("no_compiler", "no compiler here: the model's estimates only", total, total, targets)
            )
        else:
            self._emit(CompileEvent("ready", f"compiled {total} example x target pair(s)", total, total, targets))
        if job.cancelled.is_set():
            return
        self._call(self.on_result, job, results)
        if self.on_fixes is not None:
            planned = None
            try:
                planned = self._search_fixes(job, results, cache, workers)
            finally:  # told even when superseded or failed: requests waiting on the search go on
                self._call(self.on_fixes, job, None if job.cancelled.is_set() else planned, True)

    def _search_fixes(self, job: CompileJob, results, cache: ResultCache, workers: LaneRunner) -> list | None:
        """After the verdict is out: find fixes for what overflows, verified by
        compiling. The candidates are told (on_fixes(job, planned, False)) while
        they are compiled. None when a newer job stopped the search."""
        from ..engine import SourceFiles, cached_runner
        from ..fixes.plan import overflowing, plan

        triples = [(example, result.target, result) for example, result in results]
        if not overflowing(triples):
            return []
        self._emit(CompileEvent("compiling", "looking for fixes that fit", targets=tuple(job.settings.targets)))
        sources = SourceFiles()
        run = cached_runner(cache, workers, job.settings.limits())

        def unless_superseded(run):
            def run_it(request):
                if job.cancelled.is_set() or self.stopping:
                    raise Superseded()  # a newer save waits: its verdict comes first
                return run(request)

            return run_it

        def progress(example, fixes):
            if self.on_fixes is not None:
                self._call(self.on_fixes, job, [(example, fixes)], False)

        estimator = self._estimator_for(job.settings) if job.settings.faster_fixes else None
        try:
            planned = plan(
                triples,
                job.settings.targets,
                sources.text,
                unless_superseded(run),
                sources.sites_of,
                progress=progress,
                estimate=estimator and unless_superseded(cached_runner(cache, estimator, job.settings.limits())),
            )
        except Superseded:
            return None
        self._emit(CompileEvent("ready", f"fixes found for {sum(bool(f) for _, f in planned)} example(s)"))
        return planned
