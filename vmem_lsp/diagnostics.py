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
        """A total order: diagnostics at one place with one code (a BlockSpec
        shared by several operands) otherwise kept the worker's order, which
        varied from run to run."""
        return (self.path, self.span.start_line, self.span.start_col, self.code, self.target or "", self.message)


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


NEEDS = ("kernel needs", "one allocation would exceed")


def _split(d: Diagnostic) -> tuple[str, str, str] | None:
    """(what, separator, what the chip says) of a message that reports a
    chip's budget: what comes before "kernel needs ..." is the same on every chip."""
    starts = [i for i in (d.message.find(f"{sep}{need}") for sep in ("; ", ": ") for need in NEEDS) if i > 0]
    if not starts:
        return None
    at = min(starts)
    return d.message[:at], d.message[at:at + 2], d.message[at + 2:]


def merge_targets(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """One diagnostic per place, code and allocation, listing what each chip
    that fails says, instead of one a chip."""
    groups: dict = {}
    for d in diagnostics:
        parts = _split(d) if d.target else None
        key = (d.path, d.span, d.code, d.severity, parts[0] if parts else id(d))
        groups.setdefault(key, []).append((d, parts))
    merged = []
    for members in groups.values():
        if len(members) == 1:
            merged.append(members[0][0])
            continue
        members.sort(key=lambda m: m[0].target)
        first, (subject, separator, _) = members[0]
        ds = [d for d, _ in members]
        origins = {d.origin for d in ds}
        related = tuple(dict.fromkeys(r for d in ds for r in d.related))
        merged.append(Diagnostic(
            first.path, first.span, first.severity, first.code,
            subject + separator + "; ".join(p[2] for _, p in members),
            ",".join(d.target for d in ds), origins.pop() if len(origins) == 1 else "mixed", related,
            {"targets": {d.target: d.facts for d in ds}}))
    return sorted(merged, key=Diagnostic.sort_key)
