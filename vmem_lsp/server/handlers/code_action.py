"""codeAction: the fixes found for the examples behind the diagnostics in
range, best first; source.fixAll.vmem, the best verified fix of every
example in the file; and "Add a # vmem: example" on a pallas_call (or the
function around it) that no directive of the file calls yet.

Fixes are ready when the squiggles are: the fix search starts when the
compiler's verdict is published and takes from a second to minutes. A quick-fix
request about an example it is searching is not answered empty at once:
- a client that resolves edits gets, as soon as the model has ranked them, the
  fixes the compiler accepted so far and the model's best candidates, marked as
  estimates and not preferred; resolving one waits for the compiler's word on it;
- any other client waits for the search (up to WAIT seconds, with work-done
  progress), then gets what the compiler accepted, and the candidates still
  being compiled, marked as estimates, if it is not done.
Either waits at most WAIT for a first answer. The preferred fix is always a
compiler-verified one."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from lsprotocol import types

from ...fixes.edits import Fix, in_line_endings, with_line_ends
from ...source.directives import ExampleKey
from ...source.model import Span
from ..convert import Positions, example_data, to_uri

if TYPE_CHECKING:
    from ..app import VmemServer

FIX_ALL = "source.fixAll.vmem"
KINDS = [types.CodeActionKind.QuickFix, FIX_ALL]
WAIT = 8.0  # seconds a quick-fix request waits for a running fix search
RESOLVE_WAIT = 120.0  # seconds resolving a candidate waits for the compiler's word on it


def in_notebook(ls: VmemServer, path: str) -> bool:
    doc = ls.session.documents.get(path)
    return doc is not None and doc.cells is not None


def request_line(ls: VmemServer, path: str, params: types.CodeActionParams) -> int | None:
    """The line a request starts on, of the file or of a notebook's module (None in a markdown cell)."""
    if not in_notebook(ls, path):
        return params.range.start.line + 1
    at = ls.positions().module_position(params.text_document.uri, path, params.range.start)
    return at[0] if at is not None else None


def workspace_edit(ls: VmemServer, fixes: list[Fix], positions: Positions) -> types.WorkspaceEdit | None:
    """The fixes' edits on the URIs that show them (a notebook's on its cells);
    None when one cannot be placed (across two cells, or on a masked magic)."""
    changes: dict = {}
    for fix in fixes:
        for edit in fix.edits:
            notebook = in_notebook(ls, edit.path)
            place = (
                positions.location(edit.path, edit.span, strict=True)
                if notebook
                else (to_uri(edit.path), positions.range(edit.path, edit.span))
            )
            if place is None:
                return None
            if not notebook:  # a cell's lines end in \n; a file's as the file's do
                [edit] = in_line_endings([edit], positions.text(edit.path))
            changes.setdefault(place[0], []).append(types.TextEdit(place[1], edit.new_text))
    return types.WorkspaceEdit(changes=changes)


def wanted(params: types.CodeActionParams, kind: str) -> bool:
    only = params.context.only
    return not only or any(kind == k or kind.startswith(f"{k}.") for k in only)


def resolves_edits(ls: VmemServer) -> bool:
    """The client fills in an action's edit by codeAction/resolve when it is chosen."""
    document = ls.client_capabilities.text_document
    code_action = document.code_action if document is not None else None
    support = code_action.resolve_support if code_action is not None else None
    return support is not None and "edit" in support.properties


def edits_key(fix: Fix) -> list:
    """A fix's edits as JSON, to know it again when an action comes back to resolve."""
    return [
        [e.path, e.span.start_line, e.span.start_col, e.span.end_line, e.span.end_col, e.new_text] for e in fix.edits
    ]


def example_of(data) -> ExampleKey | None:
    """The example named in a diagnostic's or an action's data (convert.example_data)."""
    found = data.get("example") if isinstance(data, dict) else None
    if isinstance(found, dict) and isinstance(found.get("path"), str) and isinstance(found.get("line"), int):
        return ExampleKey(found["path"], found["line"])
    return None


def asked_about(ls: VmemServer, path: str, line: int, params: types.CodeActionParams) -> set[ExampleKey]:
    """The examples a request is about: of its diagnostics, or the directive on
    its first line (`line`, of the file or of a notebook's module)."""
    asked = {key for d in params.context.diagnostics if (key := example_of(d.data)) is not None}
    doc = ls.session.documents.get(path)
    return asked | {e.key for e in (doc.examples if doc else []) if e.line == line}


async def wait_with_progress(ls: VmemServer, ready, timeout: float, token, message: str) -> None:
    """Wait until ready() or `timeout`, shown as work-done progress where the client can show it."""
    if ready():
        return
    if token is None and ls.client_supports("window", "work_done_progress"):
        token = str(uuid.uuid4())
        ls.work_done_progress.create(token)
    if token is not None:
        ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(title="vmem-lsp", message=message))
    try:
        await ls.waiters.until(ready, timeout)
    finally:
        if token is not None:
            ls.work_done_progress.end(token, types.WorkDoneProgressEnd())


