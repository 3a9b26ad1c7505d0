"""workspace/executeCommand "vmemLsp.explain": a VMEM report pasted from a
TPU job's log (the selection, the clipboard), explained as `vmem-lsp explain`
does, and put on the workspace's lines as diagnostics marked as read from
that text. Returns {"markdown", "reports", "placed"}; any client can call it
(Neovim: vim.lsp.buf.execute_command{command = "vmemLsp.explain", arguments = {text}})."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..app import VmemServer

EXPLAIN = "vmemLsp.explain"
FROM = "the pasted text"  # the "log" the diagnostics say they come from
ORIGIN = "<vmem-lsp explain>"  # the session's contribution key for them


def handle(ls, text=""):
    """The command's handler: pygls passes the command's arguments positionally
    (no annotations here: pygls converts by them, and resolves them at run time)."""
    return explain(ls, text if isinstance(text, str) else "")


def explain(ls: VmemServer, text: str) -> dict:
    from ...explain import Sources, explain_text, find_reports, placed, source_sites

    found = list(find_reports(text.splitlines(True)))
    root = ls.workspace.root_path
    paths = sorted({*ls.session.documents, *([root] if root else [])})
    candidates = source_sites(paths, trace=False) if found else Sources([])  # tracing would hold the server
    diagnostics = [d for f in found for d in placed(f, None, FROM, candidates)]
    old = ls.session.contributions.get(ORIGIN, {})
    by_path: dict = {}
    for d in diagnostics:
        by_path.setdefault(d.path, []).append(d)
    ls.session.contributions[ORIGIN] = by_path
    ls.publish({*old, *by_path})
    sections = [f"### VMEM report {n}\n\n```\n{explain_text(f, None, FROM)}```" for n, f in enumerate(found, 1)]
    markdown = (
        "\n\n".join(sections)
        or "No VMEM report in the text: paste the compiler's message, from "
        '"Ran out of memory" or "RESOURCE_EXHAUSTED" on.'
    )
    return {"markdown": markdown, "reports": len(found), "placed": len(diagnostics)}
