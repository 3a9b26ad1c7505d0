"""Running one request inside the worker process: import the example's
module (again only when one of its files changed), trace the example and
capture its calls (capture.py), and answer with an `ExampleResult`, a failure
included, pointing at the user's line. The wire around it is
worker_server.py; the caps on a request, request_limits.py.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import re
import sys
import traceback as tb
import types

from ..families import families, family_of
from ..results import ExampleResult, Origin
from ..source.notebook import is_notebook, read_notebook
from .request_limits import OverTime
from .shipping import file_digest

# Said when a GPU request needs a process that has not compiled Mosaic GPU for another architecture.
FRESH = "this worker compiled Mosaic GPU for another GPU architecture: asked again in a fresh one"
ESTIMATES = "VMEM_LSP_ESTIMATES"  # set in a worker started with --estimate (worker_server)
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
        # jax: loaded here, in the worker process only
        from . import capture, chip_view, devices, jax_compat, provenance

        self.capture, self.devices, self.provenance, self.compat = capture, devices, provenance, jax_compat
        self.chip_view = chip_view
        # Failures raised in these files are vmem-lsp's own, not the example's.
        self.own_files = {os.path.abspath(m.__file__ or "") for m in (capture, provenance, jax_compat, chip_view)}
        provenance.install_provenance()
        for family in families():  # each family's own classes, before user modules import
            family.worker().install()
        chip_view.install()
        # The chip the loaded user modules asked jax about (chip_view): they may keep its
        # answer, so a request for another chip imports them again. None: they never asked.
        self.asked_on: str | None = None
        self.baseline = set(sys.modules)
        self.base_path = list(sys.path)
        self.loaded: dict[str, str] = {}  # user files whose modules are loaded -> their digest then
        self.by_path: dict[str, types.ModuleType] = {}  # modules loaded from a file path, kept with them
        self.executed: set[str] = set()  # user files this process has ever run
        self.overridden = False  # the last request ran sent text in place of a file
        self.reran = False  # this request ran again a file run before
        # The user modules as the last request left them (and len(sys.modules) then):
        # the next request starts from them unless a file changed in between.
        self.last_modules: dict[str, types.ModuleType] | None = None
        self.last_count = 0
        self.after: dict[str, types.ModuleType] | None = None  # this request's user modules once it ran
        self.digests: dict[str, str] = {}  # this request's digests of user files
        # A request without origins traced since the caches were last cleared: jax
        # keeps its traces, and a later request that wants origins would get that
        # trace back, its specs unstamped (unstamped_imports: and a module imported
        # during it made its module-level specs unstamped).
        self.unstamped = False
        self.unstamped_imports = False
        self.bare_traces = 0  # requests without origins since jax's traces were cleared

    def forget_user_modules(self, force: bool = False) -> bool:
        """Drop what earlier requests imported from user files when one of
        them changed on disk (or was replaced by sent text), or when `force`d
        (they asked which chip they run on, and this request is for another),
        so they are read afresh. Unchanged, they stay loaded: running a module
        twice breaks what registers itself on import (jax's PRNG
        implementations, pytree types), and costs time. jax and installed
        packages always stay."""
        sys.path[:] = self.base_path
        changed = any(file_digest(f) != digest if os.path.isfile(f) else True for f, digest in self.loaded.items())
        if not (changed or self.overridden or force):
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
        if path is None:
            raise ValueError("a check request names a path or a module")
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
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path} as a module")
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

    def user_deps(self, extra: list[str], modules: dict[str, types.ModuleType] | None = None) -> dict[str, str]:
        """Digests of the user files the request reached: `extra` and those of
        `modules`, by default the user modules loaded now (kept as the
        request's: it ends here). A file is read once per request."""
        if modules is None:
            modules = self.after = self.user_modules()
        files = set(extra) | {os.path.abspath(m.__file__) for m in modules.values() if m.__file__}
        found = {}
        for f in sorted(files):
            if f not in self.digests and os.path.isfile(f):
                self.digests[f] = file_digest(f)
            if f in self.digests:
                found[f] = self.digests[f]
        return found

    def user_modules(self) -> dict[str, types.ModuleType]:
        """Modules loaded from user files (not jax, not installed packages), by name."""
        found: dict[str, types.ModuleType] = {}
        for name in set(sys.modules) - self.baseline:
            module = sys.modules.get(name)
            file = getattr(module, "__file__", None)
            if module is not None and file and "site-packages" not in file and self.provenance.is_user_file(file):
                found[name] = module
        return found

    def check(self, params: dict, on_phase=lambda phase, kernel=None: None) -> ExampleResult:
        if params.get("origins", True) and self.unstamped:
            self.provenance.forget_traces()
            self.overridden = self.overridden or self.unstamped_imports
            self.unstamped = self.unstamped_imports = False
            self.bare_traces = 0
        elif self.bare_traces >= BARE_TRACES_KEPT:
            # A tuner's configs are traced once each, and jax keeps every trace of a jitted
            # function under one hash (its static arguments are left out): each lookup
            # compares with all of them. A jitted kernel's own traces are evicted as it is
            # traced (tracing.forget_own_traces); what else piles up (a jitted helper the
            # kernel calls, jnp's per shape) is cleared now and then: not at every request,
            # as the trace just after a clearing is the slowest (bench/RESULTS.md).
            self.provenance.forget_traces()
            self.bare_traces = 0
        other_chip = self.asked_on is not None and self.asked_on != params.get("target")
        if other_chip:  # a jitted function's trace kept the other chip's answer too
            self.provenance.forget_traces()
        self.chip_view.take_asked()
        dropped = self.forget_user_modules(force=other_chip)
        if dropped:
            self.asked_on = None
        if dropped or self.last_modules is None or len(sys.modules) != self.last_count:
            before = self.user_modules()
        else:
            before = self.last_modules
        self.after, self.digests = None, {}
        try:
            result = self._check(params, on_phase)
            losses = self.compat.losses()
            return dataclasses.replace(result, losses=losses) if losses else result
        finally:
            if self.chip_view.take_asked():
                self.asked_on = params.get("target")
            self.overridden = params.get("source") is not None
            now = self.after if self.after is not None else self.user_modules()
            ran = {os.path.abspath(m.__file__) for name, m in now.items() if m.__file__ and before.get(name) is not m}
            self.reran = bool(ran & self.executed)
            self.executed |= ran
            self.loaded = self.user_deps([], now)
            self.last_modules, self.last_count = now, len(sys.modules)
            self.after, self.digests = None, {}

    def _check(self, params: dict, on_phase) -> ExampleResult:
        target = params["target"]
        path, module = params.get("path"), params.get("module")
        compile = params.get("compile", True)
        if params.get("estimate") and not os.environ.get(ESTIMATES):
            raise ValueError("an estimate was asked of a worker started without --estimate")
        side = family_of(target).worker()
        device = self.devices.trace_device(target)
        if device is not None and compile and side.fresh_process(device):
            return ExampleResult(target, device.device_kind, error=FRESH, error_kind="fresh_worker")
        if device is None and compile:
            said = getattr(self.devices, "device_error", lambda _: None)(target) or ""
            return ExampleResult(target, None, error=side.missing(target, said), error_kind="no_compiler")
        kind = device.device_kind if device is not None else None
        source = params.get("source")
        try:
            on_phase("import")
            with self.chip_view.seen_as(self.devices.all_devices(device)):
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
                estimate=bool(params.get("estimate")),
                spills=bool(params.get("spills")),
            )
        except self.compat.CompatError as error:
            return self.internal(target, kind, str(error), path)
        except BaseException as error:
            if self.raised_by_us(error):
                return self.internal(target, kind, self.compat.internal_message(error, "tracing the example"), path)
            return self.failure(target, kind, "raised", "the example raised", error, path)
        finally:
            if not origins:
                self.unstamped = True
                self.bare_traces += 1
                self.unstamped_imports = self.unstamped_imports or len(sys.modules) != count
        deps = self.user_deps([os.path.abspath(path)] if path else [])
        if source is not None and path:  # the text was sent, not read: the disk says nothing of it
            deps.pop(os.path.abspath(path), None)
        if not calls:
            return ExampleResult(
                target, kind, error="the example reaches no pallas_call", error_kind="no_kernel", deps=deps
            )
        return ExampleResult(target, kind, calls=tuple(calls), deps=deps)

    def raised_by_us(self, error: BaseException) -> bool:
        return raised_in(error, self.own_files)

    def internal(self, target, kind, message: str, path) -> ExampleResult:
        """Our bug: said on the worker's stderr whole, and as its own kind."""
        print(message, file=sys.stderr)
        tb.print_exc(file=sys.stderr)
        return ExampleResult(
            target,
            kind,
            error=message,
            error_kind="internal",
            deps=self.user_deps([os.path.abspath(path)] if path else []),
        )

    def failure(self, target, kind, error_kind, what, error, path) -> ExampleResult:
        if isinstance(error, OverTime):
            return ExampleResult(target, kind, error=f"the example ran {error}", error_kind="timeout")
        if (missing := self.compat.undeclared_dependency(error)) is not None:
            return ExampleResult(target, kind, error=missing, error_kind=error_kind)
        frames = tb.extract_tb(error.__traceback__)
        user = [f for f in frames if self.provenance.is_user_file(f.filename)]
        origin = Origin(user[-1].filename, user[-1].lineno or 0) if user else None
        message = f"{what}: {type(error).__name__}: {error}".strip()
        return ExampleResult(
            target,
            kind,
            error=message,
            error_kind=error_kind,
            error_origin=origin,
            deps=self.user_deps([os.path.abspath(path)] if path else []),
        )


def raised_in(error: BaseException, files: set[str]) -> bool:
    """The innermost frame is in one of `files`, vmem-lsp's capture and hooks:
    a jax whose internals moved (jax 0.7.2's GridMapping without
    scratch_avals), not the user's code, which is always deeper than the hooks
    that call it. The request's own limits are never ours."""
    if isinstance(error, OverTime | MemoryError):
        return False
    frames = tb.extract_tb(error.__traceback__)
    if not frames or os.path.abspath(frames[-1].filename) not in files:
        return False
    # A hook's call of what it wraps fails there when the user's arguments do not
    # fit (pl.pallas_call(..., check_rep=True): a TypeError raised at our line).
    return not (isinstance(error, TypeError) and frames[-1].name in PASS_THROUGH)


# The provenance hooks' functions that hand the user's arguments on to jax (provenance.py).
PASS_THROUGH = {"pallas_call", "invoke", "run_scoped", "init"}


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
