"""How many workers the memory allows, and how much each may take.

One worker peaks at about 1.2 GB resident on a large compile, so cores minus
one workers swap a 16-core 16 GB laptop. The pool takes the smaller of cores
minus one and the memory available over a worker's peak, at least one; each
worker gets a share of that memory, and one that exceeds its share is stopped
and reported ("needed more than N GB"), not left to swap the machine.

The peak is measured: each local worker's high-water mark of resident memory
(/proc/<pid>/status VmHWM) after each request, kept in the cache folder as
the largest seen; before any measurement, 1.2 GB. Pure functions size from
numbers (`plan`); thin readers give those numbers on this machine.
Never imports jax."""

from __future__ import annotations

import json
import logging
import os
import resource
import tempfile
import threading
import time
from dataclasses import dataclass

from ..user_folders import user_cache_folder

log = logging.getLogger(__name__)

GB = 1 << 30
DEFAULT_PEAK = int(1.2 * GB)  # a worker on a large compile, before any measurement here
PEAK_FILE = "worker-peak.json"
UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as 2**63 rounded to a page


def gb(size: int) -> str:
    """1288490188 -> "1.2 GB" (binary, as worker-memory = "2GB" is read)."""
    return f"{size / GB:.1f} GB"


@dataclass(frozen=True)
class MemoryPlan:
    """What the pool decided, and why (shown by `check --verbose`)."""

    jobs: int  # workers at once
    share_bytes: int | None  # what one worker may hold resident; None: not watched
    peak_bytes: int  # one worker's peak, measured or assumed
    available_bytes: int | None  # memory free for the workers; None: unknown
    reason: str


# ---- sizing: numbers in, a plan out ---------------------------------------------


