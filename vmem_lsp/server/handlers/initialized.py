"""initialized: ask the client for its settings, then start the worker in
the background (libtpu takes seconds to load) so the first save is quick."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from ..app import VmemServer


async def handle(ls: VmemServer, params: types.InitializedParams) -> None:
    ls.take_options(await ls.client_settings(), ls.session.options)
    if ls.session.options.compile_on_open or ls.session.options.compile_on_save:
        root = ls.workspace.root_path or os.getcwd()
        settings = ls.session.settings(root)
        # In a folder not trusted yet nothing is compiled, and the worker it will compile in is the
        # folder's interpreter (its .venv, its pyproject's python), which only trust may run: a worker
        # started now in vmem-lsp's own Python would only be stopped again.
        if ls.trusted(root, settings):
            ls.ensure_compiler().warm_up(settings)
