"""Where an example gets compiled: the one place that turns the settings, and
what the compiles are for, into a runner (which worker, which pool or
cluster) and the cache in front of it.

    CLI run, sweep        runner_for(settings)            a worker, a pool, or the Ray cluster
    tuner API             runner_for(settings, "tuner")   a local pool, even of one
    server, on save       SaveRunners().runner_for(...)   a lane per chip, kept across saves; or Ray
    doctor                doctor_worker, cluster          one worker started by hand; the cluster
    every one             cache_for(settings)             the disk (or shared) cache

The faces (cli, server, api, doctor) import this module and engine.py, never
the worker client, the pools or Ray themselves: a new backend (a managed
environment per jax version, a GPU target) is added here once and every face
gets it. It lives in compile/ because it only assembles what compile/ has,
and engine.py stays the flow (gather, run, diagnose) with no say in where a
compile runs.

Nothing here imports jax or Ray until a runner needs it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, Protocol

from ..compilers import Compiler
from ..families import family_of
from ..results import ExampleResult, PhaseLimits
from .cache import ResultCache
from .client import BackendError, CheckRequest, WorkerClient, WorkerError
from .environments import EnvironmentFailed, ensure
from .interpreter import Interpreter, PythonNotFound, find_python, probe, unusable, worker_command
from .memory import MemoryPlan, PeakLog, worker_peak
from .pool import ChipLanes, WorkerPool, lanes_for, memory_plan

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ..config import Settings
    from .ray_backend import RayPool

__all__ = [
    "BackendError",
    "CheckRequest",
    "LaneRunner",
    "PythonNotFound",
    "ResultCache",
    "Runner",
    "SaveRunners",
    "WorkerError",
    "cache_for",
    "cluster",
    "compilers_for",
    "doctor_worker",
    "local_compiler",
    "find_python",
    "local_interpreter",
    "memory_for",
    "runner_for",
    "worker_command_for",
    "worker_main",
]


class Runner(Protocol):
    """What runs a check: one worker, a pool of them, a lane per chip, a
    cluster. `check` may be called from several threads at once."""

    @property
    def restarts(self) -> int:
        """Workers that died or hung and were replaced, since the start."""
        ...

    def check(self, request: CheckRequest, limits: PhaseLimits | float) -> ExampleResult: ...

    def stop(self) -> None: ...


class LaneRunner(Runner, Protocol):
    """A runner that keeps each chip on one lane (a worker keeps what it
    compiled for its chips): the server runs a save's lanes at once."""

    def lane(self, target: str) -> int: ...


def local_interpreter(settings: Settings) -> Interpreter:
    """The Python a local worker of these settings runs in (compile/interpreter.py);
    BackendError when the configured one is not there."""
    try:
        return find_python(settings.python, settings.python_source, settings.root)
    except PythonNotFound as error:
        raise BackendError(str(error)) from None


def local_command(settings: Settings) -> list[str]:
    """The command of a local worker in the settings' interpreter; BackendError when that
    interpreter cannot run one (no jax, no libtpu, too old a Python), with the fix."""
    interpreter = local_interpreter(settings)
    if not interpreter.own:
        found = probe(interpreter.path)
        packages = sorted({p for t in settings.targets if (p := family_of(t).compiler_package)})
        if why := unusable(interpreter, found, packages):
            raise BackendError(why)
        _announce(interpreter, tuple(sorted((found.packages or {}).items())))
    return worker_command(interpreter)


@functools.lru_cache(maxsize=16)
def _announce(interpreter: Interpreter, packages: tuple) -> None:
    """Once per interpreter and its versions (--verbose, the server's log): which compiler
    the verdicts come from, when it is not vmem-lsp's own."""
    versions = ", ".join(f"{name} {version}" for name, version in packages)
    logger.info("compiling in %s (from %s): %s", interpreter.path, interpreter.source, versions)


def worker_command_for(settings: Settings) -> str | list[str]:
    """The worker command the settings name (an SSH command), else a local worker's."""
    return settings.worker or local_command(settings)


