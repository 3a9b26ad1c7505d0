"""Our plain data to LSP types, at the edge. Columns are code points; files
with non-ASCII text before a squiggle on the same line may be off by a little
in UTF-16 clients."""
from __future__ import annotations

from lsprotocol import types
from pygls.uris import from_fs_path

from ..diagnostics import Diagnostic
from ..source.model import Span

SEVERITY = {"error": types.DiagnosticSeverity.Error, "warning": types.DiagnosticSeverity.Warning,
            "information": types.DiagnosticSeverity.Information}


def to_range(span: Span) -> types.Range:
    start = types.Position(max(span.start_line - 1, 0), max(span.start_col, 0))
    end = types.Position(max(span.end_line - 1, 0), max(span.end_col, 0))
    if (end.line, end.character) < (start.line, start.character):
        end = start
    return types.Range(start, end)


def to_uri(path: str) -> str:
    return from_fs_path(path) or path


def to_diagnostic(d: Diagnostic) -> types.Diagnostic:
    tier = "compiler" if d.origin == "compiler" else "estimate"
    return types.Diagnostic(
        range=to_range(d.span),
        message=f"{d.message} [compiler]" if tier == "compiler" else d.message,
        severity=SEVERITY[d.severity],
        code=d.code,
        source="vmem-lsp",
        related_information=[types.DiagnosticRelatedInformation(
            types.Location(to_uri(r.path), to_range(r.span)), r.message) for r in d.related] or None,
        data={"target": d.target, "tier": tier, **{k: v for k, v in d.facts.items() if _plain(v)}},
    )


def _plain(value) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))
