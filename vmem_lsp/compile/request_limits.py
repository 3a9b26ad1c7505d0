"""What one request may cost the worker: its size, its time and the memory
it may add. Over a limit, the request gets an error and the worker stays up.
"""

from __future__ import annotations

import contextlib
import resource
import signal
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """What one request may cost the worker: it answers an over-limit request
    with an error and stays up."""

    max_request_bytes: int = 64 << 20
    max_seconds: float | None = None
    max_memory_bytes: int | None = None


class OverTime(Exception):
    pass


@contextlib.contextmanager
def request_limits(limits: Limits):
    """The time and memory caps around one request."""
    previous = None
    if limits.max_seconds:

        def alarm(signum, frame):
            raise OverTime(f"over the worker's limit of {limits.max_seconds:g} s per request")

        previous = signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, limits.max_seconds)
    given = resource.getrlimit(resource.RLIMIT_AS)
    if limits.max_memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (request_address_space(limits.max_memory_bytes, given), given[1]))
    try:
        yield
    finally:
        if limits.max_seconds:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        if limits.max_memory_bytes:
            resource.setrlimit(resource.RLIMIT_AS, given)


def request_address_space(adds: int, given: tuple[int, int]) -> int:
    """The soft RLIMIT_AS for one request: what the worker maps now plus what
    a request may add, never above the limits the worker was started under
    (`ulimit -v`, prlimit: a process may not raise its hard limit, and asking
    to refused every request)."""
    wanted = virtual_size() + adds
    for bound in given:
        if bound != resource.RLIM_INFINITY:
            wanted = min(wanted, bound)
    return wanted


def virtual_size() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()
