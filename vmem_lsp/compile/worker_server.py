"""The compile worker: a separate process that imports user code and runs the
TPU compiler, so nothing it does can take the editor or the CLI down. This
module is its wire server and entry point (`vmem-lsp worker`).

Protocol: JSON lines. It first writes {"hello": {...versions}}; then for each
request line {"id", "method": "check", "params": {...}} it writes one line
{"id", "result": ExampleResult}. The user's own prints go to stderr, never to
the protocol stream.
"""

from __future__ import annotations

import atexit
import dataclasses
import faulthandler
import json
import os
import queue
import sys
import threading
from typing import TYPE_CHECKING, NoReturn

from ..lifetime import die_with_parent
from ..results import ExampleResult, PhaseLimits
from ..user_folders import user_cache_folder
from ..versions import installed
from . import compiler_logs
from .phase_clock import PhaseClock
from .protocol import PROTOCOL_VERSION
from .request_limits import Limits, OverTime, request_limits
from .shipping import workspaces_in
from .worker import Worker

if TYPE_CHECKING:
    from .shipping import Store


def protocol_stream():
    """Keep fd 1 for the protocol and send everything else written to stdout
    (user prints, C libraries) to stderr."""
    stream = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return stream


def default_cache_folder() -> str:
    return os.path.join(user_cache_folder(), "worker")


def read_request(stream, limit: int) -> tuple[bytes | None, int]:
    """One line of at most `limit` bytes; a longer one is skipped whole and
    reported by its size. (None, 0) at end of input."""
    line = stream.readline(limit + 1)
    if not line:
        return None, 0
    if len(line) <= limit or line.endswith(b"\n"):
        return line, len(line)
    size = len(line)
    while line and not line.endswith(b"\n"):
        line = stream.readline(1 << 20)
        size += len(line)
    return None, size


class Server:
    """The request loop: check, put (blobs of shipped source), shutdown."""

    def __init__(self, out, limits: Limits, cache_folder: str):
        self.out = out
        self.out_lock = threading.Lock()
        self.limits = limits
        self.cache_folder = cache_folder
        self.worker = Worker()
        self.clock = PhaseClock(self.send, self.worker.provenance.is_user_file)
        self.store: Store | None = None

    def send(self, message: dict) -> None:
        with self.out_lock:
            self.out.write(json.dumps(message) + "\n")

    def handle(self, request: dict) -> bool:
        method, ident, params = request.get("method"), request.get("id"), request.get("params", {})
        if method == "shutdown":
            self.send({"id": ident, "result": None})
            return False
        if method == "put":
            self.shipped().put(params.get("blobs", {}))
            self.send({"id": ident, "result": "ok"})
        elif method == "check":
            self.check(ident, params)
        else:
            self.send({"id": ident, "error": f"unknown method {method!r}"})
        return True

    def shipped(self) -> Store:
        from .shipping import Store

        if self.store is None:
            self.store = Store(self.cache_folder)
        return self.store

    def check(self, ident, params: dict) -> None:
        manifest, client_root = params.pop("manifest", None), params.pop("client_root", None)
        phase_limits = PhaseLimits(**params.pop("limits", {}))
        workspace = None
        if manifest is not None:
            missing = self.shipped().missing(manifest)
            if missing:
                self.send({"id": ident, "need": missing})
                return
            workspace = self.shipped().workspace(client_root, manifest)
            params = relocate_params(params, client_root, workspace)
        quiet = not params.get("origins", True) and not params.get("compile", True)
        target: str = params["target"]  # none: the request loop answers with the error
        self.clock.begin(ident, target, phase_limits, announce=not quiet)
        try:
            with request_limits(self.limits):
                result = plain(self.worker.check(params, self.clock.enter))
        except OverTime as error:
            result = plain(ExampleResult(target, None, error=str(error), error_kind="timeout"))
        finally:
            self.clock.end()
        if workspace is not None:
            from .shipping import relocate

            result = relocate(result, workspace, client_root)
        # A failure while running again a module run before may be the module's
        # own doing (a registration on import): the client retries in a new worker.
        self.send({"id": ident, "result": result, "reran": self.worker.reran})


FIELDS: dict[type, tuple[str, ...]] = {}


