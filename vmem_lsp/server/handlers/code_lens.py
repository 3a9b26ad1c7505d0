"""codeLens: on a `# vmem:` line that holds lists, its ranking by the
compiler's cycle estimate (asked for from the lens: rank_sweep); and the
pallas_call totals, for clients that cannot show inlay hints."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from ... import views
from . import rank_sweep

if TYPE_CHECKING:
    from ..app import VmemServer


def handle(ls: VmemServer, params: types.CodeLensParams) -> list[types.CodeLens]:
    options = ls.session.options
    if not options.code_lens:
        return []
    uri = params.text_document.uri
    path = ls.path_of(uri)
    ranked = sweep_lenses(ls, uri, path)
    if ls.client_supports("text_document", "inlay_hint"):
        return ranked
    return ranked + total_lenses(ls, uri, path)


def sweep_lenses(ls: VmemServer, uri: str, path: str) -> list[types.CodeLens]:
    """ "Rank these configs by speed" on each sweep line of a file (not a notebook's
    cells: a sweep runs a file), "ranking..." while it runs, then its fastest per chip."""
    from ...source.notebook import is_notebook
    from ...sweep.spec import sweeps_in

    text = ls.session.text_of(path)  # asked right after didOpen, whose handler may not have run yet
    if text is None or is_notebook(path) or "# vmem:" not in text:
        return []
    lenses = []
    for sweep in sweeps_in(text, path):
        line = sweep.example.line - 1
        where = types.Range(types.Position(line, 0), types.Position(line, 0))
        known = ls.rankings.get((path, sweep.example.text))
        if known is None:
            title = f"Rank these {sweep.size} configs by the compiler's speed estimate"
            command = types.Command(title, rank_sweep.RANK, arguments=[uri, line])
        elif known.running:
            command = types.Command("ranking by the compiler's speed estimate...", "")
        else:
            command = types.Command(known.said, rank_sweep.RANK, arguments=[uri, line])  # again, after an edit
        lenses.append(types.CodeLens(where, command))
    return lenses


def total_lenses(ls: VmemServer, uri: str, path: str) -> list[types.CodeLens]:
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
