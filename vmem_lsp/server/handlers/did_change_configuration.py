"""didChangeConfiguration: new options; re-estimate open files, and recompile
them when what decides the verdict (targets, worker, timeout) changed."""
from lsprotocol import types

from ..options import SECTION, options_from


async def handle(ls, params: types.DidChangeConfigurationParams) -> None:
    raw = params.settings
    if not raw and ls.client_supports("workspace", "configuration"):
        [raw] = await ls.workspace_configuration_async(types.ConfigurationParams(
            items=[types.ConfigurationItem(section=SECTION)]))
    before = ls.session.options
    ls.session.options, problems = options_from(raw, before)
    for problem in problems:
        ls.log(types.MessageType.Warning, f"vmem-lsp: {problem}")
    after = ls.session.options
    recompile = (before.targets, before.worker, before.timeout) != (after.targets, after.worker, after.timeout)
    for path in list(ls.session.documents):
        await ls.analyse_now(path)
        if recompile:
            ls.compile(path)
