"""hover on a pallas_call or BlockSpec: the kernel's VMEM budget per target."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from ... import views

if TYPE_CHECKING:
    from ..app import VmemServer


def handle(ls: VmemServer, params: types.HoverParams) -> types.Hover | None:
    uri = params.text_document.uri
    path = ls.path_of(uri)
    at = ls.positions().module_position(uri, path, params.position)  # a notebook cell's: in its module
    if at is None:
        return None
    site, by_target, _ = ls.session.site_budgets(path, at[0])
    if site is None:
        return None
    return types.Hover(types.MarkupContent(types.MarkupKind.Markdown, views.hover_markdown(site, by_target)))
