"""The phase clock of a worker: which step of a request runs, announced to
the client as it begins, and a watchdog that answers for a step over its
limit, then ends the worker.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from ..results import ExampleResult, Origin, PhaseLimits
from .protocol import phase_words, to_json


class PhaseClock:
    """Which step of a request is running and for how long it may: the
    example's Python ("import", "trace") gets the trace limit, each kernel's
    "lower" and "compile" the compile limit. A watchdog thread answers for a
    step over its limit, naming it and, for Python, where it stood, then ends
    the worker: code that ignores every signal cannot be stopped any other way,
    and the client starts a fresh one."""

    TICK = 0.05

    def __init__(self, send, is_user_file):
        self.send = send
        self.is_user_file = is_user_file
        self.lock = threading.Lock()
        self.request: tuple | None = None  # (id, target, PhaseLimits)
        self.phase: tuple | None = None  # (phase, kernel, deadline)
        self.announce = True  # tell the client each phase as it begins
        threading.Thread(target=self._watch, name="vmem-lsp-phase-clock", daemon=True).start()

    def begin(self, ident, target: str, limits: PhaseLimits, announce: bool = True) -> None:
        """A request starts. Without `announce` its phases are timed here but
        not sent: a tuner's trace-only request (no origins, no compile) is so
        short that two more messages each way are a visible share of it
        (bench/RESULTS.md); its limits are all the trace limit, which the
        client applies without being told."""
        with self.lock:
            self.request, self.phase, self.announce = (ident, target, limits), None, announce

    def enter(self, phase: str, kernel: str | None = None) -> None:
        with self.lock:
            if self.request is None:
                return
            ident, target, limits = self.request
            self.phase = (phase, kernel, time.monotonic() + limits.of(phase))
            if not self.announce:
                return
        self.send({"id": ident, "phase": phase, "kernel": kernel, "target": target})

    def end(self) -> None:
        with self.lock:
            self.request = self.phase = None

    def _watch(self) -> None:
        main = threading.main_thread().ident
        while True:
            time.sleep(self.TICK)
            with self.lock:
                if self.request is None or self.phase is None or time.monotonic() < self.phase[2]:
                    continue
                (ident, target, limits), (phase, kernel, _) = self.request, self.phase
                frame = sys._current_frames().get(main) if main is not None else None
                where = self.where(frame) if phase in ("import", "trace") else None
                message = f"{phase_words(phase, kernel, target, limits.of(phase))}"
                if where is not None:
                    message += f" (in {where[0]} at {os.path.basename(where[1].file)}:{where[1].line})"
                result = ExampleResult(
                    target, None, error=message, error_kind="timeout", error_origin=where[1] if where else None
                )
                self.send({"id": ident, "result": json.loads(to_json(result)), "exiting": True})
                os._exit(0)

    def where(self, frame) -> tuple[str, Origin] | None:
        """The innermost frame of user code on the stack: where it hangs."""
        while frame is not None:
            if self.is_user_file(frame.f_code.co_filename):
                return frame.f_code.co_name, Origin(frame.f_code.co_filename, frame.f_lineno)
            frame = frame.f_back
        return None