def plain(value):
    """A result as the JSON-ready dicts and lists json.loads(to_json(value))
    gives, without dataclasses.asdict's deep copies or a second encoding,
    which show in a trace-only request's time (bench/RESULTS.md)."""
    if value is None or isinstance(value, (str, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: plain(v) for k, v in value.items()}
        return json.loads(json.dumps({k: plain(v) for k, v in value.items()}))  # keys as JSON spells them
    names = FIELDS.get(type(value))
    if names is None:
        names = FIELDS[type(value)] = tuple(f.name for f in dataclasses.fields(value))
    return {name: plain(getattr(value, name)) for name in names}


def relocate_params(params: dict, client_root: str, workspace: str) -> dict:
    from .shipping import relocate

    return {k: relocate(v, client_root, workspace) if k in ("path", "root") else v for k, v in params.items()}


class Requests:
    """Request lines read by a thread of their own, so the end of input is
    seen while a request runs: the client is gone, nobody wants the answer,
    and the worker ends at once (a remote worker whose connection dropped
    ends this way too). Between requests it ends the loop as usual."""

    END = (None, 0)

    def __init__(self, stream, limit: int):
        self.lines: queue.Queue = queue.Queue()
        self.busy = threading.Event()
        threading.Thread(target=self._read, args=(stream, limit), name="vmem-lsp-requests", daemon=True).start()

    def _read(self, stream, limit: int) -> None:
        while True:
            line, size = read_request(stream, limit)
            if line is None and size == 0:
                if self.busy.is_set():
                    os._exit(0)
                self.lines.put(self.END)
                return
            self.lines.put((line, size))

    def next(self) -> tuple[bytes | None, int]:
        return self.lines.get()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="vmem-lsp worker")
    parser.add_argument("--cache-dir", default=default_cache_folder(), help="where shipped source is kept")
    parser.add_argument("--max-request-mb", type=float, default=64)
    parser.add_argument("--max-seconds", type=float, help="per request; over it the request gets an error")
    parser.add_argument(
        "--max-memory-mb", type=float, default=8192, help="address space a request may add (default 8192; 0: no cap)"
    )
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="turn on the compiler's static cycle estimate for every compile (costs several times a compile's CPU)",
    )
    args = parser.parse_args(argv)
    left_in: dict[str, str] = {}  # family -> the folder its compiler writes estimates to
    if args.estimate:  # before jax loads: libtpu reads its flags once, when it starts
        from ..families import families
        from .worker import ESTIMATES

        for family in families():
            if folder := family.prepare_estimates():
                left_in[family.name] = folder
        os.environ[ESTIMATES] = "1"
    die_with_parent()
    limits = Limits(
        int(args.max_request_mb * 2**20),
        args.max_seconds,
        int(args.max_memory_mb * 2**20) if args.max_memory_mb else None,
    )
    out = protocol_stream()
    faulthandler.enable(sys.stderr)  # a crash names the Python frame it happened in
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    # A worker the client did not start here (over SSH, on Ray): its compiler's log files in a
    # folder of its own, removed at exit (compile/compiler_logs.py; the local client's does it).
    os.environ.update(compiler_logs.log_environment(dict(os.environ))[0])
    # Compiles are deviceless: with no platform named, jax's CUDA plugin (GPU targets) looks for
    # a driver, fails, and registers nothing; told "cpu", it gives compile-only CUDA devices.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["VMEM_LSP_IN_WORKER"] = "1"  # vmem_lsp.fits in a module the worker imports: refused, not recursed
    server = Server(out, limits, args.cache_dir)
    out.write(
        json.dumps(
            {
                "hello": {
                    "protocol": PROTOCOL_VERSION,
                    "pid": os.getpid(),
                    "estimates": bool(args.estimate),
                    "estimates_left_in": left_in,
                    **installed(),
                    **server.worker.provenance.code_folders(),
                    "workspaces": os.path.abspath(workspaces_in(args.cache_dir)),
                }
            }
        )
        + "\n"
    )
    # The reader thread waits on a stream of its own: blocked in sys.stdin's read it would
    # hold the lock the interpreter's exit takes to close sys.stdin, and every exit would wait
    # a second for it, then print "Fatal Python error: could not acquire lock" (a check's end).
    requests = Requests(os.fdopen(os.dup(sys.stdin.fileno()), "rb"), limits.max_request_bytes)
    while True:
        line, size = requests.next()
        if line is None and size == 0:
            break
        if line is None:
            server.send(
                {
                    "id": None,
                    "error": f"a request of {size / 2**20:.1f} MiB is over the worker's limit "
                    f"of {limits.max_request_bytes / 2**20:.0f} MiB",
                }
            )
            continue
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except json.JSONDecodeError as error:
            server.send({"id": None, "error": f"bad request: {error}"})
            continue
        requests.busy.set()
        try:
            if not server.handle(request):
                break
        except Exception as error:  # a bad request never ends the worker
            server.send({"id": request.get("id"), "error": f"{type(error).__name__}: {error}"})
        finally:
            requests.busy.clear()
    end(out)


def end(out) -> NoReturn:
    """The last answer is out: the exit handlers run (a --estimate worker's folder goes) and
    the process ends without the interpreter's teardown, a second of freeing modules and of
    libtpu's destructors (1.1-1.3 s of a 2-example check, bench/bench_check_overhead.py) that
    the client waits for at the end of every check, and that leaves nothing behind."""
    atexit._run_exitfuncs()
    for stream in (out, sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)
