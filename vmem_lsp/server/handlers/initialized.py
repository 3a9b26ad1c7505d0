"""initialized: ask the client for its settings, then start the worker in
the background (libtpu takes seconds to load) so the first save is quick."""
import dataclasses
import os

from lsprotocol import types

from ..options import SECTION, options_from


async def handle(ls, params: types.InitializedParams) -> None:
    if ls.client_supports("workspace", "configuration"):
        try:
            [raw] = await ls.workspace_configuration_async(types.ConfigurationParams(
                items=[types.ConfigurationItem(section=SECTION)]))
            ls.session.options, problems = options_from(raw, ls.session.options)
            for problem in problems:
                ls.log(types.MessageType.Warning, f"vmem-lsp: {problem}")
        except Exception as error:      # a client that answers badly still gets a server
            ls.log(types.MessageType.Warning, f"vmem-lsp: reading settings failed: {error!r}")
    if ls.session.options.compile_on_open or ls.session.options.compile_on_save:
        root = ls.workspace.root_path or os.getcwd()
        settings = ls.session.settings(root)
        if not ls.trusted(root, settings):      # our own worker only: it runs nothing of the folder's
            settings = dataclasses.replace(settings, worker=None)
        ls.ensure_compiler().warm_up(settings)
