"""codeLens: the pallas_call totals, for clients that cannot show inlay hints."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from ... import views

if TYPE_CHECKING:
    from ..app import VmemServer


def handle(ls: VmemServer, params: types.CodeLensParams) -> list[types.CodeLens]:
    options = ls.session.options
    if not options.code_lens or ls.client_supports("text_document", "inlay_hint"):
        return []
    path = ls.path_of(params.text_document.uri)
    positions = ls.positions()
    return [types.CodeLens(positions.range(path, site.name_span), types.Command(views.total_hint(by_target), ""))
            for site, by_target, _ in ls.session.all_budgets(path) if by_target]
