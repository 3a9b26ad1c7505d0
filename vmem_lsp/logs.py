"""A job's log as `vmem-lsp explain` reads it, in the terms every family shares: a report
found in it (Found), a family's reader of the log a line at a time (LogReader), where a report
is placed among the sources' pallas_calls (Placement, VMEM040 when it could be several), and the
traced calls of the sources' examples that placement may match (TracedCall, Traced).
explain.py drives the reading; each family reads and places its own reports
(tpu/explain.py, gpu/explain.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from . import render

if TYPE_CHECKING:  # the worker's and the locator's types, not imported to explain a log
    from .correlate import SitesOf
    from .results import CapturedCall
    from .source.directives import Example
    from .source.model import KernelSite

Candidate = tuple[str, "KernelSite", str]  # (path, site, the file's text)
MOST_LINES = 2000  # a report longer than this is cut: a runaway never holds the log in memory


@dataclass(frozen=True)
class Found:
    """One report in a log: where it starts (1-based line) and its text, prefixes taken off;
    the traceback frames before it ((file, line), innermost last) where its family reads them;
    the family whose reader found it (Family.name)."""

    line: int
    text: str
    frames: tuple[tuple[str, int], ...] = ()
    family: str = ""


class LogReader(Protocol):
    """A family's reading of a log, a line at a time: memory bounded by the largest report."""

    def see(self, number: int, line: str) -> tuple[list[Found], bool]:
        """The reports that end at this line, and whether the line is this reader's (it starts
        or goes on with one of its reports): a line one reader takes ends the others' reports."""
        ...

    def interrupt(self) -> list[Found]:
        """Another reader took this line: the report open here ends before it."""
        ...

    def finish(self) -> list[Found]:
        """The log ended: the report still open."""
        ...


@dataclass(frozen=True)
class Placement:
    """Where a report goes: one site, or the sites it could be (said, never guessed).
    `spans`, when a traced call placed it: the BlockSpec of each allocation, as check anchors it."""

    sites: tuple  # ((path, KernelSite), ...): one when placed
    why: str
    spans: tuple = ()  # per allocation: (path, Span) or None
    traced: TracedCall | None = None  # the traced call it was matched to, where a trace placed it


@dataclass(frozen=True)
class TracedCall:
    """A pallas_call an example reaches, traced on a chip, and the site it came from."""

    path: str
    site: KernelSite
    call: CapturedCall
    example: str  # "file:line" of the example that reached it
    directive: Example | None = None  # that example, where its span is known


@dataclass(frozen=True)
class Traced:
    """Every call the examples of the sources reach on one chip, or why there are none."""

    calls: tuple[TracedCall, ...]
    note: str | None  # "the examples could not be traced: ...", or None
    sites_of: SitesOf | None = None  # where check's anchors are looked up


@dataclass
class Sources:
    """What --source gives placement: every pallas_call site of the files, and
    the traces of their examples (a Tracer: `on(target)` gives a thunk of them),
    made only when names and shapes do not decide."""

    sites: list[Candidate]
    tracer: Any = None


def sites_at(candidates: list[Candidate], file: str, line: int) -> list[tuple[str, KernelSite]]:
    """The candidates that hold `line` of a file named like `file` (a path of the job's machine)."""
    return [(p, s) for p, s, _ in candidates if p.endswith(file.split("/")[-1]) and s.span.contains_line(line)]


def undecided(found: Found, placement: Placement, log_name: str) -> list:
    """VMEM040 on each site a report could be (or none), saying so instead of guessing."""
    from .diagnostics import Diagnostic

    at = lambda p, s: f"{render.display_path(p)}:{s.name_span.start_line}"
    return [
        Diagnostic(
            p,
            s.name_span,
            "information",
            "VMEM040",
            f"the report in {log_name}, line {found.line} could be this pallas_call or "
            f"{', '.join(at(q, t) for q, t in placement.sites if (q, t) != (p, s))} "
            f"({placement.why}): not placed",
            origin="log",
            facts={"log_line": found.line, "why": placement.why},
        )
        for p, s in placement.sites
    ]
