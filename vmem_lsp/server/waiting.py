"""Requests that wait on the session (a code action on a fix search still
running): every change wakes them to look again, each up to its own bound.
Only the loop calls these."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Waiters:
    def __init__(self):
        self.futures: set[asyncio.Future] = set()

    def wake(self) -> None:
        for future in self.futures:
            if not future.done():
                future.set_result(None)
        self.futures.clear()

    async def until(self, ready: Callable[[], bool], timeout: float) -> bool:
        """Wait until ready() holds, looking again at each change; False after `timeout` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not ready():
            left = deadline - loop.time()
            if left <= 0:
                return False
            future = loop.create_future()
            self.futures.add(future)
            try:
                await asyncio.wait([future], timeout=left)
            finally:
                self.futures.discard(future)
        return True
