"""The on-disk cache of compile results, like ruff's and mypy's.

Key: the example, where it lives, the target, the request's settings (the
scoped VMEM limit; whether the result carries the specs' origins), the jax /
jaxlib / libtpu / vmem-lsp versions, and every variable of the environment
that changes what the compiler is told:
LIBTPU_INIT_ARGS (production jobs raise the scoped limit there), XLA_FLAGS and
jax's JAX_* configuration (without LIBTPU_INIT_ARGS in the key, a job that
raises the limit there would be served a cached overflow). Each entry records the digest of
every user source file the example reached; a changed file invalidates it.
Transient failures (timeouts, crashes, no compiler) are never cached.

The folder may be a URL (s3://, gs://, any fsspec URL: shared_cache.py), which
CI shards and editors share. Paths under the example's project root (the
pyproject's folder, or the top of the file's package) are written relative to
it, in keys and entries, so a CI runner's checkout and a developer's, at
different paths, share entries; a library file outside stays absolute, and a
digest that does not match on this machine recompiles as any change does.
An entry is never trusted as read: it carries its body's sha256 and length,
and one that does not match (a partial write, a damaged object) is counted,
logged and compiled again, then replaced.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import threading
import uuid

from ..results import ExampleResult
from ..versions import COMPILER_PACKAGES, installed
from .client import CheckRequest, project_root
from .protocol import PROTOCOL_VERSION, result_from_dict
from .shipping import file_digest, relocate

log = logging.getLogger(__name__)

PROJECT = "<project>"  # the project root, in keys and entries
# Not kept: what another run may not meet. "import": a module the example needs that is not
# installed yet (the key holds jax's versions, not every package's, and the digests only the user's files).
TRANSIENT = ("timeout", "crashed", "no_compiler", "memory", "cancelled", "internal", "import")
COMPILER_ENVIRONMENT = ("LIBTPU_INIT_ARGS", "XLA_FLAGS")


def compiler_environment(environ=None) -> dict:
    """The variables the worker inherits that reach tracing, lowering or libtpu."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items()) if k in COMPILER_ENVIRONMENT or k.startswith("JAX_")}


def tool_versions(compiler: dict[str, str | None] | None = None) -> dict:
    """What the key holds of the tools: vmem-lsp's and the compiler's versions (`compiler`:
    those of the worker's interpreter when it is not this one)."""
    return {"protocol": PROTOCOL_VERSION, **installed(("vmem-lsp", *COMPILER_PACKAGES)), **(compiler or {})}


ENTRY_MAGIC = b"vmem-lsp-entry 1"


def seal(body: bytes) -> bytes:
    """An entry: a header with the body's sha256 and length, then the body.
    A reader can then tell a whole entry from a truncated or damaged one."""
    return b"%s %s %d\n" % (ENTRY_MAGIC, hashlib.sha256(body).hexdigest().encode(), len(body)) + body


def unseal(data: bytes) -> bytes:
    """The body of a whole entry; ValueError for a partial, damaged or foreign one."""
    header, _, body = data.partition(b"\n")
    parts = header.split(b" ")
    if len(parts) != 4 or b" ".join(parts[:2]) != ENTRY_MAGIC:
        raise ValueError("no entry header")
    digest, length = parts[2].decode(), int(parts[3])
    if len(body) != length:
        raise ValueError(f"{len(body)} bytes of {length}")
    if hashlib.sha256(body).hexdigest() != digest:
        raise ValueError("digest mismatch")
    return body


