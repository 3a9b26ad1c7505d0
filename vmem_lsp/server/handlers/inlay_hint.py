"""inlayHint: bytes and buffers after each BlockSpec, the total on each pallas_call line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from ... import views
from ...source.model import Span
from ...source.text import split_lines

if TYPE_CHECKING:
    from ..app import VmemServer


def handle(ls: VmemServer, params: types.InlayHintParams) -> list[types.InlayHint]:
    if not ls.session.options.inlay_hints:
        return []
    uri = params.text_document.uri
    path = ls.path_of(uri)
    doc = ls.session.documents.get(path)
    positions = ls.positions()
    first = positions.module_position(uri, path, params.range.start)  # a notebook cell's: in its module
    last = positions.module_position(uri, path, params.range.end)
    if doc is None or first is None or last is None:
        return []
    lines = split_lines(doc.text)
    first_line, last_line = first[0], last[0]
    hints = []
    for site, by_target, known in ls.session.all_budgets(path):
        if not by_target or not (
            first_line <= site.span.start_line <= last_line or first_line <= site.span.end_line <= last_line
        ):
            continue
        line = site.name_span.start_line
        end_of_line = len(lines[line - 1]) if line <= len(lines) else 0
        shown = next(iter(by_target.values()))
        placed = [
            (Span(line, end_of_line, line, end_of_line), "  " + views.total_hint(by_target), None),
            *(
                (Span(s.end_line, s.end_col, s.end_line, s.end_col), text, types.InlayHintKind.Type)
                for s, text in views.spec_hints(site, known, shown)
            ),
        ]
        for span, text, kind in placed:
            if (where := positions.shown_in(uri, path, span)) is not None:
                hints.append(types.InlayHint(where.start, text, kind=kind, padding_left=True))
    return hints
