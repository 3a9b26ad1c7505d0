"""The compile worker: a separate process that imports user code and runs the
TPU compiler, so nothing it does can take the editor or the CLI down.

Protocol: JSON lines. It first writes {"hello": {...versions}}; then for each
request line {"id", "method": "check", "params": {...}} it writes one line
{"id", "result": ExampleResult}. The user's own prints go to stderr, never to
the protocol stream.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import importlib
import importlib.util
import json
import os
import queue
import re
import resource
import signal
import sys
import threading
import time
import traceback as tb
import types
from dataclasses import dataclass

from ..lifetime import die_with_parent
from ..results import ExampleResult, Origin, PhaseLimits
from ..source.notebook import is_notebook, read_notebook
from ..versions import installed
from .protocol import PROTOCOL_VERSION, phase_words, to_json
from .shipping import file_digest, workspaces_in


def protocol_stream():
    """Keep fd 1 for the protocol and send everything else written to stdout
    (user prints, C libraries) to stderr."""
    stream = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return stream


BARE_TRACES_KEPT = 256  # requests without origins between two clearings of jax's traces


def module_name_for(path: str) -> tuple[str, str]:
    """(root to put on sys.path, dotted module name) for a file, walking up
    through packages so relative imports work."""
    path = os.path.abspath(path)
    directory, filename = os.path.split(path)
    parts = [os.path.splitext(filename)[0]]
    while os.path.exists(os.path.join(directory, "__init__.py")):
        directory, package = os.path.split(directory)
        parts.insert(0, package)
    return directory, ".".join(parts)


class Worker:
    def __init__(self):
        from . import capture

        self.capture = capture
        capture.install_provenance()
        self.baseline = set(sys.modules)
        self.base_path = list(sys.path)
        self.loaded: dict[str, str] = {}  # user files whose modules are loaded -> their digest then
        self.by_path: dict[str, object] = {}  # modules loaded from a file path, kept with them
        self.executed: set[str] = set()  # user files this process has ever run
        self.overridden = False  # the last request ran sent text in place of a file
        self.reran = False  # this request ran again a file run before
        # The user modules as the last request left them (and len(sys.modules) then):
        # the next request starts from them unless a file changed in between.
        self.last_modules: dict[str, object] | None = None
        self.last_count = 0
        self.after: dict[str, object] | None = None  # this request's user modules once it ran
        self.digests: dict[str, str] = {}  # this request's digests of user files
        # A request without origins traced since the caches were last cleared: jax
        # keeps its traces, and a later request that wants origins would get that
        # trace back, its specs unstamped (unstamped_imports: and a module imported
        # during it made its module-level specs unstamped).
        self.unstamped = False
        self.unstamped_imports = False
        self.bare_traces = 0  # requests without origins since jax's traces were cleared

    def forget_user_modules(self) -> bool:
        """Drop what earlier requests imported from user files when one of
        them changed on disk (or was replaced by sent text), so an edited file
        is read afresh. Unchanged, they stay loaded: running a module twice
        breaks what registers itself on import (jax's PRNG implementations,
        pytree types), and costs time. jax and installed packages always stay."""
        sys.path[:] = self.base_path
        changed = any(file_digest(f) != digest if os.path.isfile(f) else True for f, digest in self.loaded.items())
        if not (changed or self.overridden):
            return False
        for name in self.user_modules():
            del sys.modules[name]
        self.loaded, self.by_path = {}, {}
        return True

    def load_module(self, path: str | None, module: str | None, root: str | None, source: str | None = None):
        """Import the example's module; with `source`, run that text as the
        file at `path` instead of what is on disk (to verify a fix)."""
        if root:
            sys.path.insert(0, root)
        if module:
            return importlib.import_module(module)
        directory, name = module_name_for(path)
        sys.path.insert(0, directory)
        if is_notebook(path):
            return self.run_notebook(name, path, source)
        if "." in name and source is None:
            return importlib.import_module(name)
        if "." in name:
            importlib.import_module(name.rpartition(".")[0])
        elif source is None and path in self.by_path:
            return self.by_path[path]
        elif name in sys.modules:  # a user file named like a loaded module (copy.py)
            name = f"__vmem_example_{name}"
        spec = importlib.util.spec_from_file_location(name, path)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[name] = loaded
        if source is None:
            spec.loader.exec_module(loaded)
            self.by_path[path] = loaded
        else:
            exec(compile(source, path, "exec"), vars(loaded))
        return loaded

    def run_notebook(self, name: str, path: str, source: str | None):
        """A notebook runs as the module its code cells make (magics masked),
        under the notebook's path, so tracebacks and traced frames carry the
        module's line numbers, which is what vmem-lsp reads positions in."""
        if source is None:
            with open(path, encoding="utf-8") as f:
                source = read_notebook(f.read(), path).module
        loaded = types.ModuleType(f"__vmem_notebook_{name}")
        loaded.__file__ = path
        sys.modules[loaded.__name__] = loaded
        exec(compile(source, path, "exec"), vars(loaded))
        return loaded

    def user_deps(self, extra: list[str], modules: dict[str, object] | None = None) -> dict[str, str]:
        """Digests of the user files the request reached: `extra` and those of
        `modules`, by default the user modules loaded now (kept as the
        request's: it ends here). A file is read once per request."""
        if modules is None:
            modules = self.after = self.user_modules()
        files = set(extra) | {os.path.abspath(m.__file__) for m in modules.values()}
        found = {}
        for f in sorted(files):
            if f not in self.digests and os.path.isfile(f):
                self.digests[f] = file_digest(f)
            if f in self.digests:
                found[f] = self.digests[f]
        return found

    def user_modules(self) -> dict[str, object]:
        """Modules loaded from user files (not jax, not installed packages), by name."""
        found = {}
        for name in set(sys.modules) - self.baseline:
            module = sys.modules.get(name)
            file = getattr(module, "__file__", None)
            if file and "site-packages" not in file and self.capture.is_user_file(file):
                found[name] = module
        return found

    def check(self, params: dict, on_phase=lambda phase, kernel=None: None) -> ExampleResult:
        if params.get("origins", True) and self.unstamped:
            self.capture.forget_traces()
            self.overridden = self.overridden or self.unstamped_imports
            self.unstamped = self.unstamped_imports = False
            self.bare_traces = 0
        elif self.bare_traces >= BARE_TRACES_KEPT:
            # A tuner's configs are traced once each, and jax keeps every trace of a jitted
            # function under one hash (its static arguments are left out): each lookup
            # compares with all of them. A jitted kernel's own traces are evicted as it is
            # traced (capture.forget_own_traces); what else piles up (a jitted helper the
            # kernel calls, jnp's per shape) is cleared now and then. The trace just after
            # a clearing costs 6.5 ms where the others cost 3-4.
            self.capture.forget_traces()
            self.bare_traces = 0
        dropped = self.forget_user_modules()
        if dropped or self.last_modules is None or len(sys.modules) != self.last_count:
            before = self.user_modules()
        else:
            before = self.last_modules
        self.after, self.digests = None, {}
        try:
            return self._check(params, on_phase)
        finally:
            self.overridden = params.get("source") is not None
            now = self.after if self.after is not None else self.user_modules()
            ran = {os.path.abspath(m.__file__) for name, m in now.items() if before.get(name) is not m}
            self.reran = bool(ran & self.executed)
            self.executed |= ran
            self.loaded = self.user_deps([], now)
            self.last_modules, self.last_count = now, len(sys.modules)
            self.after, self.digests = None, {}

    def _check(self, params: dict, on_phase) -> ExampleResult:
        target = params["target"]
        path, module = params.get("path"), params.get("module")
        compile = params.get("compile", True)
        device = self.capture.trace_device(target)
        if device is None and compile:
            return ExampleResult(
                target,
                None,
                error=f"no TPU compiler for {target}: libtpu is not "
                f"available here (install jax[tpu] on Linux, or use --no-compile)",
                error_kind="no_compiler",
            )
        kind = device.device_kind if device is not None else None
        source = params.get("source")
        try:
            on_phase("import")
            namespace = vars(self.load_module(path, module, params.get("root"), source))
        except BaseException as error:
            return self.failure(target, kind, "import", "importing the module failed", error, path)
        origins = params.get("origins", True)
        count = len(sys.modules)
        try:
            calls = self.capture.capture_calls(
                params["example"],
                namespace,
                target,
                compile=compile,
                scoped_limit=scoped_limit(params),
                on_phase=on_phase,
                origins=origins,
            )
        except BaseException as error:
            return self.failure(target, kind, "raised", "the example raised", error, path)
        finally:
            if not origins:
                self.unstamped = True
                self.bare_traces += 1
                self.unstamped_imports = self.unstamped_imports or len(sys.modules) != count
        deps = self.user_deps([os.path.abspath(path)] if path else [])
        if source is not None:  # the text was sent, not read: the disk says nothing of it
            deps.pop(os.path.abspath(path), None)
        if not calls:
            return ExampleResult(
                target, kind, error="the example reaches no pallas_call", error_kind="no_kernel", deps=deps
            )
        return ExampleResult(target, kind, calls=tuple(calls), deps=deps)

    def failure(self, target, kind, error_kind, what, error, path) -> ExampleResult:
        if isinstance(error, OverTime):
            return ExampleResult(target, kind, error=f"the example ran {error}", error_kind="timeout")
        frames = tb.extract_tb(error.__traceback__)
        user = [f for f in frames if self.capture.is_user_file(f.filename)]
        origin = Origin(user[-1].filename, user[-1].lineno) if user else None
        message = f"{what}: {type(error).__name__}: {error}".strip()
        return ExampleResult(
            target,
            kind,
            error=message,
            error_kind=error_kind,
            error_origin=origin,
            deps=self.user_deps([os.path.abspath(path)] if path else []),
        )


