"""didChangeConfiguration: new options; re-estimate open files, and recompile
them when what decides the verdict (targets, worker, limits) changed."""
from lsprotocol import types

from ..options import SECTION, Options, options_from


async def handle(ls, params: types.DidChangeConfigurationParams) -> None:
    raw = params.settings
    if not raw and ls.client_supports("workspace", "configuration"):
        [raw] = await ls.workspace_configuration_async(types.ConfigurationParams(
            items=[types.ConfigurationItem(section=SECTION)]))
    before = ls.session.options
    # The editor sends its whole section: a setting it no longer has goes back to the default.
    ls.session.options, problems = (options_from(raw, Options(trusted_folders=before.trusted_folders)) if raw
                                    else (before, []))
    for problem in problems:
        ls.log(types.MessageType.Warning, f"vmem-lsp: {problem}")
    after = ls.session.options
    verdict = lambda o: (o.targets, o.worker, o.timeout, o.trace_timeout, o.scoped_vmem_limit)
    recompile = verdict(before) != verdict(after)
    for path in list(ls.session.documents):
        await ls.analyse_now(path)
        if recompile:
            ls.compile(path)
    if (before.inlay_hints, before.code_lens) != (after.inlay_hints, after.code_lens):
        if ls.client_supports("workspace", "inlay_hint", "refresh_support"):
            ls.workspace_inlay_hint_refresh(None)
        if ls.client_supports("workspace", "code_lens", "refresh_support"):
            ls.workspace_code_lens_refresh(None)
