"""The editor side of the worker: start it, send examples, enforce timeouts,
and replace it when it hangs or dies. Never imports jax."""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
import queue
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import threading

from .. import lifetime
from ..families import families, family_of
from ..results import CheckRequest, ExampleResult, Origin, PhaseLimits
from . import compiler_logs, memory
from .interpreter import is_local_command, worker_environment
from .protocol import PROTOCOL_VERSION, family_for, phase_doing, phase_words, result_from_dict
from .shipping import Manifests, SourceTexts, relocate, workspace_folder
from .worker import module_name_for

log = logging.getLogger(__name__)

STDERR_LINES_KEPT = 40  # shown when a worker fails to start (ssh's own words)
STDERR_LINES_LOGGED = 400  # logged when one dies: libtpu's crash reporter, faulthandler's dump
NOISE = (
    "WARNING",
    "W0000",
    "I0000",
    "E0000",
    "F0000",
    "Source Location Trace",
    "libtpu_init_utils",
    "learning/",
    "TPU metadata",
    "Failed to get",
    "Coroner",
    "coredump",
    "Fatal Python error",
    'File "',
    "Current thread",
    "Thread 0x",
    "Extension modules:",
)
# The worker checks its own limits; the client waits this much longer before
# it gives up on a worker that cannot even say it is over.
GRACE_SECONDS = 10.0
WATCH_SECONDS = 0.1  # how often a local worker's resident memory is read during a request
NEAR_LIMIT = 0.75  # a worker killed by a signal this close to a per-process limit ran out of memory
FAULT_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+) in (?P<function>.+)$')


def project_root(request: CheckRequest) -> str | None:
    """The folder of the request's project: the root a module example names,
    else the top of the file's package (the folder put on sys.path). What a
    remote worker is sent, and what cached paths are relative to."""
    if request.root:
        return request.root
    return module_name_for(request.path)[0] if request.path else None


class BackendError(RuntimeError):
    """The backend the settings name cannot run here: Ray is missing, or its
    cluster cannot be reached. Its message is the user's to read, as is."""


class WorkerError(Exception):
    def __init__(self, message: str, kind: str = "crashed", origin: Origin | None = None):
        super().__init__(message)
        self.kind, self.origin = kind, origin


FATAL_MARKS = ("Fatal Error", "LLVM ERROR", "Check failed")


def compiler_fatal(lines) -> str | None:
    """The last line a compiler printed as it ended the process, without glog's prefix."""
    for line in reversed(list(lines)):
        if any(mark in line for mark in FATAL_MARKS):
            return line.split("] ", 1)[-1].strip()
    return None


def fatal_origin(fatal: str, where: dict) -> Origin | None:
    """The user line a compiler's fatal error is about: the first of the body lines the
    worker noted whose pattern the error's text matches (an fp8 conversion, an op of a
    newer architecture), else where the kernel was invoked (`where` as the family's
    worker wrote it before compiling)."""
    pairs = [pair for pattern, pair in where.get("culprits", []) if re.search(pattern, fatal)]
    for pair in (*pairs, where.get("invoked")):
        if isinstance(pair, list) and len(pair) == 2:
            return Origin(str(pair[0]), int(pair[1]))
    return None


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"


def crash_frame(lines, hello: dict) -> tuple[str, Origin] | None:
    """(function, origin) of the innermost user frame of the crashing thread
    in the last faulthandler dump among `lines` ('File "x.py", line 14 in
    spin', most recent first)."""
    frames: list[tuple[str, Origin]] = []
    dumping = False
    for line in lines:
        if line.startswith(("Current thread", "Thread 0x")):  # only the thread that crashed
            dumping = line.startswith("Current thread")
            frames = [] if dumping else frames
        elif dumping and (match := FAULT_FRAME.match(line)):
            frames.append((match["function"].strip(), Origin(match["file"], int(match["line"]))))
        elif dumping and line.strip():
            dumping = False
    library, user = hello.get("library_folders", []), hello.get("user_folders", [])
    for function, origin in frames:
        if any(origin.file.startswith(f) for f in user) or not (
            origin.file.startswith("<")
            or "site-packages" in origin.file
            or any(origin.file.startswith(f) for f in library)
        ):
            return function, origin
    return None


def default_command() -> list[str]:
    return [sys.executable, "-m", "vmem_lsp", "worker"]