def local_compiler(settings: Settings) -> tuple[Interpreter, dict[str, str | None] | None, str | None]:
    """(interpreter, its jax/jaxlib/libtpu versions, why it could not be asked) of a local
    worker of these settings, without starting one: for --version, doctor and the chip
    figures of that compiler."""
    from ..versions import installed

    interpreter = local_interpreter(settings)
    if interpreter.own:
        return interpreter, installed(), None
    answer = probe(interpreter.path)
    return interpreter, answer.packages, answer.error


def compiler_versions(settings: Settings) -> dict[str, str | None] | None:
    """jax, jaxlib and libtpu of the settings' local interpreter when it is not vmem-lsp's
    own (None: this environment's), for the cache's key."""
    if settings.worker:
        return None
    try:
        interpreter = local_interpreter(settings)
    except BackendError:  # said when the workers start, which comes next
        return None
    return None if interpreter.own else probe(interpreter.path).packages


def own_compiler(settings: Settings) -> Compiler:
    """The jax and libtpu of the settings' local interpreter: the project's compiler."""
    _, packages, _ = local_compiler(settings)
    packages = packages or {}
    return Compiler(packages.get("jax"), packages.get("libtpu"), "the project's")


def compilers_for(settings: Settings, say: Callable[[str], None]) -> list[tuple[Compiler, Settings]]:
    """(compiler, the settings that compile with it) for the project's own compiler, then
    each jax version of `settings.jax` in its managed environment (compile/environments.py),
    made when missing (`say` hears its progress). A version that is the project's own is
    checked once. BackendError, naming the version, when an environment cannot be made."""
    own = own_compiler(settings)
    runs = [(own, settings)]
    for version in settings.jax:
        if version == own.jax:
            say(f"jax {version} is the project's own: checked once")
            continue
        try:
            managed = ensure(version, say)
        except EnvironmentFailed as error:
            raise BackendError(str(error)) from None
        compiler = Compiler(version, managed.packages.get("libtpu"), "managed")
        source = f"the managed environment of jax {version}"
        runs.append((compiler, dataclasses.replace(settings, python=managed.python, python_source=source, jax=())))
    return runs


def cache_for(settings: Settings, enabled: bool = True) -> ResultCache:
    """The cache in front of every runner: the settings' folder or URL."""
    return ResultCache(settings.cache_folder(), enabled=enabled, compiler=compiler_versions(settings))


def memory_for(settings: Settings, jobs: int | None) -> tuple[MemoryPlan, PeakLog]:
    """The memory plan for `jobs` local workers (None: as many as fit), and
    the log their measured peaks go to."""
    plan = memory_plan(settings.cache_folder(), jobs, settings.worker_memory, local=not settings.worker)
    return plan, PeakLog(settings.cache_folder())


def runner_for(settings: Settings, purpose: Literal["check", "tuner"] = "check") -> Runner:
    """The runner for a run of many examples ("check": the CLI's check and
    sweep), or for the tuner API ("tuner"). A check runs on the local worker,
    or a pool when more than one job may run at once or a remote worker should
    fall back to a local one; with backend "ray", on the cluster (BackendError
    when it cannot be used). The tuner always runs on a local pool, even of
    one, which hands each thread's request to an idle worker: its requests
    are traces of milliseconds, which a Ray task's round trip would multiply
    (bench/RESULTS.md), so `backend` is not read for it."""
    if purpose == "check" and settings.backend == "ray":
        return cluster(settings)
    # As many workers as cores and memory allow, each local one watched against its
    # share (a worker command's memory is not this machine's: --verbose says which).
    plan, peaks = memory_for(settings, settings.jobs)
    if purpose == "tuner" or plan.jobs > 1 or settings.worker_fallback:
        fallback = local_command(settings) if settings.worker and settings.worker_fallback else None
        return WorkerPool(
            worker_command_for(settings), plan.jobs, fallback=fallback, share=plan.share_bytes, peaks=peaks
        )
    return WorkerClient(worker_command_for(settings), share=plan.share_bytes, peaks=peaks)


