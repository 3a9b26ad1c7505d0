"""Python's full garbage collections, kept away from hovers. A full
collection walks every object the server holds: the imported libraries and
the sites of every open document, so with hundreds of documents open one
that lands during a hover makes it the slowest of a load run. So what the
server holds for long is frozen (out of the collector's walks): once after
start-up, and again at quiet moments, after a full collection that
unfreezes first so that no garbage is kept frozen."""

from __future__ import annotations

import asyncio
import gc
import time


def freeze_survivors() -> None:
    """Collect everything, then freeze what is left."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


class QuietCollector:
    """Calls `freeze_survivors` when no message came for `quiet` seconds, at
    most once every `every` seconds."""

    def __init__(self, quiet: float = 1.0, every: float = 30.0):
        self.quiet, self.every = quiet, every
        self.last = 0.0  # the first quiet moment freezes what start-up made
        self.timer: asyncio.TimerHandle | None = None

    def message_arrived(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = asyncio.get_running_loop().call_later(self.quiet, self._quiet)

    def _quiet(self) -> None:
        self.timer = None
        if time.monotonic() - self.last >= self.every:
            freeze_survivors()
            self.last = time.monotonic()
