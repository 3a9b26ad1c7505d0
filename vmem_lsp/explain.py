"""`vmem-lsp explain`: the reports in a job's log, found, parsed and said in
plain words, with the arithmetic of the way out, and with --source placed on the
pallas_calls that made them. Each family reads and words its own reports (Family.log_reader,
Family.explained: libtpu's VMEM reports, a GPU compiler's shared-memory and architecture
errors); this module reads the log once for all of them, a line at a time (memory bounded by
the largest report, not the log), and traces the sources' examples when placement needs it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator

from . import render
from .families import default_targets, families, family_named
from .family import Family
from .logs import Candidate, Found, LogReader, Placement, Sources, Traced, TracedCall

__all__ = ["Found", "Placement", "Sources", "Traced", "TracedCall", "explain_json", "explain_text", "find_reports"]


def readers() -> list[tuple[Family, LogReader]]:
    """A reader per family that reads logs: those of one-line reports first (Family.log_first),
    so that a line one of them takes ends a report another was reading."""
    ordered = sorted(families(), key=lambda f: not f.log_first)
    return [(f, reader) for f in ordered if (reader := f.log_reader()) is not None]


def find_reports(lines: Iterable[str]) -> Iterator[Found]:
    """Every report in a stream of log lines, in order."""
    reading = readers()
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        for _, reader in reading:
            ended, took = reader.see(number, line)
            if took:
                for _, other in reading:
                    if other is not reader:
                        yield from other.interrupt()
                yield from ended
                break
            yield from ended
    for _, reader in reading:
        yield from reader.finish()


def explained(found: Found) -> tuple[Family, object] | None:
    """(family, its parse of the report) of a found report; None when no family reads it."""
    owner = family_named(found.family)
    ordered = [owner] if owner is not None else sorted(families(), key=lambda f: not f.log_first)
    for family in ordered:
        if (report := family.explained(found)) is not None:
            return family, report
    return None


def explain_text(
    found: Found, target: str | None = None, source_name: str = "the log", placement: Placement | None = None
) -> str:
    """The report in words; where --source placed it on one pallas_call (`placement`), its ways
    out name that call's written block dimensions."""
    head = f"report at {source_name}, line {found.line}"
    said = explained(found)
    if said is None:
        return f"{head}: not understood; the text, whole:\n{found.text}\n"
    family, report = said
    site = placement.sites[0][1] if placement is not None and len(placement.sites) == 1 else None
    return family.explain_text(report, found, head, target, site)


def explain_json(found: Found, target: str | None = None) -> dict:
    said = explained(found)
    if said is None:
        return {"line": found.line, "platform": None, "form": "unknown", "text": found.text}
    family, report = said
    return family.explain_json(report, found, target)


def placing(
    found: Found, target: str | None, log_name: str, sources: Sources | list[Candidate]
) -> tuple[list, Placement | None]:
    """The diagnostics of one found report on the sources' lines, and the placement
    they come from (None for a form with no figures)."""
    if not isinstance(sources, Sources):
        sources = Sources(list(sources))
    said = explained(found)
    if said is None:
        return [], None
    family, report = said
    return family.placing(report, found, target, log_name, sources)


def placed(found: Found, target: str | None, log_name: str, sources: Sources | list[Candidate]) -> list:
    """The diagnostics of one found report on the sources' lines (none for a form with no figures)."""
    return placing(found, target, log_name, sources)[0]


# ---- the sources, and their examples traced ---------------------------------------------------


def source_sites(paths: list[str], trace: bool = True) -> Sources:
    """(path, KernelSite, text) of every pallas_call under `paths` (not in
    .venv, build and the like): the candidates of `place`. Only files that
    mention pallas_call are parsed. `trace`: their examples may be traced when
    a report needs it (the editor's command does not: it would hold the server)."""
    from .config import Settings
    from .engine import SourceFiles, python_files

    sources = SourceFiles()
    files = [p for p in python_files(paths, Settings().exclude) if "pallas_call" in (sources.text(p) or "")]
    sites = [
        (path, site, text)
        for path in files
        if (text := sources.text(path)) is not None
        for site in sources.sites_of(path).sites
    ]
    return Sources(sites, Tracer(paths, default_targets()[0]) if trace and paths else None)


def trace_examples(paths: list[str], chip: str) -> Traced:
    """The calls the examples of `paths` (their `# vmem:` directives and pyproject
    examples) reach on `chip`, traced in the worker without compiling: jax, no libtpu.
    Never raises: what went wrong is the note."""
    import dataclasses

    from .config import load_settings
    from .correlate import kernel_site
    from .engine import check

    try:
        settings = dataclasses.replace(
            load_settings(paths[0]), targets=(chip,), compile=False, jobs=1, worker_fallback=False
        )
        outcome = check(paths, settings)
    except Exception as error:  # no jax, a worker that cannot start: place by names and shapes only
        return Traced((), f"the examples could not be traced ({type(error).__name__}: {error})")
    sources = outcome.sources
    if sources is None:
        return Traced((), "the examples could not be traced (no sources were read)")
    calls: list[TracedCall] = []
    failed: list[str] = []
    for example, _, result in outcome.results:
        failed += [f"{render.display_path(example.path)}:{example.line}: {result.error}"] if result.error else []
        for call in result.calls:
            site = kernel_site(call, sources.sites_of)
            if site is not None:
                calls.append(
                    TracedCall(site.path, site, call, f"{render.display_path(example.path)}:{example.line}", example)
                )
    note = None
    if not calls:
        note = (
            "no example of the sources could be traced" + (f" ({failed[0]})" if failed else "")
            if outcome.examples
            else "the sources have no example (# vmem:) to trace"
        )
    return Traced(tuple(calls), note, sources.sites_of)


class Tracer:
    """The traces of the sources' examples, made on first need, once a chip: a log
    whose reports names and written shapes place never starts a worker."""

    def __init__(self, paths: list[str], default_chip: str):
        self.paths, self.default_chip = paths, default_chip
        self.done: dict[str, Traced] = {}

    def on(self, target):
        """A thunk of the trace on the report's target (a Chip, a Gpu: anything named), the
        default chip when the text names none."""
        name = target.name if target else self.default_chip

        def traced() -> Traced:
            if name not in self.done:
                self.done[name] = trace_examples(self.paths, name)
                if self.done[name].note:  # said once a chip: placement goes on by names and shapes
                    print(
                        f"vmem-lsp explain: {self.done[name].note}; reports are placed by their names "
                        f"and written block shapes only",
                        file=sys.stderr,
                    )
            return self.done[name]

        return traced
