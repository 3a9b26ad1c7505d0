"""initialize: read the editor's initializationOptions into the typed options."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from ..app import VmemServer


def handle(ls: VmemServer, params: types.InitializeParams) -> None:
    ls.take_options(params.initialization_options, ls.session.options, initialization=True)
