"""hover on a pallas_call or BlockSpec: the kernel's VMEM budget per target."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from ... import views

if TYPE_CHECKING:
    from ..app import VmemServer


def handle(ls: VmemServer, params: types.HoverParams) -> types.Hover | None:
    path = ls.path_of(params.text_document.uri)
    site, by_target, _ = ls.session.site_budgets(path, params.position.line + 1)
    if site is None:
        return None
    return types.Hover(types.MarkupContent(types.MarkupKind.Markdown, views.hover_markdown(site, by_target)))
