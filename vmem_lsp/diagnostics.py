"""Diagnostics as plain data: what the CLI prints and the server publishes."""
from __future__ import annotations

from dataclasses import dataclass, field

from .source.model import Span

CODES = {
    "VMEM001": "A window or scratch buffer that takes part in a VMEM overflow",
    "VMEM002": "A pallas_call whose kernel needs more VMEM than the limit",
    "VMEM003": "Compiler-internal VMEM (register spills, internal scratch) of a kernel body",
    "VMEM004": "An example whose kernels do not fit in VMEM",
    "VMEM010": "An example that cannot be checked (does not parse, raises, hangs, crashes the worker)",
    "VMEM011": "A compiler error that is not a VMEM report, shown whole",
    "VMEM012": "No TPU compiler available for a target",
}


@dataclass(frozen=True)
class Related:
    path: str
    span: Span
    message: str


@dataclass(frozen=True)
class Diagnostic:
    path: str
    span: Span
    severity: str                   # "error" | "warning" | "information"
    code: str
    message: str
    target: str | None = None
    origin: str = "compiler"        # "compiler" | "model": who says the figures
    related: tuple[Related, ...] = ()
    facts: dict = field(default_factory=dict, compare=False)   # structured detail for JSON/SARIF

    def sort_key(self):
        return (self.path, self.span.start_line, self.span.start_col, self.code, self.target or "")


def is_suppressed(diagnostic: Diagnostic, line_text: str) -> bool:
    """`# noqa` or `# noqa: VMEM001, VMEM002` on the diagnostic's first line."""
    marker = line_text.find("# noqa")
    if marker < 0:
        return False
    rest = line_text[marker + len("# noqa"):]
    if not rest.lstrip().startswith(":"):
        return True
    codes = {c.strip() for c in rest.lstrip()[1:].replace(",", " ").split()}
    return diagnostic.code in codes
