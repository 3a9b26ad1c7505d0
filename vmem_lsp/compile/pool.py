"""A pool of workers for checks over many files and for fix searches. Each
job runs on an idle worker; one that dies or hangs is replaced and the job
retried once, then reported; a remote pool can fall back to a local worker."""
from __future__ import annotations

import os
import queue
import threading

from .client import CheckRequest, WorkerClient
from .protocol import ExampleResult, PhaseLimits

# A crash may be the machine's (a lost connection); a limit overrun is the
# example's own, and retrying it only doubles the wait for its message.
RETRIED = ("crashed",)


def default_size() -> int:
    """Cores minus one (a compile is nearly single-threaded; leave one for the editor), at least one."""
    return max(1, (os.cpu_count() or 2) - 1)


class WorkerPool:
    def __init__(self, command=None, size: int | None = None, fallback: bool = False):
        self.command = command
        self.size = size or default_size()
        self.idle: queue.Queue = queue.Queue()
        self.created: list[WorkerClient] = []
        self.lock = threading.Lock()
        self.fallback = WorkerClient() if fallback and command else None
        self.fallbacks = 0

    @property
    def restarts(self) -> int:
        return sum(w.restarts for w in self.created)

    def _acquire(self) -> WorkerClient:
        with self.lock:
            if self.idle.empty() and len(self.created) < self.size:
                worker = WorkerClient(self.command)
                self.created.append(worker)
                return worker
        return self.idle.get()

    def check(self, request: CheckRequest, limits: PhaseLimits | float) -> ExampleResult:
        worker = self._acquire()
        try:
            result = worker.check(request, limits)
            if result.error_kind in RETRIED:
                result = worker.check(request, limits)     # a fresh process: the old one was replaced
        finally:
            self.idle.put(worker)
        if result.error_kind == "crashed" and self.fallback is not None:
            with self.lock:
                self.fallbacks += 1
                local = self.fallback.check(request, limits)
            if not local.error_kind:
                return local
            result = ExampleResult(request.target, None, error=f"{result.error}; the local fallback too: "
                                   f"{local.error}", error_kind=result.error_kind)
        return result

    def stop(self) -> None:
        for worker in self.created:
            worker.stop()
        if self.fallback is not None:
            self.fallback.stop()
