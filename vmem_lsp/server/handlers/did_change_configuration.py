"""didChangeConfiguration: new options; re-estimate open files, and recompile
them when what decides the verdict (targets, worker, limits) changed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from ..options import Options

if TYPE_CHECKING:
    from ..app import VmemServer


async def handle(ls: VmemServer, params: types.DidChangeConfigurationParams) -> None:
    raw = params.settings or await ls.client_settings()
    before = ls.session.options
    # The editor sends its whole section: a setting it no longer has goes back to the default.
    after = ls.take_options(raw, Options(trusted_folders=before.trusted_folders)) if raw else before
    verdict = lambda o: (o.targets, o.worker, o.python, o.timeout, o.trace_timeout, o.scoped_vmem_limit)
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
