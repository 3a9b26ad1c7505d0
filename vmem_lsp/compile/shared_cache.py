"""The cache's entries in an object store (s3://, gs://, any fsspec URL), so
CI shards, Ray tasks and developers' editors reuse each other's compiles.

fsspec is imported only here and only for a URL: a plain folder never pays for
it. Entries are content-addressed and immutable. A write is atomic: on S3 a
conditional put (If-None-Match: *), which a second writer of the same key loses
harmlessly; elsewhere a write to a unique temporary key, then a move (a rename,
or a server-side copy that creates the entry whole). A reader never trusts an
entry: cache.py checks its digest and length. A store that fails (no
credentials, unreachable) is used no more by this cache: the check goes on
uncached rather than waiting on every request.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import uuid

log = logging.getLogger(__name__)

URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}
S3_PROTOCOLS = ("s3", "s3a")  # s3fs: pipe_file(mode="create") is If-None-Match
ONE_REQUEST = {"max_concurrency": 1}  # s3fs's cat_file: a GET alone, no HEAD for the size first
TEMPORARY_FOLDER = "tmp"


def is_url(location: str | None) -> bool:
    """s3://bucket/prefix and the like; a Windows drive (C:\\) is two letters short of one."""
    return location is not None and URL.match(location) is not None


def protocol_of(url: str) -> str:
    return url.split("://", 1)[0].lower()


def install_hint(url: str) -> str:
    """What to install for `url`: the extra that brings its filesystem."""
    extra = EXTRAS.get(protocol_of(url))
    if extra:
        return f"pip install 'vmem-lsp[{extra}]'"
    return f"pip install fsspec and the package fsspec names for {protocol_of(url)}://"


@functools.cache
def warn_once(message: str) -> None:
    """The server makes a cache per job: say a lasting problem once per process."""
    log.warning(message)


def open_store(url: str) -> RemoteStore | None:
    """The store at `url`, or None (said once) when its filesystem is not installed."""
    try:
        from fsspec.core import url_to_fs

        fs, root = url_to_fs(url)
    except ImportError as error:
        warn_once(f"shared cache {url}: {error}. To use it: {install_hint(url)}. Checking without a cache.")
        return None
    except (ValueError, OSError) as error:
        warn_once(f"shared cache {url}: cannot open it ({error}). Checking without a cache.")
        return None
    s3 = protocol_of(url) in S3_PROTOCOLS
    return RemoteStore(url, fs, root.rstrip("/"), exclusive=s3, read_options=ONE_REQUEST if s3 else {})


class RemoteStore:
    """Bytes by key in an fsspec filesystem, the local folder's layout (ab/abc….json)."""

    def __init__(self, url: str, fs, root: str, exclusive: bool, read_options: dict):
        self.url, self.fs, self.root = url, fs, root
        self.exclusive = exclusive
        self.read_options = read_options
        self.failed = False

    def path(self, key: str) -> str:
        return f"{self.root}/{key[:2]}/{key}.json"

    def read(self, key: str) -> bytes | None:
        if self.failed:
            return None
        try:
            return self.fs.cat_file(self.path(key), **self.read_options)
        except FileNotFoundError:
            return None
        except Exception as error:  # s3fs/botocore raise beyond OSError (credentials, endpoint)
            self.give_up("reading", error)
            return None

    def write(self, key: str, data: bytes, replace: bool = False) -> None:
        """Atomically; `replace` overwrites an entry found corrupt."""
        if self.failed:
            return
        try:
            if self.exclusive and not replace and self.write_exclusive(self.path(key), data):
                return
            self.write_by_move(key, data)
        except Exception as error:
            self.give_up("writing", error)

    def write_exclusive(self, path: str, data: bytes) -> bool:
        """A conditional put: True when the entry is there (ours, or a racing
        writer's: one key, one compile); False when the store has no such put."""
        try:
            self.fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            return True
        except (TypeError, NotImplementedError, OSError) as error:
            log.info("shared cache %s: no conditional put (%s); writing through a temporary key", self.url, error)
            self.exclusive = False
            return False
        return True

    def write_by_move(self, key: str, data: bytes) -> None:
        """A unique temporary key, then a move: no reader sees a partial entry,
        and racing writers each move a whole one."""
        temporary = f"{self.root}/{TEMPORARY_FOLDER}/{key}.{uuid.uuid4().hex}"
        self.with_parent(temporary, lambda: self.fs.pipe_file(temporary, data))
        try:
            self.with_parent(self.path(key), lambda: self.fs.mv(temporary, self.path(key)))
        except Exception:
            with contextlib.suppress(Exception):
                self.fs.rm_file(temporary)
            raise

    def with_parent(self, path: str, action) -> None:
        """`action`, making `path`'s folder first where folders are real
        (file://, sftp://); object stores have none to make."""
        try:
            action()
        except FileNotFoundError:
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            action()

    def give_up(self, doing: str, error: Exception) -> None:
        self.failed = True
        log.warning(
            "shared cache %s: %s failed (%s: %s); going on without it for this run",
            self.url,
            doing,
            type(error).__name__,
            error,
        )