SCOPED_FLAG = re.compile(r"--xla_tpu_scoped_vmem_limit_kib=(\d+)")


def scoped_limit(params: dict) -> tuple[int, str] | None:
    """The scoped VMEM limit a request compiles under, and where it was set:
    the request's (the user's setting), else the flag production jobs pass
    in LIBTPU_INIT_ARGS, which libtpu reads here too."""
    if params.get("scoped_vmem_limit"):
        return params["scoped_vmem_limit"], params.get("scoped_vmem_limit_source") or "the settings"
    if found := SCOPED_FLAG.search(os.environ.get("LIBTPU_INIT_ARGS", "")):
        return int(found[1]) * 1024, "LIBTPU_INIT_ARGS"
    return None


@dataclass(frozen=True)
class Limits:
    """What one request may cost the worker: it answers an over-limit request
    with an error and stays up."""

    max_request_bytes: int = 64 << 20
    max_seconds: float | None = None
    max_memory_bytes: int | None = None


def default_cache_folder() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "vmem-lsp", "worker")


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
        not sent: a tuner's trace-only request (no origins, no compile) is
        4 ms, and two more messages each way were a tenth of it; its limits
        are all the trace limit, which the client applies without being told."""
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
                where = self.where(sys._current_frames().get(main)) if phase in ("import", "trace") else None
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


class Server:
    """The request loop: check, put (blobs of shipped source), shutdown."""

    def __init__(self, out, limits: Limits, cache_folder: str):
        self.out = out
        self.out_lock = threading.Lock()
        self.limits = limits
        self.cache_folder = cache_folder
        self.worker = Worker()
        self.clock = PhaseClock(self.send, self.worker.capture.is_user_file)
        self.store = None

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

    def shipped(self):
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
        self.clock.begin(ident, params.get("target"), phase_limits, announce=not quiet)
        try:
            with request_limits(self.limits):
                result = plain(self.worker.check(params, self.clock.enter))
        except OverTime as error:
            result = plain(ExampleResult(params.get("target"), None, error=str(error), error_kind="timeout"))
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
    gives, without dataclasses.asdict's deep copies or a second encoding
    (asdict alone took 0.15 ms of a 5 ms trace-only request)."""
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
    args = parser.parse_args(argv)
    die_with_parent()
    limits = Limits(
        int(args.max_request_mb * 2**20),
        args.max_seconds,
        int(args.max_memory_mb * 2**20) if args.max_memory_mb else None,
    )
    out = protocol_stream()
    faulthandler.enable(sys.stderr)  # a crash names the Python frame it happened in
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    os.environ["VMEM_LSP_IN_WORKER"] = "1"  # vmem_lsp.fits in a module the worker imports: refused, not recursed
    server = Server(out, limits, args.cache_dir)
    out.write(
        json.dumps(
            {
                "hello": {
                    "protocol": PROTOCOL_VERSION,
                    "pid": os.getpid(),
                    **installed(),
                    **server.worker.capture.code_folders(),
                    "workspaces": os.path.abspath(workspaces_in(args.cache_dir)),
                }
            }
        )
        + "\n"
    )
    requests = Requests(sys.stdin.buffer, limits.max_request_bytes)
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
    return 0
