"""initialized: ask the client for its settings, then start the worker in
the background (libtpu takes seconds to load) so the first save is quick."""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from ..app import VmemServer


async def handle(ls: VmemServer, params: types.InitializedParams) -> None:
    ls.take_options(await ls.client_settings(), ls.session.options)
    if ls.session.options.compile_on_open or ls.session.options.compile_on_save:
        root = ls.workspace.root_path or os.getcwd()
        settings = ls.session.settings(root)
        if not ls.trusted(root, settings):  # our own worker only: it runs nothing of the folder's
            # Nor the folder's interpreter (its pyproject's python, its .venv): that is its code too.
            python = ls.session.options.python or sys.executable
            settings = dataclasses.replace(settings, worker=None, python=python, python_source="the editor")
        ls.ensure_compiler().warm_up(settings)
