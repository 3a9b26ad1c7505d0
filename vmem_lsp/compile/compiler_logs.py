"""A worker's compiler log files, in a folder of its own that goes when the worker does.

libtpu writes log files nobody reads or removes (tpu/family.py, log_folder_variable); a worker's
are sent to a temporary folder the client removes when it stops, kills or loses the worker, and at
exit whatever is left. A variable the user set is theirs: left as it is, and nothing removed."""

from __future__ import annotations

import atexit
import shutil
import tempfile

from ..families import families

_LIVE: set[str] = set()


def log_environment(environ: dict[str, str]) -> tuple[dict[str, str], str | None]:
    """`environ` with each family's log variable the user did not set pointed at a new folder; the folder."""
    variables = [f.log_folder_variable for f in families() if f.log_folder_variable]
    unset = [v for v in variables if v not in environ]
    if not unset:
        return environ, None
    folder = tempfile.mkdtemp(prefix="vmem-lsp-compiler-logs-")
    _LIVE.add(folder)
    return {**environ, **{v: folder for v in unset}}, folder


def remove(folder: str | None) -> None:
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        _LIVE.discard(folder)


@atexit.register
def _remove_left() -> None:
    for folder in list(_LIVE):
        remove(folder)
