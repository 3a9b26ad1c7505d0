"""The editor side of the worker: start it, send examples, enforce timeouts,
and replace it when it hangs or dies. Never imports jax."""
from __future__ import annotations

import collections
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass

from .protocol import PROTOCOL_VERSION, ExampleResult, result_from_dict
from .shipping import Manifests
from .worker import module_name_for

STDERR_LINES_KEPT = 40
NOISE = ("WARNING", "W0000", "I0000", "E0000", "Source Location Trace", "libtpu_init_utils",
         "learning/", "TPU metadata", "Failed to get")


@dataclass(frozen=True)
class CheckRequest:
    example: str
    target: str
    path: str | None = None          # the file holding the example
    module: str | None = None        # or a dotted module (pyproject examples)
    root: str | None = None          # put on sys.path first (the project root)
    source: str | None = None        # run this text as the file at `path` (verifying a fix)
    compile: bool = True             # False: trace only, to read block shapes


class WorkerError(Exception):
    pass


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

    def __init__(self, command: list[str] | str | None = None, start_timeout: float = 120.0,
                 ship_source: bool | None = None):
        self.command = batch_mode(shlex.split(command) if isinstance(command, str) else (command or default_command()))
        self.start_timeout = start_timeout
        # A worker started by another command may run elsewhere: send it the source.
        self.ship_source = ship_source if ship_source is not None else self.command != default_command()
        self.manifests = Manifests()
        self.blobs_sent = 0
        self.process: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()
        self.stderr_tail: collections.deque = collections.deque(maxlen=STDERR_LINES_KEPT)
        self.hello: dict | None = None
        self.next_id = 0
        self.restarts = 0

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> dict:
        env = {**os.environ, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
               "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, bufsize=1, env=env, start_new_session=True)
        self.lines = queue.Queue()
        self.stderr_tail.clear()
        threading.Thread(target=self._pump_stdout, args=(self.process, self.lines), daemon=True).start()
        threading.Thread(target=self._pump_stderr, args=(self.process,), daemon=True).start()
        message = self._read(self.start_timeout, "starting")
        hello = message.get("hello")
        if not hello:
            raise WorkerError(f"the worker did not say hello: {message}")
        if hello.get("protocol") != PROTOCOL_VERSION:
            self.stop()
            raise WorkerError(f"worker speaks protocol {hello.get('protocol')}, "
                              f"this client speaks {PROTOCOL_VERSION}")
        self.hello = hello
        return hello

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            try:
                process.stdin.write(json.dumps({"id": -1, "method": "shutdown"}) + "\n")
                process.stdin.flush()
                process.wait(timeout=3)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                pass
        self._kill(process)

    def _kill(self, process: subprocess.Popen) -> None:
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            try:
                stream.close()
            except OSError:
                pass

    # -- requests ----------------------------------------------------------------
    def check(self, request: CheckRequest, timeout: float) -> ExampleResult:
        """Run one example on one target. A hang or a crash becomes an error
        result; the worker is replaced so the next request finds a live one.
        A module whose import fails when run a second time in one process (it
        registers something on import) is tried once more in a new worker;
        not an example that raises (the fix search's variants often do)."""
        result, reran = self._check(request, timeout)
        if reran and result.error_kind == "import":
            self.stop()
            result, _ = self._check(request, timeout)
        return result

    def _check(self, request: CheckRequest, timeout: float) -> tuple[ExampleResult, bool]:
        try:
            if not self.running():
                self.start()
            params = {k: v for k, v in vars(request).items() if v is not None}
            shipped = self._ship(request)
            if shipped is not None:
                params.update(manifest=shipped[1], client_root=shipped[0])
            message = self._call("check", params, timeout)
            if "need" in message and shipped is not None:
                root, manifest = shipped
                by_sha = {sha: relative for relative, sha in manifest.items()}
                blobs = {sha: self.manifests.read(root, by_sha[sha]) for sha in message["need"]}
                self._call("put", {"blobs": blobs}, timeout)
                self.blobs_sent += len(blobs)
                message = self._call("check", params, timeout)
            if "result" not in message:
                raise WorkerError(f"the worker refused the request: {message.get('error', message)}")
            return result_from_dict(message["result"]), bool(message.get("reran"))
        except WorkerError as error:
            self.restarts += 1
            kind = "timeout" if "timed out" in str(error) else "crashed"
            if self.process is not None:
                self._kill(self.process)
                self.process = None
            return ExampleResult(request.target, None, error=str(error), error_kind=kind), False
        except (BrokenPipeError, OSError) as error:
            self.restarts += 1
            self.process = None
            return ExampleResult(request.target, None, error=f"the worker is gone: {error}",
                                 error_kind="crashed"), False

    def _call(self, method: str, params: dict, timeout: float) -> dict:
        self.next_id += 1
        self.process.stdin.write(json.dumps({"id": self.next_id, "method": method, "params": params}) + "\n")
        self.process.stdin.flush()
        while True:
            message = self._read(timeout, "compiling")
            if message.get("id") in (self.next_id, None):
                return message

    def _ship(self, request: CheckRequest) -> tuple[str, dict] | None:
        """(client root, manifest) of the project the example lives in, for a remote worker."""
        if not self.ship_source or not (request.root or request.path):
            return None
        root = request.root or module_name_for(request.path)[0]
        return root, self.manifests.manifest(root)

    def _read(self, timeout: float, doing: str) -> dict:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise WorkerError(f"timed out after {timeout:g} s {doing}") from None
        if line is None:
            code = self.process.wait() if self.process else None
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
            tail = "; ".join(self.stderr_tail) or "no output"
            raise WorkerError(f"the worker {how} while {doing} (last output: {tail[-600:]})")
        try:
            return json.loads(line)
        except json.JSONDecodeError:       # stray output on the protocol stream: keep it for errors
            self.stderr_tail.append(line.strip())
            return self._read(timeout, doing)

    @staticmethod
    def _pump_stdout(process, lines: queue.Queue) -> None:
        for line in process.stdout:
            if line.strip():
                lines.put(line)
        lines.put(None)

    def _pump_stderr(self, process) -> None:
        for line in process.stderr:
            text = line.rstrip()
            if text and not any(mark in text for mark in NOISE):
                self.stderr_tail.append(text)
