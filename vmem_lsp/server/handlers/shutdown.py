"""shutdown: stop the worker and the background threads, leaving no process behind."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..app import VmemServer


def handle(ls: VmemServer, params) -> None:
    ls.stop_background()
