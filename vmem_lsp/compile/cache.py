"""The on-disk cache of compile results, like ruff's and mypy's.

Key: the example, where it lives, the target, the request's settings (the
scoped VMEM limit), the jax / jaxlib / libtpu / vmem-lsp versions, and every
variable of the environment that changes what the compiler is told:
LIBTPU_INIT_ARGS (production jobs raise the scoped limit there), XLA_FLAGS and
jax's JAX_* configuration. Measured before: with LIBTPU_INIT_ARGS raising the
limit, a cached overflow was still served. Each entry records the digest of
every user source file the example reached; a changed file invalidates it.
Transient failures (timeouts, crashes, no compiler) are never cached.
"""
from __future__ import annotations

import hashlib
import json
import os
from importlib.metadata import PackageNotFoundError, version

from .client import CheckRequest
from .protocol import PROTOCOL_VERSION, ExampleResult, result_from_dict, to_json
from .shipping import file_digest

CACHE_DIR_NAME = ".vmem_lsp_cache"
TRANSIENT = ("timeout", "crashed", "no_compiler")
COMPILER_ENVIRONMENT = ("LIBTPU_INIT_ARGS", "XLA_FLAGS")


def compiler_environment(environ=None) -> dict:
    """The variables the worker inherits that reach tracing, lowering or libtpu."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items()) if k in COMPILER_ENVIRONMENT or k.startswith("JAX_")}


def tool_versions() -> dict:
    found = {"protocol": PROTOCOL_VERSION}
    for package in ("vmem-lsp", "jax", "jaxlib", "libtpu"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


class ResultCache:
    def __init__(self, directory: str, enabled: bool = True):
        self.directory = directory
        self.enabled = enabled
        self.versions = tool_versions()
        self.environment = compiler_environment()

    def key(self, request: CheckRequest) -> str:
        blob = json.dumps({"request": vars(request), "versions": self.versions, "environment": self.environment},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _file(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key + ".json")

    def get(self, request: CheckRequest) -> ExampleResult | None:
        if not self.enabled:
            return None
        try:
            with open(self._file(self.key(request))) as f:
                entry = json.load(f)
            result = result_from_dict(entry)
        except (OSError, ValueError, TypeError, KeyError):
            return None
        for path, digest in result.deps.items():
            try:
                if file_digest(path) != digest:
                    return None
            except OSError:
                return None
        return result

    def put(self, request: CheckRequest, result: ExampleResult) -> None:
        if not self.enabled or result.error_kind in TRANSIENT:
            return
        path = self._file(self.key(request))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._mark_ignored()
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w") as f:
            f.write(to_json(result))
        os.replace(temporary, path)

    def _mark_ignored(self) -> None:
        """Like .ruff_cache: the folder tells git to ignore it."""
        ignore = os.path.join(self.directory, ".gitignore")
        if not os.path.exists(ignore):
            with open(ignore, "w") as f:
                f.write("# Automatically created by vmem-lsp.\n*\n")
