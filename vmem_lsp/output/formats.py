"""Text, JSON, SARIF 2.1.0 and GitHub renderings of the same diagnostics.

Positions inside vmem-lsp are lines of the text it checked; for a notebook
that is the module its code cells make. Here, at the edge, a notebook's
position becomes its cell and the line in that cell (text, JSON, SARIF's
`cell` property) or the place in the .ipynb file itself (SARIF regions,
GitHub annotations), as ruff gives them."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path

from .. import __version__
from ..diagnostics import CODES, HELP, Diagnostic, examples_of
from ..render import display_path
from ..source.model import Span
from ..source.notebook import Notebook

NotebookOf = Callable[[str], "Notebook | None"]

SARIF_LEVEL = {"error": "error", "warning": "warning", "information": "note"}


def no_notebooks(path: str) -> None:
    return None


def in_cell(notebook: Notebook | None, span: Span) -> tuple[int, Span] | None:
    """(cell number, 1-based among all cells, as a person counts them; the span
    within that cell) of a module span of a notebook; None for other files."""
    start = notebook.cell_position(span.start_line, span.start_col) if notebook is not None else None
    if notebook is None or start is None:
        return None
    end = notebook.cell_position(span.end_line, span.end_col)
    end_line, end_col = (end.line, end.col) if end and end.cell == start.cell else (start.line, start.col)
    return start.cell + 1, Span(start.line, start.col, end_line, end_col)


def in_file(notebook: Notebook | None, span: Span) -> Span:
    """A module span of a notebook as a span of the .ipynb file's own text."""
    if notebook is None:
        return span
    return Span(
        *notebook.file_position(span.start_line, span.start_col), *notebook.file_position(span.end_line, span.end_col)
    )


def where(path: str, span: Span, notebook_of: NotebookOf) -> str:
    """`path:line:col`, or ruff's `path:cell N:line:col` in a notebook."""
    placed = in_cell(notebook_of(path), span)
    cell, span = placed if placed else (None, span)
    return f"{display_path(path)}:{f'cell {cell}:' if cell else ''}{span.start_line}:{span.start_col + 1}"


def text(diagnostics: list[Diagnostic], summary: str, notebook_of: NotebookOf = no_notebooks) -> str:
    """`path:line:col: error VMEM001 message`, one a line, as compilers print."""
    lines = [f"{where(d.path, d.span, notebook_of)}: {d.severity} {d.code} {d.message}" for d in diagnostics]
    lines.append(summary)
    return "\n".join(lines) + "\n"


def _place(path: str, span: Span, notebook_of: NotebookOf) -> dict:
    placed = in_cell(notebook_of(path), span)
    if placed is None:
        return {"range": dataclasses.asdict(span)}
    return {"cell": placed[0], "range": dataclasses.asdict(placed[1])}


def as_dict(d: Diagnostic, notebook_of: NotebookOf = no_notebooks) -> dict:
    return {
        "path": display_path(d.path),
        "abs_path": d.path,
        **_place(d.path, d.span, notebook_of),
        "severity": d.severity,
        "code": d.code,
        "message": d.message,
        "target": d.target,
        "origin": d.origin,
        "related": [
            {"path": display_path(r.path), **_place(r.path, r.span, notebook_of), "message": r.message}
            for r in d.related
        ],
        "facts": d.facts,
    }


def json_text(
    diagnostics: list[Diagnostic], summary: str, notebook_of: NotebookOf = no_notebooks, extra: dict | None = None
) -> str:
    """`extra`: keys after the diagnostics (a shard's "shard")."""
    return (
        json.dumps(
            {
                "version": __version__,
                "summary": summary,
                "diagnostics": [as_dict(d, notebook_of) for d in diagnostics],
                **(extra or {}),
            },
            indent=2,
        )
        + "\n"
    )


def tally(diagnostics: list[Diagnostic]) -> str:
    """ "2 errors, 1 warning": a summary's start."""
    errors = sum(d.severity == "error" for d in diagnostics)
    warnings = sum(d.severity == "warning" for d in diagnostics)
    return f"{errors} error{'s' * (errors != 1)}" + (f", {warnings} warning{'s' * (warnings != 1)}" if warnings else "")


FIT_CODE = "VMEM007"