class LocalStore:
    """Entries as files under a folder, like .ruff_cache."""

    def __init__(self, directory: str):
        self.directory = directory

    def path(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key + ".json")

    def read(self, key: str) -> bytes | None:
        try:
            with open(self.path(key), "rb") as f:
                return f.read()
        except OSError:
            return None

    def write(self, key: str, data: bytes, replace: bool = False) -> None:
        """Write then rename, through a temporary file of this writer alone:
        threads of one process may race on a key."""
        path = self.path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._mark_ignored()
        temporary = f"{path}.{uuid.uuid4().hex}.tmp"
        try:
            with open(temporary, "xb") as f:
                f.write(data)
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def _mark_ignored(self) -> None:
        """Like .ruff_cache: the folder tells git to ignore it."""
        ignore = os.path.join(self.directory, ".gitignore")
        if not os.path.exists(ignore):
            with open(ignore, "w") as f:
                f.write("# Automatically created by vmem-lsp.\n*\n")


def open_store(location: str):
    """A folder, or for a URL the shared store (fsspec imported only then);
    None when that store cannot be used here."""
    from .shared_cache import is_url

    if not is_url(location):
        return LocalStore(location)
    from .shared_cache import open_store as open_shared

    return open_shared(location)


def relative(value, root: str | None):
    """`value` with the paths under `root` written relative to it."""
    return relocate(value, root, PROJECT) if root else value


def absolute(value, root: str | None):
    """`value` with the relative paths `relative` wrote put under `root` again."""
    return relocate(value, PROJECT, root) if root else value


class ResultCache:
    def __init__(self, directory: str, enabled: bool = True, compiler: dict[str, str | None] | None = None):
        self.directory = directory
        self.versions = tool_versions(compiler)
        self.environment = compiler_environment()
        self.store = open_store(directory) if enabled else None
        self.enabled = self.store is not None
        self.rejected = 0  # entries found partial or damaged, compiled again
        self.lock = threading.Lock()
        self.damaged: set[str] = set()

    def key(self, request: CheckRequest) -> str:
        fields = relative(vars(request), project_root(request))
        if fields.get("origins", True):
            # A result without origins is another result (check shows those lines),
            # but the default leaves the keys of entries written before it as they were.
            fields = {k: v for k, v in fields.items() if k != "origins"}
        if not fields.get("estimate"):  # likewise: the flag is in the key only when set
            fields = {k: v for k, v in fields.items() if k != "estimate"}
        if not fields.get("spills"):  # and this one
            fields = {k: v for k, v in fields.items() if k != "spills"}
        blob = json.dumps(
            {"request": fields, "versions": self.versions, "environment": self.environment}, sort_keys=True
        )
        return hashlib.sha256(blob.encode()).hexdigest()

    def get(self, request: CheckRequest) -> ExampleResult | None:
        if self.store is None:
            return None
        key = self.key(request)
        data = self.store.read(key)
        if data is None:
            return None
        result = self._trusted(key, data, project_root(request))
        if result is None:
            return None
        for path, digest in result.deps.items():
            try:
                if file_digest(path) != digest:
                    return None
            except OSError:
                return None
        return result

    def _trusted(self, key: str, data: bytes, root: str | None) -> ExampleResult | None:
        """The entry's result when it is whole; else None, counted and logged."""
        self.damaged.add(key)
        if data[:1] == b"{":
            log.debug("cache entry %s… has no header (an earlier vmem-lsp wrote it)", key[:12])
            return None
        try:
            result = result_from_dict(absolute(json.loads(unseal(data)), root))
        except (ValueError, TypeError, KeyError, UnicodeDecodeError) as error:
            with self.lock:
                self.rejected += 1
            log.warning("cache entry %s… in %s ignored (%s); compiling it again", key[:12], self.directory, error)
            return None
        self.damaged.discard(key)
        return result

    def put(self, request: CheckRequest, result: ExampleResult) -> None:
        # A crash is transient, except libtpu's abort after it wrote the estimate asked for: the
        # same compile aborts the same way, and that estimate is the answer (sweep --rank speed).
        if self.store is None or (result.error_kind in TRANSIENT and result.estimate_left is None):
            return
        key = self.key(request)
        body = relative(dataclasses.asdict(result), project_root(request))
        self.store.write(key, seal(json.dumps(body).encode()), replace=key in self.damaged)
        self.damaged.discard(key)
