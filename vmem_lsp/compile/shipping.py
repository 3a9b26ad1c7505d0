"""Sending the user's source to a worker on another machine.

The client describes the project as a manifest {relative path: sha256}; the
worker keeps blobs by digest under its cache folder, asks for the ones it
lacks, and lays the files out in a workspace folder of its own. Unchanged
files are never sent twice. Paths in results are translated back.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from typing import Protocol

from ..config import CACHE_DIR_NAME

SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", "node_modules", "build", "dist", CACHE_DIR_NAME}
MAX_FILES = 5000


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return digest(f.read())


class SourceTexts(Protocol):
    """Where the text of a file to ship is read: this machine's disk
    (Manifests), or, on a Ray node, the object the driver put (ray_backend.Project)."""

    def read(self, root: str, relative: str) -> str: ...


class Manifests:
    """Client side: the manifest of a project folder, hashing only what changed."""

    def __init__(self):
        self.known: dict[str, tuple[float, int, str]] = {}  # path -> (mtime, size, sha)

    def manifest(self, root: str) -> dict[str, str]:
        found: dict[str, str] = {}
        for directory, subdirs, files in os.walk(root):
            subdirs[:] = [d for d in subdirs if d not in SKIP_DIRS and not d.startswith(".")]
            for name in files:
                if name.endswith(".py") and len(found) < MAX_FILES:
                    path = os.path.join(directory, name)
                    found[os.path.relpath(path, root)] = self.sha(path)
        return found

    def sha(self, path: str) -> str:
        stat = os.stat(path)
        cached = self.known.get(path)
        if cached and cached[:2] == (stat.st_mtime, stat.st_size):
            return cached[2]
        sha = file_digest(path)
        self.known[path] = (stat.st_mtime, stat.st_size, sha)
        return sha

    @staticmethod
    def read(root: str, relative: str) -> str:
        with open(os.path.join(root, relative), encoding="utf-8", errors="surrogateescape") as f:
            return f.read()


class Store:
    """Worker side: blobs by digest and the workspaces built from them, all
    under the worker's own cache folder (the only place it writes)."""

    def __init__(self, folder: str):
        self.blobs = os.path.join(folder, "blobs")
        self.workspaces = workspaces_in(folder)
        os.makedirs(self.blobs, exist_ok=True)
        os.makedirs(self.workspaces, exist_ok=True)
        self.laid_out: dict[str, dict[str, str]] = {}  # workspace -> the manifest this process last laid there

    def missing(self, manifest: dict[str, str]) -> list[str]:
        return sorted({sha for sha in manifest.values() if not os.path.exists(os.path.join(self.blobs, sha))})

    def put(self, blobs: dict[str, str]) -> None:
        for sha, text in blobs.items():
            data = text.encode("utf-8", errors="surrogateescape")
            if digest(data) != sha:
                raise ValueError(f"blob {sha[:12]} does not match its digest")
            temporary = os.path.join(self.blobs, f"{sha}.{os.getpid()}.tmp")
            with open(temporary, "wb") as f:
                f.write(data)
            os.replace(temporary, os.path.join(self.blobs, sha))

    def workspace(self, client_root: str, manifest: dict[str, str]) -> str:
        """A folder holding exactly the manifest's files, one per client root.
        Several workers on one machine (a Ray node's) share it: each file is
        written whole (a rename), so none imports half a file; an unchanged
        manifest is not read again."""
        folder = workspace_folder(self.workspaces, client_root)
        if self.laid_out.get(folder) == manifest:
            return folder
        wanted = set()
        for relative, sha in manifest.items():
            target = os.path.normpath(os.path.join(folder, relative))
            if not target.startswith(folder + os.sep):
                raise ValueError(f"path {relative!r} leaves the workspace")
            wanted.add(target)
            if os.path.exists(target) and file_digest(target) == sha:
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            temporary = f"{target}.{os.getpid()}.tmp"
            shutil.copyfile(os.path.join(self.blobs, sha), temporary)
            os.replace(temporary, target)
        for directory, _, files in os.walk(folder):
            for name in files:
                path = os.path.join(directory, name)
                if name.endswith(".py") and path not in wanted:
                    os.remove(path)
        self.laid_out[folder] = dict(manifest)
        return folder


def workspaces_in(cache_folder: str) -> str:
    """A worker's folder of workspaces, under its cache folder."""
    return os.path.join(cache_folder, "workspaces")


def workspace_folder(workspaces: str, client_root: str) -> str:
    """Where a worker lays out the files of one client's project: its
    `workspaces` folder (said in its hello), a folder per client root."""
    return os.path.join(workspaces, digest(client_root.encode())[:16])


def relocate(value, old: str, new: str):
    """Every string in a JSON-like value that starts with folder `old`, moved to `new`."""
    if isinstance(value, str):
        return new + value[len(old) :] if value == old or value.startswith(old + os.sep) else value
    if isinstance(value, dict):
        return {relocate(k, old, new): relocate(v, old, new) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [relocate(v, old, new) for v in value]
    return value