def estimating(command: str | list[str]) -> str | list[str]:
    """The same worker, started with the compiler's cycle estimate on (speed.py)."""
    return f"{command} --estimate" if isinstance(command, str) else [*command, "--estimate"]


def estimate_runner(settings: Settings) -> Runner:
    """Workers whose compiles also give the compiler's cycle estimate: a pool of
    their own, as many as the ordinary ones, so that the profile (which can abort
    libtpu) never runs in a worker whose verdicts are wanted without it."""
    plan, peaks = memory_for(settings, settings.jobs)
    return WorkerPool(estimating(worker_command_for(settings)), plan.jobs, share=plan.share_bytes, peaks=peaks)


def cluster(settings: Settings) -> RayPool:
    """The Ray cluster of the settings, connected; BackendError when Ray is
    missing or the cluster does not answer. Each task asks Ray for what one
    worker was measured to peak at here."""
    from .ray_backend import RayPool

    return RayPool(settings.ray_address, memory=worker_peak(settings.cache_folder()))


def doctor_worker(settings: Settings, start_timeout: float) -> WorkerClient:
    """One worker of the settings (the configured command, else a local one),
    not started: doctor starts it by hand to time and explain the start."""
    return WorkerClient(worker_command_for(settings), start_timeout=start_timeout)


class SaveRunners:
    """The server's runner, kept from save to save: a lane per chip of the
    settings (grown, never shrunk: another file's settings may want them
    back), each local worker watched against its share of the memory as the
    CLI's are; with backend "ray", the cluster (all chips compile at once).
    Made again when the settings name another worker command or cluster.
    Used from the server's compile thread only."""

    def __init__(self) -> None:
        self.runner: ChipLanes | RayPool | None = None
        self.made_for: tuple | None = None

    def runner_for(
        self, settings: Settings, tell: Callable[[str, str], None] = lambda state, message: None
    ) -> LaneRunner:
        """The runner for these settings; `tell(state, message)` hears a
        cluster being reached ("starting", then "ready"). BackendError when
        the cluster cannot be used."""
        key = (
            ("ray", settings.ray_address) if settings.backend == "ray" else ("local", str(worker_command_for(settings)))
        )
        if self.runner is None or self.made_for != key:
            self.stop()
            if settings.backend == "ray":
                tell("starting", f"connecting to the Ray cluster {settings.ray_address or ''}".rstrip())
                pool = cluster(settings)
                self.runner, self.made_for = pool, key
                tell("ready", f"compiling on Ray: {pool.size} CPUs")
            else:
                plan, peaks = memory_for(settings, lanes_for(len(settings.targets), settings.jobs))
                self.runner, self.made_for = (
                    ChipLanes(worker_command_for(settings), share=plan.share_bytes, peaks=peaks),
                    key,
                )
        if isinstance(self.runner, ChipLanes):
            self.runner.grow(lanes_for(len(settings.targets), settings.jobs))
        return self.runner

    def unstarted(self, targets: tuple[str, ...]) -> list[WorkerClient]:
        """The local workers these chips' lanes use that are not running yet
        (none on a cluster), each once: libtpu takes seconds to load, so the
        server starts them all at once, before the first compile."""
        if not isinstance(self.runner, ChipLanes):
            return []
        lanes = self.runner
        return list({id(w): w for w in map(lanes.worker, targets) if not w.running()}.values())

    def any_running(self) -> bool:
        """Whether a local worker runs already (a new lane beside it is no restart of vmem-lsp)."""
        return isinstance(self.runner, ChipLanes) and any(w.running() for w in self.runner.workers)

    def stop(self) -> None:
        if self.runner is not None:
            self.runner.stop()
        self.runner = self.made_for = None


def worker_main(argv: list[str]) -> int:
    """`vmem-lsp worker`: this process becomes a compile worker (imports jax on its first request)."""
    from .worker_server import main

    return main(argv)
