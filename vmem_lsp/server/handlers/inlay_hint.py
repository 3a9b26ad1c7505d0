"""inlayHint: bytes and buffers after each BlockSpec, the total on each pallas_call line."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from ... import views
from ...source.text import split_lines

if TYPE_CHECKING:
    from ..app import VmemServer


def handle(ls: VmemServer, params: types.InlayHintParams) -> list[types.InlayHint]:
    if not ls.session.options.inlay_hints:
        return []
    path = ls.path_of(params.text_document.uri)
    doc = ls.session.documents.get(path)
    if doc is None:
        return []
    lines = split_lines(doc.text)
    positions = ls.positions()
    first, last = params.range.start.line + 1, params.range.end.line + 1
    hints = []
    for site, by_target, known in ls.session.all_budgets(path):
        if not by_target or not (first <= site.span.start_line <= last or first <= site.span.end_line <= last):
            continue
        line = site.name_span.start_line
        end_of_line = len(lines[line - 1]) if line <= len(lines) else 0
        hints.append(types.InlayHint(positions.position(path, line, end_of_line), "  " + views.total_hint(by_target),
                                     kind=None, padding_left=True))
        shown = next(iter(by_target.values()))
        for span, text in views.spec_hints(site, known, shown):
            hints.append(types.InlayHint(positions.position(path, span.end_line, span.end_col), text,
                                         kind=types.InlayHintKind.Type, padding_left=True))
    return hints
