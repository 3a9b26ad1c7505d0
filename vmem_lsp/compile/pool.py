"""Workers for more than one compile at once. `WorkerPool`, for checks over
many files and for fix searches: each job runs on an idle worker; one that
dies or hangs is replaced and the job retried once, then reported; a remote
pool can fall back to a local worker. `ChipLanes`, for the server's save: each
chip always on the same worker, the chips of one save compiled at once."""

from __future__ import annotations

import os
import queue
import threading

from ..results import ExampleResult, PhaseLimits
from . import memory
from .client import CheckRequest, WorkerClient

# A crash may be the machine's (a lost connection, libtpu's own); a limit
# overrun is the example's own, and retrying it only doubles the wait for its
# message. So is a crash in the example's own Python (faulthandler named its
# frame: the result's error_origin): see retried().
RETRIED = ("crashed",)


def retried(result: ExampleResult) -> bool:
    """Whether a failed check is worth once more in a fresh worker."""
    return result.error_kind in RETRIED and result.error_origin is None


def usable_cores() -> int:
    """The cores this process may run on (a container's or taskset's share), not the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no sched_getaffinity: macOS
        return os.cpu_count() or 1


def default_size(cache_folder: str | None = None) -> int:
    """Cores minus one (a compile is nearly single-threaded; leave one for the
    editor), and no more than the memory available holds at a worker's peak
    (measured for `cache_folder`, else 1.2 GB), at least one."""
    return memory_plan(cache_folder).jobs


def memory_plan(
    cache_folder: str | None = None, jobs: int | None = None, share: int | None = None, local: bool = True
) -> memory.MemoryPlan:
    """Workers and each one's memory share on this machine (compile/memory.py)."""
    return memory.plan_here(usable_cores(), cache_folder, jobs, share, local)


def lanes_for(chips: int, jobs: int | None = None) -> int:
    """Workers for a save's `chips` compiled at once: one per chip, at most one
    per core (or `jobs`, when set); one on a single core. A save's compiles are
    a burst of seconds while the editor waits for them, so unlike a check of
    many files they take every core, the editor's too."""
    return max(1, min(chips, jobs or usable_cores()))


class WorkerPool:
    """`share`: bytes each local worker may hold resident (None: not watched);
    `peaks`: where the workers' measured peaks go."""

    def __init__(
        self,
        command=None,
        size: int | None = None,
        fallback: list[str] | None = None,
        share: int | None = None,
        peaks: memory.PeakLog | None = None,
    ):
        self.command = command
        self.size = size or default_size()
        self.share, self.peaks = share, peaks
        self.idle: queue.Queue = queue.Queue()
        self.created: list[WorkerClient] = []
        self.lock = threading.Lock()
        # When the (remote) command's worker dies, a local one (its command) takes the request.
        self.fallback = WorkerClient(fallback) if fallback and command else None

    @property
    def restarts(self) -> int:
        return sum(w.restarts for w in self.created)

    def _acquire(self) -> WorkerClient:
        with self.lock:
            if self.idle.empty() and len(self.created) < self.size:
                worker = WorkerClient(self.command, share=self.share, peaks=self.peaks)
                self.created.append(worker)
                return worker
        return self.idle.get()

    def check(self, request: CheckRequest, limits: PhaseLimits | float) -> ExampleResult:
        worker = self._acquire()
        try:
            result = worker.check(request, limits)
            if retried(result):
                result = worker.check(request, limits)  # a fresh process: the old one was replaced
        finally:
            self.idle.put(worker)
        if result.error_kind == "crashed" and self.fallback is not None:
            with self.lock:  # one fallback worker: the threads take turns
                local = self.fallback.check(request, limits)
            if not local.error_kind:
                return local
            result = ExampleResult(
                request.target,
                None,
                error=f"{result.error}; the local fallback too: {local.error}",
                error_kind=result.error_kind,
            )
        return result

    def stop(self) -> None:
        for worker in self.created:
            worker.stop()
        if self.fallback is not None:
            self.fallback.stop()


class ChipLanes:
    """One worker per lane, and each chip on the lane it was first given: a
    worker keeps what it compiled for its chips, so a save that leaves a kernel
    as it was is answered from there whichever lane is free. `check` may be
    called from a thread per lane; two chips that share a lane take turns."""

    def __init__(self, command=None, size: int = 1, share: int | None = None, peaks: memory.PeakLog | None = None):
        self.command = command
        self.share, self.peaks = share, peaks  # as WorkerPool's
        self.workers: list[WorkerClient] = []
        self.locks: list[threading.Lock] = []
        self.lane_of: dict[str, int] = {}
        self.lock = threading.Lock()
        self.grow(size)

    def grow(self, size: int) -> None:
        """At least `size` lanes. Never fewer: another file's settings may want them back."""
        with self.lock:
            while len(self.workers) < size:
                self.workers.append(WorkerClient(self.command, share=self.share, peaks=self.peaks))
                self.locks.append(threading.Lock())

    def lane(self, target: str) -> int:
        with self.lock:
            return self.lane_of.setdefault(target, len(self.lane_of) % len(self.workers))

    def worker(self, target: str) -> WorkerClient:
        return self.workers[self.lane(target)]

    @property
    def restarts(self) -> int:
        return sum(w.restarts for w in self.workers)

    def check(self, request: CheckRequest, limits: PhaseLimits | float) -> ExampleResult:
        lane = self.lane(request.target)
        with self.locks[lane]:
            return self.workers[lane].check(request, limits)

    def stop(self) -> None:
        """At once for a busy worker (WorkerClient.stop): not behind its lane's lock."""
        for worker in self.workers:
            worker.stop()