def plan(
    cores: int,
    available: int | None,
    peak: int,
    process_cap: int | None = None,
    jobs: int | None = None,
    share: int | None = None,
    measured: bool = True,
) -> MemoryPlan:
    """Workers and each one's share. `cores`: usable cores; `available`: bytes
    free for all workers (None: unknown, cores decide); `peak`: one worker's
    peak; `process_cap`: a per-process limit (RLIMIT_AS/RLIMIT_DATA), a cap on
    each share; `jobs` / `share`: the user's settings, which win."""
    by_cores = max(1, cores - 1)
    n = lambda count: f"{count} job{'' if count == 1 else 's'}"
    peak_words = f"a worker's peak {gb(peak)}{'' if measured else ' (assumed: none measured yet)'}"
    need = max(1, share or peak)
    if jobs:
        chosen, why = jobs, f"{n(jobs)}, as set"
    elif available is None:
        chosen, why = by_cores, f"{n(by_cores)}, cores minus one (available memory unknown)"
    else:
        by_memory = max(1, available // need)
        chosen = min(by_cores, by_memory)
        per = f"worker-memory {gb(share)}" if share else peak_words
        if by_memory < by_cores:
            why = f"{n(chosen)}: {gb(available)} available / {per} (cores would allow {by_cores})"
        else:
            why = f"{n(chosen)}, cores minus one; {gb(available)} available would hold {by_memory} at {per}"
    if share:
        given, how = share, f"each worker may hold {gb(share)} (worker-memory)"
    elif available is not None:
        given = max(available // chosen, min(peak, available))
        how = f"each worker may hold {gb(given)}"
    else:
        given, how = None, "workers are not watched (available memory unknown)"
    if process_cap is not None and (given is None or process_cap < given):
        given, how = process_cap, f"each worker may hold {gb(process_cap)} (the per-process memory limit)"
    return MemoryPlan(chosen, given, peak, available, f"{why}; {how}")


def room(limit: int | None, used: int | None) -> int | None:
    """What a cgroup's limit leaves: None when it sets none."""
    if limit is None or limit >= UNLIMITED or used is None:
        return None
    return max(0, limit - used)


def smallest(*sizes: int | None) -> int | None:
    known = [s for s in sizes if s is not None]
    return min(known) if known else None


# ---- readers: this machine's numbers --------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _number(text: str | None) -> int | None:
    text = (text or "").strip()
    if text == "max":
        return UNLIMITED
    return int(text) if text.isdigit() else None


def meminfo_available(text: str | None = None) -> int | None:
    """/proc/meminfo's MemAvailable in bytes."""
    text = _read("/proc/meminfo") if text is None else text
    for line in (text or "").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def cgroup_room(proc_cgroup: str | None = None, root: str = "/sys/fs/cgroup") -> int | None:
    """The least room any memory cgroup of this process (and its ancestors)
    leaves: v2 memory.max - memory.current, v1 limit_in_bytes - usage_in_bytes."""
    text = _read("/proc/self/cgroup") if proc_cgroup is None else proc_cgroup
    rooms = []
    bases: tuple[str, ...]
    for line in (text or "").splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            files, bases = ("memory.max", "memory.current"), (root, os.path.join(root, "unified"))
        elif "memory" in controllers.split(","):
            files, bases = ("memory.limit_in_bytes", "memory.usage_in_bytes"), (os.path.join(root, "memory"),)
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for base in bases:
            # Its own folder and each ancestor's; in a cgroup namespace the mount is its own root.
            for depth in range(len(parts), -1, -1):
                folder = os.path.join(base, *parts[:depth])
                rooms.append(
                    room(_number(_read(os.path.join(folder, files[0]))), _number(_read(os.path.join(folder, files[1]))))
                )
    return smallest(*rooms)


def process_cap() -> int | None:
    """RLIMIT_AS or RLIMIT_DATA, the smaller, when set: each worker inherits them."""
    caps = []
    for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
        soft, _ = resource.getrlimit(which)
        if soft != resource.RLIM_INFINITY:
            caps.append(soft)
    return min(caps) if caps else None


def available_memory() -> int | None:
    """MemAvailable, capped by the cgroup's room."""
    return smallest(meminfo_available(), cgroup_room())


def status(pid: int) -> dict[str, int]:
    """The Vm* lines of /proc/<pid>/status in bytes (VmRSS, VmHWM, VmData, VmSize); {} when gone."""
    found = {}
    for line in (_read(f"/proc/{pid}/status") or "").splitlines():
        key, _, value = line.partition(":")
        if key.startswith("Vm") and value.strip().endswith("kB"):
            found[key] = int(value.split()[0]) * 1024
    return found


def limits_of(pid: int) -> dict[str, int]:
    """The soft RLIMIT_AS / RLIMIT_DATA of a process (/proc/<pid>/limits), when set:
    {"VmSize": bytes, "VmData": bytes}, keyed by the status line each limits."""
    names = {"Max address space": "VmSize", "Max data size": "VmData"}
    found = {}
    for line in (_read(f"/proc/{pid}/limits") or "").splitlines():
        for name, key in names.items():
            if line.startswith(name):
                soft = line[len(name) :].split()[0]
                if soft.isdigit():
                    found[key] = int(soft)
    return found


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether `pid` is `ancestor` or runs under it on this machine: a worker
    started through ssh says a pid of the remote machine's."""
    for _ in range(64):
        if pid == ancestor:
            return True
        stat = _read(f"/proc/{pid}/stat")
        if not stat:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if pid <= 1:
            return False
    return False


# ---- the measured peak, kept in the cache folder -----------------------------------


def peak_folder(cache_folder: str | None) -> str:
    """The cache folder, when it is a folder here; for a URL (s3://...), the
    local default: ~/.cache/vmem-lsp."""
    if cache_folder and "://" not in cache_folder:
        return cache_folder
    return user_cache_folder()


def peak_path(cache_folder: str | None) -> str:
    return os.path.join(peak_folder(cache_folder), PEAK_FILE)


def read_peak(cache_folder: str | None) -> int | None:
    """The largest peak measured for this cache folder, or None."""
    try:
        value = json.loads(_read(peak_path(cache_folder)) or "null")
        return int(value["peak_bytes"]) if isinstance(value, dict) and int(value["peak_bytes"]) > 0 else None
    except (ValueError, KeyError, TypeError):
        return None


def worker_peak(cache_folder: str | None) -> int:
    """One worker's peak resident memory in bytes: measured here before, else 1.2 GB."""
    return read_peak(cache_folder) or DEFAULT_PEAK


def write_peak(cache_folder: str | None, peak: int, what: str = "") -> bool:
    """Keep `peak` when it is above the one kept; never fails (False when it could not)."""
    try:
        if peak <= (read_peak(cache_folder) or 0):
            return False
        folder = peak_folder(cache_folder)
        os.makedirs(folder, exist_ok=True)
        record = {
            "peak_bytes": int(peak),
            "peak": gb(peak),
            "what": what,
            "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=".worker-peak.")
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(temporary, peak_path(cache_folder))
        return True
    except OSError as error:
        log.info("could not keep the worker peak in %s: %s", peak_folder(cache_folder), error)
        return False


class PeakLog:
    """The peaks a run's workers reach, written to the cache folder when one is
    above what it holds. Shared by the workers of a pool (thread-safe)."""

    def __init__(self, cache_folder: str | None):
        self.cache_folder = cache_folder
        self.lock = threading.Lock()
        self.highest = 0

    def saw(self, peak: int, what: str = "") -> None:
        with self.lock:
            if peak <= self.highest:
                return
            self.highest = peak
            write_peak(self.cache_folder, peak, what)


# ---- the plan for this machine --------------------------------------------------------


def plan_here(
    cores: int, cache_folder: str | None = None, jobs: int | None = None, share: int | None = None, local: bool = True
) -> MemoryPlan:
    """The plan for this machine; `local` False: the workers run elsewhere (a
    worker command), and only cores (or `jobs`) decide."""
    measured = read_peak(cache_folder)
    available = cap = None
    if local:
        try:
            available, cap = available_memory(), process_cap()
        except (OSError, ValueError):
            pass
    peak = measured or DEFAULT_PEAK
    if local:
        chosen = plan(cores, available, peak, cap, jobs, share, measured is not None)
    else:
        count = jobs or max(1, cores - 1)
        chosen = MemoryPlan(
            count,
            None,
            peak,
            None,
            f"{count} job{'' if count == 1 else 's'}: "
            f"{'as set' if jobs else 'cores minus one'}; the worker command runs where this "
            f"machine's memory says nothing: workers are not watched",
        )
    log.info("%s", chosen.reason)
    return chosen


# ---- the words ----------------------------------------------------------------------


def what_ran(phase: str | None, kernel: str | None, target: str | None) -> str:
    on = f" for {target}" if target else ""
    if phase in ("lower", "compile"):
        return f"the compile of kernel {kernel!r}{on}"
    if phase == "import":
        return f"importing the module{on}"
    return f"the example's Python{on}"


def needed_more_than(
    phase: str | None, kernel: str | None, target: str | None, limit: int | None, rlimit: str | None = None
) -> str:
    """The VMEM010 text of a worker out of memory, with how to fix it:
    stopped over its share, or refused by a per-process limit (`rlimit`)."""
    what = what_ran(phase, kernel, target)
    if limit is None:
        return (
            f'{what} ran out of memory (run fewer --jobs, or set worker-memory = "4GB", a larger '
            f"share, in [tool.vmem-lsp])"
        )
    if rlimit:
        fix = f"{rlimit}: raise it, or check this example alone"
    else:
        fix = (
            'each worker\'s share of the memory here: run fewer --jobs, or set worker-memory = "4GB", '
            "a larger share, in [tool.vmem-lsp]"
        )
    return f"{what} needed more than {gb(limit)} ({fix})"
