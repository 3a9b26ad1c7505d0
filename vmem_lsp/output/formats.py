"""Text, JSON and SARIF 2.1.0 renderings of the same diagnostics."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from .. import __version__
from ..diagnostics import CODES, HELP, Diagnostic
from ..render import display_path

SARIF_LEVEL = {"error": "error", "warning": "warning", "information": "note"}


def text(diagnostics: list[Diagnostic], summary: str) -> str:
    """`path:line:col: error VMEM001 message`, one a line, as compilers print."""
    lines = [f"{display_path(d.path)}:{d.span.start_line}:{d.span.start_col + 1}: "
             f"{d.severity} {d.code} {d.message}" for d in diagnostics]
    lines.append(summary)
    return "\n".join(lines) + "\n"


def as_dict(d: Diagnostic) -> dict:
    return {
        "path": display_path(d.path), "abs_path": d.path,
        "range": dataclasses.asdict(d.span),
        "severity": d.severity, "code": d.code, "message": d.message,
        "target": d.target, "origin": d.origin,
        "related": [{"path": display_path(r.path), "range": dataclasses.asdict(r.span), "message": r.message}
                    for r in d.related],
        "facts": d.facts,
    }


def json_text(diagnostics: list[Diagnostic], summary: str) -> str:
    return json.dumps({"version": __version__, "summary": summary,
                       "diagnostics": [as_dict(d) for d in diagnostics]}, indent=2) + "\n"


def _uri(path: str) -> str:
    relative = display_path(path)
    return relative.replace(os.sep, "/") if not os.path.isabs(relative) else Path(path).as_uri()


def _region(span) -> dict:
    return {"startLine": span.start_line, "startColumn": span.start_col + 1,
            "endLine": span.end_line, "endColumn": max(span.end_col, span.start_col) + 1}


def _location(path, span, message=None) -> dict:
    location = {"physicalLocation": {"artifactLocation": {"uri": _uri(path)}, "region": _region(span)}}
    if message:
        location["message"] = {"text": message}
    return location


def sarif_text(diagnostics: list[Diagnostic], summary: str) -> str:
    rules = [{"id": code, "shortDescription": {"text": text}, **({"helpUri": HELP[code]} if code in HELP else {})}
             for code, text in CODES.items()]
    results = [{
        "ruleId": d.code,
        "level": SARIF_LEVEL[d.severity],
        "message": {"text": d.message},
        "locations": [_location(d.path, d.span)],
        "relatedLocations": [dict(_location(r.path, r.span, r.message), id=i) for i, r in enumerate(d.related)],
        "properties": {"target": d.target, "origin": d.origin, **d.facts},
    } for d in diagnostics]
    log = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "vmem-lsp", "version": __version__, "rules": rules,
                                "informationUri": "https://pypi.org/project/vmem-lsp/"}},
            "originalUriBaseIds": {"SRCROOT": {"uri": Path(os.getcwd()).as_uri() + "/"}},
            "columnKind": "unicodeCodePoints",      # as vmem-lsp counts columns
            "results": results,
            "invocations": [{"executionSuccessful": True, "toolExecutionNotifications": [{"message": {"text": summary}}]}],
        }],
    }
    return json.dumps(log, indent=2) + "\n"


GITHUB_LEVEL = {"error": "error", "warning": "warning", "information": "notice"}


def _github_escape(value: str, property: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return value.replace(":", "%3A").replace(",", "%2C") if property else value


def github_text(diagnostics: list[Diagnostic], summary: str) -> str:
    """GitHub Actions workflow commands: one annotation a diagnostic."""
    lines = []
    for d in diagnostics:
        where = (f"file={_github_escape(display_path(d.path), True)},line={d.span.start_line},"
                 f"col={d.span.start_col + 1},endLine={d.span.end_line},endColumn={d.span.end_col + 1},"
                 f"title={_github_escape(d.code, True)}")
        lines.append(f"::{GITHUB_LEVEL[d.severity]} {where}::{_github_escape(d.message)}")
    lines.append(summary)
    return "\n".join(lines) + "\n"


FORMATS = {"text": text, "json": json_text, "sarif": sarif_text, "github": github_text}


def render(format_name: str, diagnostics: list[Diagnostic], summary: str) -> str:
    return FORMATS[format_name](diagnostics, summary)
