"""hover on a pallas_call, a BlockSpec or a body line whose value the kernel holds at its peak: the
kernel's VMEM budget per target, and its body account."""

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
    site, by_target, known = ls.session.site_budgets(path, at[0])
    if site is None:
        return None
    body = views.body_accounts_markdown(known.call, by_target, at[0]) if known is not None else ""
    text = views.hover_markdown(site, by_target) + (f"\n\n{body}" if body else "")
    return types.Hover(types.MarkupContent(types.MarkupKind.Markdown, text))
