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
    uri = params.text_document.uri
    path = ls.path_of(uri)
    positions = ls.positions()
    shown = [
        (site, by_target, positions.shown_in(uri, path, site.name_span))  # in this cell, of a notebook
        for site, by_target, _ in ls.session.all_budgets(path)
        if by_target
    ]
    return [
        types.CodeLens(where, types.Command(views.total_hint(by_target), ""))
        for site, by_target, where in shown
        if where is not None
    ]