def fit_tally(diagnostics: list[Diagnostic]) -> str:
    """ "; 1 kernel fits on every chip, 1 on some only (the closest at 81% of its limit:
    add_one_kernel on TPU v6e)": a summary's word on what fits, so a run with no findings still
    says what it checked. A kernel fits on some chips only when it has an error elsewhere."""
    fitting = [d for d in diagnostics if d.code == FIT_CODE and d.subject is not None]
    if not fitting:
        return ""
    failing = {(d.subject.example, d.subject.call) for d in diagnostics if d.severity == "error" and d.subject}
    partly = sum((d.subject.example, d.subject.call) in failing for d in fitting if d.subject)
    shares = [
        (facts["used"] / facts["limit"], facts.get("kernel", "?"), facts.get("chip", "?"))
        for d in fitting
        for facts in d.facts.get("targets", {d.target: d.facts}).values()
        if facts.get("limit")
    ]
    count = sum(examples_of(d) for d in fitting)  # two examples alike are one VMEM007, two fits
    # Beside "11 errors", "2 kernels fit" read as a contradiction where one of them fits only some
    # chips: those are counted apart.
    everywhere = count - partly
    kernels = lambda n: f"{n} kernel{'s' * (n != 1)} fit{'s' * (n == 1)}"
    if not partly:
        said = f"; {kernels(count)}"
    elif not everywhere:
        said = f"; {kernels(partly)} on some chips only"
    else:
        said = f"; {kernels(everywhere)} on every chip, {partly} on some only"
    if shares:
        share, kernel, chip = max(shares)
        said += f" (the closest at {share:.0%} of its limit: {kernel} on {chip})"
    return said


def _uri(path: str) -> str:
    relative = display_path(path)
    return relative.replace(os.sep, "/") if not os.path.isabs(relative) else Path(path).as_uri()


def _region(span) -> dict:
    return {
        "startLine": span.start_line,
        "startColumn": span.start_col + 1,
        "endLine": span.end_line,
        "endColumn": max(span.end_col, span.start_col) + 1,
    }


def _location(path, span, notebook_of: NotebookOf, message=None) -> dict:
    notebook = notebook_of(path)
    location: dict[str, object] = {
        "physicalLocation": {"artifactLocation": {"uri": _uri(path)}, "region": _region(in_file(notebook, span))}
    }
    if (placed := in_cell(notebook, span)) is not None:
        location["properties"] = {"cell": placed[0], "cellRegion": _region(placed[1])}
    if message:
        location["message"] = {"text": message}
    return location


def sarif_text(diagnostics: list[Diagnostic], summary: str, notebook_of: NotebookOf = no_notebooks) -> str:
    rules = [
        {"id": code, "shortDescription": {"text": text}, **({"helpUri": HELP[code]} if code in HELP else {})}
        for code, text in CODES.items()
    ]
    results = [
        {
            "ruleId": d.code,
            "level": SARIF_LEVEL[d.severity],
            "message": {"text": d.message},
            "locations": [_location(d.path, d.span, notebook_of)],
            "relatedLocations": [
                dict(_location(r.path, r.span, notebook_of, r.message), id=i) for i, r in enumerate(d.related)
            ],
            "properties": {
                "target": d.target,
                "origin": d.origin,
                **d.facts,
                **({"cell": placed[0]} if (placed := in_cell(notebook_of(d.path), d.span)) else {}),
            },
        }
        for d in diagnostics
    ]
    log = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "vmem-lsp",
                        "version": __version__,
                        "rules": rules,
                        "informationUri": "https://pypi.org/project/vmem-lsp/",
                    }
                },
                "originalUriBaseIds": {"SRCROOT": {"uri": Path(os.getcwd()).as_uri() + "/"}},
                "columnKind": "unicodeCodePoints",  # as vmem-lsp counts columns
                "results": results,
                "invocations": [
                    {"executionSuccessful": True, "toolExecutionNotifications": [{"message": {"text": summary}}]}
                ],
            }
        ],
    }
    return json.dumps(log, indent=2) + "\n"


GITHUB_LEVEL = {"error": "error", "warning": "warning", "information": "notice"}


def _github_escape(value: str, property: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return value.replace(":", "%3A").replace(",", "%2C") if property else value


def github_text(diagnostics: list[Diagnostic], summary: str, notebook_of: NotebookOf = no_notebooks) -> str:
    """GitHub Actions workflow commands: one annotation a diagnostic, on the
    file's own lines (a notebook's JSON lines)."""
    lines = []
    for d in diagnostics:
        span = in_file(notebook_of(d.path), d.span)
        where = (
            f"file={_github_escape(display_path(d.path), True)},line={span.start_line},"
            f"col={span.start_col + 1},endLine={span.end_line},endColumn={span.end_col + 1},"
            f"title={_github_escape(d.code, True)}"
        )
        lines.append(f"::{GITHUB_LEVEL[d.severity]} {where}::{_github_escape(d.message)}")
    lines.append(summary)
    return "\n".join(lines) + "\n"


FORMATS = {"text": text, "json": json_text, "sarif": sarif_text, "github": github_text}


def render(
    format_name: str,
    diagnostics: list[Diagnostic],
    summary: str,
    notebook_of: NotebookOf = no_notebooks,
    show_fits: bool = False,
) -> str:
    """`notebook_of(path)` gives the notebook a diagnostic's path names, if it is one.
    What fits (VMEM007) is always in JSON, elsewhere with `show_fits`: quiet when all is well."""
    if format_name != "json" and not show_fits:
        diagnostics = [d for d in diagnostics if d.code != FIT_CODE]
    return FORMATS[format_name](diagnostics, summary, notebook_of)
