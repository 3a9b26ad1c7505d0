"""Processes we start die with us, whatever kills us.

Three layers, because each misses a case the others catch:
- In the parent (`exit_with_children`): TERM, INT and HUP kill every child's
  process group before the parent exits, else a `check` killed while an
  example spins leaves its worker spinning after it.
- In the child (`die_with_parent`): Linux's PR_SET_PDEATHSIG, the kernel's
  word that the parent is gone (SIGKILL of the parent included, when no
  handler runs), and a watchdog thread that polls the parent pid for systems
  without it and for a remote worker whose sshd session ended.
- `spawn` starts children from one long-lived thread: PR_SET_PDEATHSIG fires
  when the *thread* that forked the child ends, and a pool's threads end long
  before the process does.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future

PARENT_ENV = "VMEM_LSP_PARENT_PID"
WATCH_SECONDS = 0.2
PR_SET_PDEATHSIG = 1

_children: set[subprocess.Popen] = set()
_children_lock = threading.Lock()
_on_signal: list = []  # callables run first on a signal: work elsewhere to cancel (Ray tasks)


# ---- in the parent -----------------------------------------------------------


class _Spawner:
    """One daemon thread that runs every Popen, so a child's death signal is
    tied to the life of the process, not of whichever thread asked."""

    def __init__(self):
        self.requests: queue.Queue = queue.Queue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def __call__(self, args, **kwargs) -> subprocess.Popen:
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="vmem-lsp-spawner", daemon=True)
                self.thread.start()
        done: Future = Future()
        self.requests.put((done, args, kwargs))
        return done.result()

    def _run(self) -> None:
        while True:
            done, args, kwargs = self.requests.get()
            try:
                done.set_result(subprocess.Popen(args, **kwargs))
            except BaseException as error:  # handed to the caller, raised there
                done.set_exception(error)


_spawner = _Spawner()


def spawn(args, env: dict | None = None, **kwargs) -> subprocess.Popen:
    """Popen in a session of its own (so one killpg reaches what it starts),
    told our pid, and remembered until `forget` so a signal to us reaches it."""
    env = {**(os.environ if env is None else env), PARENT_ENV: str(os.getpid())}
    process = _spawner(args, env=env, start_new_session=True, **kwargs)
    with _children_lock:
        _children.add(process)
    return process


def forget(process: subprocess.Popen) -> None:
    with _children_lock:
        _children.discard(process)


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (it leads its own session)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def kill_children() -> None:
    with _children_lock:
        children = list(_children)
    for process in children:
        kill_group(process)


def on_signal(callback) -> None:
    """Run `callback` when a signal ends us, before the children are killed:
    for what runs on other machines, which no process group reaches."""
    _on_signal.append(callback)


def forget_on_signal(callback) -> None:
    if callback in _on_signal:
        _on_signal.remove(callback)


def exit_with_children(signals=(signal.SIGTERM, signal.SIGINT, signal.SIGHUP)) -> None:
    """On each signal: cancel what `on_signal` named, kill every child's
    group, then die of that signal, so the exit status is the one a shell or
    CI expects (130 for Ctrl-C)."""

    def handler(signum, frame):
        for callback in list(_on_signal):
            try:
                callback()
            except Exception:  # dying anyway: the children must still be killed
                pass
        kill_children()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for signum in signals:
        signal.signal(signum, handler)


# ---- in the child ------------------------------------------------------------


def die_with_parent(parent: int | None = None, on_exit=None) -> None:
    """Exit when the process that started this one is gone: at once by the
    kernel's death signal where there is one, within WATCH_SECONDS otherwise
    (the parent pid changes when it dies). The parent is `parent`, else the
    pid `spawn` put in the environment, else our parent now. `on_exit` runs
    first, briefly."""
    parent = parent or int(os.environ.get(PARENT_ENV) or os.getppid())
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl: the watchdog alone

    def gone() -> bool:
        return os.getppid() != parent

    def watch() -> None:
        while not gone():
            threading.Event().wait(WATCH_SECONDS)
        if on_exit is not None:
            on_exit()
        os._exit(0)

    if gone():  # the parent died before we could ask
        os._exit(0)
    threading.Thread(target=watch, name="vmem-lsp-parent-watch", daemon=True).start()