def batch_mode(command: list[str]) -> list[str]:
    """ssh never prompts an editor's background process: a password or host
    key question would hang it. Without a usable key it fails at once."""
    if command and os.path.basename(command[0]) == "ssh" and not any("BatchMode" in c for c in command):
        return [command[0], "-o", "BatchMode=yes", "-o", "ConnectTimeout=20", *command[1:]]
    return command


class WorkerClient:
    """One worker process, started on first use and restarted after a failure."""

    def __init__(
        self,
        command: list[str] | str | None = None,
        start_timeout: float = 120.0,
        ship_source: bool | None = None,
        share: int | None = None,
        peaks: memory.PeakLog | None = None,
    ):
        self.command = batch_mode(shlex.split(command) if isinstance(command, str) else (command or default_command()))
        self.start_timeout = start_timeout
        # A worker started by another command may run elsewhere: send it the source.
        self.ship_source = ship_source if ship_source is not None else not is_local_command(self.command)
        self.manifests = Manifests()
        self.texts: SourceTexts = self.manifests  # what a shipped file's text is read from
        self.blobs_sent = 0
        self.process: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()
        self.stderr_tail: collections.deque = collections.deque(maxlen=STDERR_LINES_KEPT)
        self.stderr_log: collections.deque = collections.deque(maxlen=STDERR_LINES_LOGGED)
        self.hello: dict | None = None
        self.shipped_root: str | None = None  # the project root the request out was shipped from
        self.next_id = 0
        self.restarts = 0
        self.busy = False  # a request is out: stopping cannot wait for a polite shutdown
        self.phase: dict = {}  # the worker's last word on what it is doing
        # Memory: a local worker (one whose pid is ours to read) is watched while a
        # request is out and stopped past `share` bytes resident; its peaks go to `peaks`.
        self.share = share
        self.peaks = peaks
        self.local_pid: int | None = None
        self.last_status: dict = {}  # its last /proc status (VmRSS, VmData, VmSize) during a request
        self.first_status: dict = {}  # and its first, as the request began
        self.last_limits: dict = {}  # its per-process limits then (RLIMIT_AS, RLIMIT_DATA)
        self.overrun: int | None = None  # the resident bytes it was stopped at
        self.watched: queue.SimpleQueue = queue.SimpleQueue()  # requests for the one watcher thread
        self.watcher: threading.Thread | None = None
        self.log_folder: str | None = None  # its compiler's log files (compiler_logs), removed with it

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> dict:
        env = {**os.environ, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
        compiler_logs.remove(self.log_folder)  # a worker lost without a kill (its pipe broke)
        env, self.log_folder = compiler_logs.log_environment(worker_environment(self.command, env))
        self.process = lifetime.spawn(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            env=env,
        )
        self.lines = queue.Queue()
        self.stderr_tail.clear()
        self.stderr_log.clear()
        self.phase = {}
        threading.Thread(target=self._pump_stdout, args=(self.process, self.lines), daemon=True).start()
        self._pumped = threading.Event()
        threading.Thread(target=self._pump_stderr, args=(self.process, self._pumped), daemon=True).start()
        message = self._read(self.start_timeout)
        hello = message.get("hello")
        if not hello:
            raise WorkerError(f"the worker did not say hello: {message}")
        if hello.get("protocol") != PROTOCOL_VERSION:
            self.stop()
            raise WorkerError(
                f"worker speaks protocol {hello.get('protocol')}, this client speaks {PROTOCOL_VERSION}",
                kind="protocol",
            )
        self.hello = hello
        pid = hello.get("pid")
        self.local_pid = pid if isinstance(pid, int) and memory.descends_from(pid, self.process.pid) else None
        return hello

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """Politely when idle; at once when a request is out (the worker may be
        stuck in user code or a long compile, and whoever stops us is in a hurry)."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None and not self.busy and process.stdin is not None:
            try:
                process.stdin.write(json.dumps({"id": -1, "method": "shutdown"}) + "\n")
                process.stdin.flush()
                process.wait(timeout=3)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                pass
        self._kill(process)

    def _kill(self, process: subprocess.Popen) -> None:
        lifetime.kill_group(process)
        process.wait()
        lifetime.forget(process)
        compiler_logs.remove(self.log_folder)
        self.log_folder = None
        for stream in (process.stdin, process.stdout, process.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass

    # -- requests ----------------------------------------------------------------
    def check(self, request: CheckRequest, limits: PhaseLimits | float) -> ExampleResult:
        """Run one example on one target. A hang or a crash becomes an error
        result; the worker is replaced so the next request finds a live one.
        A module whose import fails when run a second time in one process (it
        registers something on import) is tried once more in a new worker;
        not an example that raises (the fix search's variants often do). So is
        a GPU request the worker cannot take after another architecture's
        Mosaic GPU kernels (gpu/compile.py: Family.worker().fresh_process)."""
        limits = limits if isinstance(limits, PhaseLimits) else PhaseLimits(limits, limits)
        result, reran = self._check(request, limits)
        if (reran and result.error_kind == "import") or result.error_kind == "fresh_worker":
            self.stop()
            result, _ = self._check(request, limits)
        return result

    def _check(self, request: CheckRequest, limits: PhaseLimits) -> tuple[ExampleResult, bool]:
        self.busy = True
        try:
            if not self.running():
                self.start()
            params = {k: v for k, v in vars(request).items() if v is not None}
            params["limits"] = vars(limits)
            shipped = self._ship(request)
            self.shipped_root = shipped[0] if shipped is not None else None
            if shipped is not None:
                params.update(manifest=shipped[1], client_root=shipped[0])
            watching = self._watch()
            try:
                message = self._call("check", params, limits)
                if "need" in message and shipped is not None:
                    root, manifest = shipped
                    by_sha = {sha: relative for relative, sha in manifest.items()}
                    blobs = {sha: self.texts.read(root, by_sha[sha]) for sha in message["need"]}
                    self._call("put", {"blobs": blobs}, limits)
                    self.blobs_sent += len(blobs)
                    message = self._call("check", params, limits)
            finally:
                watching.set()
            if "result" not in message:
                raise WorkerError(f"the worker refused the request: {message.get('error', message)}")
            self._saw_peak(request)
            if message.get("exiting"):  # over a limit: it answered, then ended itself
                self.restarts += 1
                if self.process is not None:
                    self._kill(self.process)
                self.process = None
            result = result_from_dict(message["result"])
            if result.libtpu is None and self.hello:  # the chip figures of the compiler that answered
                result = dataclasses.replace(result, libtpu=self.hello.get("libtpu"))
            return self._out_of_memory(result), bool(message.get("reran"))
        except WorkerError as error:
            self.restarts += 1
            if self.process is not None:
                self._kill(self.process)
                self.process = None
            left, left_steps = self._estimate_left(request) if error.kind == "crashed" else (None, None)
            return ExampleResult(
                request.target,
                None,
                error=str(error),
                error_kind=error.kind,
                error_origin=error.origin,
                estimate_left=left,
                estimate_left_steps=left_steps,
            ), False
        except (BrokenPipeError, OSError) as error:
            self.restarts += 1
            self.process = None
            return ExampleResult(
                request.target, None, error=f"the worker is gone: {error}", error_kind="crashed"
            ), False
        finally:
            self.busy = False

    def _estimate_left(self, request: CheckRequest) -> tuple[int | None, int | None]:
        """What the compiler's estimate gave before the compile killed this (local) worker: its
        folder is the dead worker's own, emptied before the compile, so what is there is this
        compile's; read, then removed (the worker's exit handlers, which would, did not run)."""
        family = family_of(request.target)
        folder = ((self.hello or {}).get("estimates_left_in") or {}).get(family.name)
        if not request.estimate or not folder or self.local_pid is None or not os.path.isdir(folder):
            return None, None
        try:
            return family.estimate_left(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    # -- memory ------------------------------------------------------------------
    def _watch(self) -> threading.Event:
        """Read the local worker's memory every WATCH_SECONDS until the
        returned event is set; past its share, stop it (the read loop then
        sees its end, and `_ended` says why). A remote worker is not watched.
        One thread per client, and nothing read before the first
        WATCH_SECONDS: a trace-only request (vmem_lsp.fits) is so short that a
        thread and two /proc reads each would be a large share of it under
        load (bench/RESULTS.md)."""
        done = threading.Event()
        self.overrun, self.first_status, self.last_status, self.last_limits = None, {}, {}, {}
        if self.local_pid is None:
            done.set()
            return done
        if self.watcher is None:
            self.watcher = threading.Thread(target=self._watch_loop, name="vmem-lsp-memory-watch", daemon=True)
            self.watcher.start()
        self.watched.put((self.local_pid, self.process, done))
        return done

    def _watch_loop(self) -> None:
        while True:
            pid, process, done = self.watched.get()
            if not done.wait(WATCH_SECONDS):
                self._watching(pid, process, done)

    def _watching(self, pid: int, process: subprocess.Popen, done: threading.Event) -> None:
        while not done.is_set():
            status = memory.status(pid)
            if not status:
                return
            self.first_status = self.first_status or status
            self.last_status = status
            self.last_limits = memory.limits_of(pid) or self.last_limits
            resident = status.get("VmRSS", 0)
            if self.share is not None and resident > self.share and not done.is_set():
                self.overrun = resident  # first: the read loop asks why the worker ended
                if self.peaks is not None:
                    self.peaks.saw(resident, self._what())
                lifetime.kill_group(process)
                return
            done.wait(WATCH_SECONDS)

    def _what(self) -> str:
        return memory.what_ran(*(self.phase.get(k) for k in ("phase", "kernel", "target")))

    def _saw_peak(self, request: CheckRequest) -> None:
        """The worker's high-water mark of resident memory, after a request
        long enough to be watched, to the peak log (the mark is the process's:
        a short request's is read after the next long one)."""
        if self.peaks is not None and self.local_pid is not None and self.last_status:
            peak = memory.status(self.local_pid).get("VmHWM")
            if peak:
                self.peaks.saw(peak, f"{request.example} for {request.target}")

    def _rlimit_hit(self, fraction: float) -> tuple[int, str] | None:
        """(bytes, what limit) of the per-process limit that left the worker
        the least room at its last reading, when it had used `fraction` of it:
        RLIMIT_DATA or RLIMIT_AS, ours (inherited) or the cap the worker sets
        itself on what a request may add to its address space (counted from
        the request's start). The least room: an allocation that failed
        asked for more than that."""
        ours = {
            "VmData": resource.getrlimit(resource.RLIMIT_DATA)[0],
            "VmSize": resource.getrlimit(resource.RLIMIT_AS)[0],
        }
        names = {"VmData": "RLIMIT_DATA (ulimit -d)", "VmSize": "RLIMIT_AS (ulimit -v)"}
        closest = None
        for key, limit in self.last_limits.items():
            used = self.last_status.get(key, 0)
            if limit and used >= fraction * limit and (closest is None or limit - used < closest[0]):
                if limit == ours[key] or key != "VmSize":
                    closest = limit - used, limit, f"the per-process limit {names[key]}"
                else:
                    added = limit - self.first_status.get(key, 0)
                    closest = (
                        limit - used,
                        added,
                        (
                            "the worker's cap on what a request may add to its "
                            "address space (vmem-lsp worker --max-memory-mb)"
                        ),
                    )
        return closest[1:] if closest else None

    def _memory_error(self, limit: int | None = None, rlimit: str | None = None) -> WorkerError:
        phase, kernel, target = (self.phase.get(k) for k in ("phase", "kernel", "target"))
        return WorkerError(memory.needed_more_than(phase, kernel, target, limit, rlimit), kind="memory")

    def _out_of_memory(self, result: ExampleResult) -> ExampleResult:
        """An example that raised MemoryError ran out of memory: the worker
        answered (a per-process limit said no), but the user's fix is the same
        as for a worker stopped over its share, and the message says so."""
        if result.error_kind not in ("raised", "import") or ": MemoryError" not in (result.error or ""):
            return result
        if not self.last_limits and self.local_pid is not None:  # over before the watcher's first look
            self.last_limits = memory.limits_of(self.local_pid) or {}
            self.last_status = memory.status(self.local_pid) or self.last_status
        hit = self._rlimit_hit(0.0)
        phase = "import" if result.error_kind == "import" else self.phase.get("phase") or "trace"
        text = memory.needed_more_than(phase, self.phase.get("kernel"), result.target, *(hit or (None, None)))
        return dataclasses.replace(result, error=f"{text}; {result.error}", error_kind="memory")

    def _call(self, method: str, params: dict, limits: PhaseLimits) -> dict:
        """Send one request and wait for its answer. Each phase message the
        worker sends restarts the wait with that phase's limit."""
        stdin = self.process.stdin if self.process is not None else None
        if stdin is None:
            raise WorkerError("the worker is not running")
        self.next_id += 1
        stdin.write(json.dumps({"id": self.next_id, "method": method, "params": params}) + "\n")
        stdin.flush()
        while True:
            message = self._read(limits.of(self.phase.get("phase")) + GRACE_SECONDS, limits)
            if "phase" in message:
                self.phase = message
                continue
            if message.get("id") in (self.next_id, None):
                return message

    def _ship(self, request: CheckRequest) -> tuple[str, dict] | None:
        """(client root, manifest) of the project the example lives in, for a remote worker."""
        root = project_root(request) if self.ship_source else None
        return (root, self.manifests.manifest(root)) if root else None

    def _read(self, timeout: float, limits: PhaseLimits | None = None) -> dict:
        """The next protocol message. `limits`: a request is out, and a
        silence or an end is reported in terms of the phase it came in."""
        phase, kernel, target = (self.phase.get(k) for k in ("phase", "kernel", "target"))
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            if limits is None:
                raise WorkerError(f"the worker did not start within {timeout:g} s") from None
            raise WorkerError(
                f"{phase_words(phase, kernel, target, limits.of(phase))}; the worker did not answer and was stopped",
                kind="timeout",
            ) from None
        if line is None:
            raise self._ended(limits is not None)
        try:
            return json.loads(line)
        except json.JSONDecodeError:  # stray output on the protocol stream: keep it for errors
            self.stderr_tail.append(line.strip())
            return self._read(timeout, limits)

    def _ended(self, during_request: bool) -> WorkerError:
        """Why the worker's output ended, in the user's terms: the phase it
        was in, and the user frame faulthandler named; libtpu's own noise goes
        to the log, never into the message."""
        code = self.process.wait() if self.process else None
        self._pumped.wait(timeout=2)  # the last of its stderr
        how = (
            f"was killed by signal {-code} ({signal_name(-code)})"
            if code is not None and code < 0
            else f"exited with code {code}"
        )
        log.info("the worker %s; its last output:\n%s", how, "\n".join(self.stderr_log))
        try:
            return self._why_ended(how, during_request, code)
        finally:
            self._remove_left_files()

    def _why_ended(self, how: str, during_request: bool, code: int | None) -> WorkerError:
        if during_request and self.overrun is not None:
            return self._memory_error(self.share)
        if during_request and code is not None and code < 0 and (hit := self._rlimit_hit(NEAR_LIMIT)):
            return self._memory_error(*hit)
        if not during_request:
            tail = "; ".join(self.stderr_tail) or "no output"
            return WorkerError(f"the worker {how} while starting (last output: {tail[-600:]})")
        phase = self.phase.get("phase")
        message = f"the worker {how} while {phase_doing(phase, self.phase.get('kernel'), self.phase.get('target'))}"
        frame = crash_frame(self.stderr_log, self.hello or {}) if phase in ("import", "trace", None) else None
        workspaces = (self.hello or {}).get("workspaces")
        if frame is not None and self.shipped_root and workspaces:
            # A remote worker's frame is in its workspace: this machine's file is the one meant.
            moved = relocate(frame[1].file, workspace_folder(workspaces, self.shipped_root), self.shipped_root)
            frame = frame[0], dataclasses.replace(frame[1], file=moved)
        if frame is not None:
            function, origin = frame
            message += f", in {function} at {os.path.basename(origin.file)}:{origin.line}"
        elif phase == "compile":
            printed, where = self._left_by_crash(self.phase.get("target"))
            if fatal := compiler_fatal([*self.stderr_log, *printed]):
                message += f": {fatal}"  # the compiler's own last words (an fp8 dot below sm_89)
                return WorkerError(message, origin=fatal_origin(fatal, where))
        return WorkerError(message, origin=frame[1] if frame else None)

    def _local_pid(self) -> int | None:
        """The worker's pid when it runs on this machine: what it left is in this temporary folder."""
        pid = (self.hello or {}).get("pid")
        return pid if pid and is_local_command(self.command) else None

    def _remove_left_files(self) -> None:
        """What a local worker that ended mid-compile left in the temporary folder and
        was not read (Family.clean_after: a GPU compile's printed words, note, PTX dumps)."""
        if (pid := self._local_pid()) is not None:
            for family in families():
                family.clean_after(pid)

    def _left_by_crash(self, target: str | None) -> tuple[list[str], dict]:
        """What the compiler of `target`'s family printed and said it was compiling before it
        ended a local worker (Family.left_by_crash); nothing for a remote one."""
        pid, family = self._local_pid(), family_for(target)
        return family.left_by_crash(pid) if pid is not None and family is not None else ([], {})

    @staticmethod
    def _pump_stdout(process, lines: queue.Queue) -> None:
        for line in process.stdout:
            if line.strip():
                lines.put(line)
        lines.put(None)

    def _pump_stderr(self, process, pumped: threading.Event) -> None:
        for line in process.stderr:
            text = line.rstrip()
            if not text:
                continue
            self.stderr_log.append(text)
            if not any(mark in text for mark in NOISE):
                self.stderr_tail.append(text)
        pumped.set()