async def handle(ls: VmemServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    path = ls.path_of(params.text_document.uri)
    session = ls.session
    resolving = resolves_edits(ls)
    if (line := request_line(ls, path, params)) is None:
        return []
    asked = asked_about(ls, path, line, params) if wanted(params, types.CodeActionKind.QuickFix) else set()
    # The light bulb asks on every cursor move: it takes what there is; a user's request waits.
    if asked and session.searching(path) and params.context.trigger_kind != types.CodeActionTriggerKind.Automatic:
        if resolving:
            ready = lambda: not session.searching(path) or all(session.fixes_for(path).get(e) for e in asked)
        else:
            ready = lambda: not session.searching(path)
        await wait_with_progress(ls, ready, WAIT, params.work_done_token, "verifying fixes with the compiler")
    by_example = session.fixes_for(path)
    positions = ls.positions()
    compiling = session.searching(path)  # its unverified fixes are candidates still being compiled
    actions = []
    for example, fixes in by_example.items():
        if example not in asked:
            continue
        related = [d for d in params.context.diagnostics if example_of(d.data) == example]
        for rank, fix in enumerate(fixes):
            action = types.CodeAction(
                title=fix.title,
                kind=types.CodeActionKind.QuickFix,
                diagnostics=related or None,
                is_preferred=(rank == 0 and fix.verified),
            )
            if compiling and not fix.verified and resolving:
                action.data = {
                    "uri": params.text_document.uri,
                    "version": session.documents[path].version,
                    **example_data(example),
                    "edits": edits_key(fix),
                }
            elif (edit := workspace_edit(ls, [fix], positions)) is not None:
                action.edit = edit
            else:
                continue
            actions.append(action)
    if wanted(params, types.CodeActionKind.QuickFix) and (adding := add_example_action(ls, path, line)):
        actions.append(adding)
    if wanted(params, FIX_ALL):
        best = [next(f for f in fixes if f.verified) for fixes in by_example.values() if any(f.verified for f in fixes)]
        best = [fix for fix in best if workspace_edit(ls, [fix], positions) is not None]
        if best:
            actions.append(
                types.CodeAction(
                    title=f"Apply {len(best)} verified VMEM fix(es)",
                    kind=FIX_ALL,
                    edit=workspace_edit(ls, best, positions),
                )
            )
    return actions


def add_example_action(ls: VmemServer, path: str, line: int) -> types.CodeAction | None:
    """A `# vmem:` template above the function that reaches the pallas_call on
    the requested line (the pallas_call, or the def of a function holding
    one); a snippet with a tab stop per placeholder where the client takes
    snippet edits."""
    from ...source.templates import snippet, template_for, test_files

    doc = ls.session.documents.get(path)
    if doc is None:
        return None
    sites = doc.located.sites
    site = next((s for s in sites if s.span.contains_line(line)), None)
    if site is None:
        site = next(
            (
                s
                for s in sites
                if s.function
                and doc.text.splitlines()[line - 1 : line]
                and f"def {s.function.split('.')[0]}(" in doc.text.splitlines()[line - 1]
            ),
            None,
        )
    if site is None:
        return None
    settings = ls.session.settings(path)
    others = []
    for test in test_files(path, settings.root):
        try:
            with open(test, encoding="utf-8") as f:
                others.append((test, f.read()))
        except (OSError, UnicodeDecodeError):
            continue
    template = template_for(doc.text, path, site.span, others)
    if template is None or f"# vmem: {template.function}(" in doc.text:
        return None
    place = ls.positions().location(path, Span(template.line, 0, template.line, 0), strict=True)
    if place is None:
        return None
    uri, where = place  # a notebook's: the cell that holds the line
    found = f" (shapes from {template.found_in})" if template.found_in else ""
    if template.unfinished and ls.client_supports("workspace", "workspace_edit", "snippet_edit_support"):
        edit = types.WorkspaceEdit(
            document_changes=[
                types.TextDocumentEdit(
                    types.OptionalVersionedTextDocumentIdentifier(uri, ls.version_of(uri, path)),
                    [types.SnippetTextEdit(where, types.StringValue(snippet(template)))],
                )
            ]
        )
    else:
        directive = template.directive if in_notebook(ls, path) else with_line_ends(template.directive, doc.text)
        edit = types.WorkspaceEdit(changes={uri: [types.TextEdit(where, directive)]})
    return types.CodeAction(
        title=f"Add a # vmem: example: {template.call}{found}", kind=types.CodeActionKind.QuickFix, edit=edit
    )


async def resolve(ls: VmemServer, action: types.CodeAction) -> types.CodeAction:
    """A candidate chosen while the compiler checks it: wait for its word, then
    give the edit it verified, or say why there is none."""
    data = action.data if isinstance(action.data, dict) else {}
    if action.edit is not None or "edits" not in data:
        return action
    path, session, example = ls.path_of(data["uri"]), ls.session, example_of(data)

    def found() -> Fix | None:
        return next((f for f in session.fixes_for(path).get(example, []) if edits_key(f) == data["edits"]), None)

    def current() -> bool:
        doc = session.documents.get(path)
        return doc is not None and doc.version == data["version"]

    def decided() -> bool:  # the search drops a candidate the compiler rejects
        fix = found()
        return not current() or not session.searching(path) or fix is None or fix.verified

    await wait_with_progress(ls, decided, RESOLVE_WAIT, None, "verifying the chosen fix with the compiler")
    fix = found()
    edit = workspace_edit(ls, [fix], ls.positions()) if fix is not None else None
    if fix is not None and edit is not None and (fix.verified or not session.searching(path)):
        action.title, action.edit, action.is_preferred = fix.title, edit, fix.verified
        return action
    if not current():
        why = "the file changed since it was offered"
    elif fix is None:
        why = "the compiler did not verify it; the verified fixes are in the quick-fix list"
    elif edit is None:
        why = "its edit falls across two notebook cells or on an IPython magic"
    else:
        why = "the compiler is still checking it; ask again in a moment"
    ls.window_show_message(
        types.ShowMessageParams(types.MessageType.Warning, f'vmem-lsp: no edit for "{action.title}": {why}')
    )
    return action
