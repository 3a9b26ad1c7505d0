"""The compile worker: a separate process that imports user code and runs the
TPU compiler, so nothing it does can take the editor or the CLI down.

Protocol: JSON lines. It first writes {"hello": {...versions}}; then for each
request line {"id", "method": "check", "params": {...}} it writes one line
{"id", "result": ExampleResult}. The user's own prints go to stderr, never to
the protocol stream.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
import traceback as tb
from importlib.metadata import PackageNotFoundError, version

from .protocol import PROTOCOL_VERSION, ExampleResult, Origin, to_json


def versions() -> dict:
    found = {}
    for package in ("jax", "jaxlib", "libtpu"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


def protocol_stream():
    """Keep fd 1 for the protocol and send everything else written to stdout
    (user prints, C libraries) to stderr."""
    stream = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return stream


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

    def forget_user_modules(self) -> None:
        """Drop what earlier requests imported from user files, so an edited
        file is read afresh; jax and other installed packages stay loaded."""
        for name in list(sys.modules):
            if name in self.baseline:
                continue
            file = getattr(sys.modules[name], "__file__", None) or ""
            if file and "site-packages" not in file and self.capture.is_user_file(file):
                del sys.modules[name]
        sys.path[:] = self.base_path

    def load_module(self, path: str | None, module: str | None, root: str | None, source: str | None = None):
        """Import the example's module; with `source`, run that text as the
        file at `path` instead of what is on disk (to verify a fix)."""
        if root:
            sys.path.insert(0, root)
        if module:
            return importlib.import_module(module)
        directory, name = module_name_for(path)
        sys.path.insert(0, directory)
        if "." in name and source is None:
            return importlib.import_module(name)
        if "." in name:
            importlib.import_module(name.rpartition(".")[0])
        elif name in sys.modules:           # a user file named like a loaded module (copy.py)
            name = f"__vmem_example_{name}"
        spec = importlib.util.spec_from_file_location(name, path)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[name] = loaded
        if source is None:
            spec.loader.exec_module(loaded)
        else:
            exec(compile(source, path, "exec"), vars(loaded))
        return loaded

    def user_deps(self, extra: list[str]) -> dict[str, str]:
        files = set(extra)
        for name in set(sys.modules) - self.baseline:
            file = getattr(sys.modules[name], "__file__", None)
            if file and "site-packages" not in file and self.capture.is_user_file(file):
                files.add(os.path.abspath(file))
        return {f: file_digest(f) for f in sorted(files) if os.path.isfile(f)}

    def check(self, params: dict) -> ExampleResult:
        target = params["target"]
        path, module = params.get("path"), params.get("module")
        self.forget_user_modules()
        compile = params.get("compile", True)
        device = self.capture.trace_device(target)
        if device is None and compile:
            return ExampleResult(target, None, error=f"no TPU compiler for {target}: libtpu is not "
                                 f"available here (install jax[tpu] on Linux, or use --no-compile)",
                                 error_kind="no_compiler")
        kind = device.device_kind if device is not None else None
        source = params.get("source")
        try:
            namespace = vars(self.load_module(path, module, params.get("root"), source))
        except BaseException as error:
            return self.failure(target, kind, "import", "importing the module failed", error, path)
        try:
            calls = self.capture.capture_calls(params["example"], namespace, target, compile=compile)
        except BaseException as error:
            return self.failure(target, kind, "raised", "the example raised", error, path)
        deps = self.user_deps([os.path.abspath(path)] if path else [])
        if source is not None:              # the text was sent, not read: the disk says nothing of it
            deps.pop(os.path.abspath(path), None)
        if not calls:
            return ExampleResult(target, kind, error="the example reaches no pallas_call",
                                 error_kind="no_kernel", deps=deps)
        return ExampleResult(target, kind, calls=tuple(calls), deps=deps)

    def failure(self, target, kind, error_kind, what, error, path) -> ExampleResult:
        frames = tb.extract_tb(error.__traceback__)
        user = [f for f in frames if self.capture.is_user_file(f.filename)]
        origin = Origin(user[-1].filename, user[-1].lineno) if user else None
        message = f"{what}: {type(error).__name__}: {error}".strip()
        return ExampleResult(target, kind, error=message, error_kind=error_kind, error_origin=origin,
                             deps=self.user_deps([os.path.abspath(path)] if path else []))


def file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main() -> int:
    out = protocol_stream()
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    worker = Worker()
    out.write(json.dumps({"hello": {"protocol": PROTOCOL_VERSION, "pid": os.getpid(), **versions()}}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except json.JSONDecodeError as error:
            out.write(json.dumps({"id": None, "error": f"bad request: {error}"}) + "\n")
            continue
        if request.get("method") == "shutdown":
            out.write(json.dumps({"id": request.get("id"), "result": None}) + "\n")
            break
        result = worker.check(request.get("params", {}))
        out.write(json.dumps({"id": request.get("id"), "result": json.loads(to_json(result))}) + "\n")
    return 0
