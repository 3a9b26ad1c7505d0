"""codeAction: the fixes found for the examples behind the diagnostics in
range, best first; and source.fixAll.vmem, the best verified fix of every
example in the file."""
from __future__ import annotations

from lsprotocol import types

from ...fixes.edits import Fix
from ..convert import Positions, to_uri

FIX_ALL = "source.fixAll.vmem"
KINDS = [types.CodeActionKind.QuickFix, FIX_ALL]


def workspace_edit(fixes: list[Fix], positions: Positions) -> types.WorkspaceEdit:
    changes: dict = {}
    for fix in fixes:
        for edit in fix.edits:
            changes.setdefault(to_uri(edit.path), []).append(
                types.TextEdit(positions.range(edit.path, edit.span), edit.new_text))
    return types.WorkspaceEdit(changes=changes)


def wanted(params: types.CodeActionParams, kind: str) -> bool:
    only = params.context.only
    return not only or any(kind == k or kind.startswith(f"{k}.") for k in only)


def handle(ls, params: types.CodeActionParams) -> list[types.CodeAction]:
    path = ls.path_of(params.text_document.uri)
    by_example = ls.session.fixes_for(path)
    positions = ls.positions()
    actions = []
    if wanted(params, types.CodeActionKind.QuickFix):
        first = params.range.start.line + 1
        for example, fixes in by_example.items():
            related = [d for d in params.context.diagnostics if d.data and d.data.get("example") == example]
            on_directive = example.startswith(f"{path}:") and int(example.rsplit(":", 1)[1]) == first
            if not related and not on_directive:
                continue
            for rank, fix in enumerate(fixes):
                actions.append(types.CodeAction(
                    title=fix.title, kind=types.CodeActionKind.QuickFix, diagnostics=related or None,
                    edit=workspace_edit([fix], positions), is_preferred=(rank == 0 and fix.verified)))
    if wanted(params, FIX_ALL):
        best = [next(f for f in fixes if f.verified) for fixes in by_example.values()
                if any(f.verified for f in fixes)]
        if best:
            actions.append(types.CodeAction(title=f"Apply {len(best)} verified VMEM fix(es)", kind=FIX_ALL,
                                            edit=workspace_edit(best, positions)))
    return actions
