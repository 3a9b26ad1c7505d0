"""`vmem-lsp explain`: the VMEM reports in a job's log, found, parsed and
said in plain words, with the arithmetic of the way out.

A report is met in the log of a job that ran on a real TPU, between other
lines, each line maybe behind a timestamp, its proto tail cut short. The log
is read a line at a time (memory bounded by the largest report, not the
log); each report is the parser's (report/parse.py), so what `explain` says
of a text is what `check` would.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Iterator

from . import render
from .chips import CHIPS, Chip
from .report.model import Allocation, Report
from .report.parse import parse_report

# Where a report starts: the first line of each form the parser knows.
START = re.compile(r"Ran out of memory in memory space|Scoped allocation with size|CompileTimeScopedVmemOom|"
                   r"Allocation \(size=\d+\) would exceed memory|RESOURCE_EXHAUSTED: XLA:TPU compile")
# Lines a report goes on with (after its prefix is taken off).
CONTINUES = re.compile(r"^(\s*$|\s+\S|Program \w+ requirement|Largest program allocations|\s*\d+\. Size:|"
                       r"\s*(Operator|Shape|Unpadded size|Tag|XLA label|Allocation type):|\s*=+\s*$| \[type\.|"
                       r"Ran out of memory|Scoped allocation|Allocation \(size|E\d{4}:|See https?://)")
PROTO_TAIL = "[type.googleapis.com/"
MOST_LINES = 2000          # a report longer than this is cut: a runaway never holds the log in memory


@dataclass(frozen=True)
class Found:
    """One report in a log: where it starts (1-based line) and its text, prefixes taken off."""
    line: int
    text: str


def _prefix_pattern(prefix: str) -> re.Pattern | None:
    """A log line's prefix as a pattern that matches the same prefix on the
    next lines with other digits (a timestamp, a worker number)."""
    if not prefix.strip():
        return None
    return re.compile(re.sub(r"\d+", r"\\d+", re.escape(prefix)))


def _says_something(lines: list[str]) -> bool:
    """The report so far has its figures: another start line begins the next one."""
    report = parse_report("\n".join(lines))
    return report.form != "unknown" and bool(report.used or report.limit)


def find_reports(lines: Iterable[str]) -> Iterator[Found]:
    """Every report in a stream of log lines, in order."""
    current: list[str] = []
    start = 0
    prefix: re.Pattern | None = None

    def strip(line: str) -> str | None:
        if prefix is None:
            return line
        found = prefix.match(line)
        return line[found.end():] if found else None

    for number, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if current:
            body = strip(line)
            tail = body is not None and PROTO_TAIL in body        # the proto's echo of the report's start
            # A start line goes on a report that says nothing yet (E1001's header line).
            goes_on = body is not None and (not START.search(body) or not _says_something(current))
            if body is not None and (tail or CONTINUES.match(body) and goes_on) and len(current) < MOST_LINES:
                current.append(body)
                continue
            yield Found(start, "\n".join(current).strip("\n"))
            current = []
        hit = START.search(line)
        if hit:
            cut = line.find("RESOURCE_EXHAUSTED") if "RESOURCE_EXHAUSTED" in line[:hit.start() + 1] else hit.start()
            head = line[:cut]
            prefix = _prefix_pattern(head)
            current, start = [line[len(head):]], number
    if current:
        yield Found(start, "\n".join(current).strip("\n"))


# ---- saying it ----------------------------------------------------------------------------------

def describe(allocation: Allocation) -> str:
    """An allocation as what it is: `input 0 window f32[4096,4096] of f32[4096,4096], single buffered`."""
    label = render.allocation_label(allocation)
    whole = f" of {allocation.full_shape}" if allocation.full_shape else ""
    how = render.buffering_suffix(allocation.buffers)
    waste = ""
    if allocation.unpadded_size and allocation.unpadded_size < allocation.size:
        waste = f", {render.size(allocation.size - allocation.unpadded_size)} of it padding"
    return f"{label}{whole}{how}{waste}"


def ways_out(report: Report, chip: Chip | None) -> list[str]:
    """The arithmetic of fitting, what fits alone first: halve a window's
    block, single-buffer a double-buffered window, raise the scoped limit
    where the chip has the room."""
    over = report.exceeded_by or ((report.used or 0) - (report.limit or 0))
    ways = []
    for allocation in report.allocations:
        if allocation.kind not in ("input_window", "output_window") or allocation.window_shape is None:
            continue
        operand = render.allocation_label(allocation).split(" window")[0]
        dims = allocation.window_shape.dims
        if dims and dims[0] > 1:
            ways.append((f"halving {operand}'s block ({dims[0]} → {dims[0] // 2} rows)", allocation.size // 2))
        if allocation.buffers == 2:
            ways.append((f"single-buffering {operand} (pipeline_mode=pl.Buffered(1))", allocation.size // 2))
    def outcome(saves: int) -> str:
        if saves >= over:
            return f"fits with {render.size(saves - over)} to spare"
        return f"not enough alone, {render.size(over - saves)} short"

    said = [f"{what} saves {render.size(saves)}: {outcome(saves)}"
            for what, saves in sorted(ways, key=lambda w: (w[1] < over, w[1] if w[1] >= over else -w[1]))]
    if report.limit_kind == "scoped" and report.used:
        room = [c for c in ([chip] if chip else CHIPS.values()) if c.capacity >= report.used]
        if room:
            said.append(f"raising vmem_limit_bytes to {-(-report.used // (1 << 20))} MiB would do on "
                        f"{', '.join(c.label for c in room)}")
    return said


def verdict(report: Report, chip: Chip | None) -> str:
    label, space = chip.label if chip else None, (report.memory_space or "vmem").upper()
    if report.form == "single_allocation":
        return render.single_allocation(report.limit or 0, label, space, report.limit_text)
    return render.needs(report.used or 0, report.limit or 0, label, scoped=report.limit_kind == "scoped",
                        space=space, over=report.exceeded_by or 0,
                        printed=(report.used_text, report.limit_text, report.exceeded_by_text))


def chip_of(text: str, target: str | None) -> Chip | None:
    """The chip a report is from: --target, else a device kind the text names."""
    if target:
        from .chips import chip
        return chip(target)
    return next((c for c in CHIPS.values() if c.device_kind in text), None)


def explain_text(found: Found, target: str | None = None, source_name: str = "the log") -> str:
    report = parse_report(found.text)
    chip = chip_of(found.text, target)
    head = f"report at {source_name}, line {found.line}"
    if report.form in ("unknown", "block_shape"):
        return f"{head}: not understood; the text, whole:\n{found.text}\n"
    lines = [f"{head}: {verdict(report, chip)}"]
    if report.form == "scoped":
        lines.append("  the compiler gives only the total against the scoped limit (E1001): run `vmem-lsp check` "
                     "on the kernel for the split by BlockSpec")
    if report.allocations:
        lines.append("  allocations:")
        width = max(len(a.size_text or render.size(a.size)) for a in report.allocations)
        for a in report.allocations:
            lines.append(f"    {(a.size_text or render.size(a.size)).rjust(width)}  {describe(a)}")
    ways = ways_out(report, chip)
    if ways:
        lines.append("  ways out:")
        lines += [f"    - {w}" for w in ways]
    return "\n".join(lines) + "\n"


def explain_json(found: Found, target: str | None = None) -> dict:
    import dataclasses
    report = parse_report(found.text)
    chip = chip_of(found.text, target)
    return {"line": found.line, "form": report.form, "chip": chip.name if chip else None,
            "used": report.used, "limit": report.limit, "limit_kind": report.limit_kind,
            "exceeded_by": report.exceeded_by,
            "allocations": [{**dataclasses.asdict(a), "described": describe(a)} for a in report.allocations],
            "ways_out": ways_out(report, chip) if report.form not in ("unknown", "block_shape")
            else [], "text": found.text}


# ---- putting a report on the user's lines (--source) ---------------------------------------------

NAME_IN_OP = re.compile(r"jit\(([\w.<>]+)\)")
NAME_IN_LABEL = re.compile(r"^%?([\w.]+?)(?:\.\d+)? = custom-call")
NAME_IN_TAG = re.compile(r"scoped memory for %?([\w]+?)(?:\.\d+)?$")


def report_names(report: Report) -> set[str]:
    """The names a report gives its kernel: the jitted function of op_name, the
    custom call's label, a scoped allocation's tag."""
    names = set()
    for allocation in report.allocations:
        for pattern, text in ((NAME_IN_LABEL, allocation.label or ""), (NAME_IN_TAG, allocation.tag or "")):
            if found := pattern.search(text):
                names.add(found[1])
    for op_name in {report.op_name, *(a.op_name for a in report.allocations)} - {None}:
        # "jit(train_step)/jit(main)/flash_attention/pallas_call": every function on the path
        for part in op_name.split("/"):
            found = NAME_IN_OP.fullmatch(part)
            names.add(found[1] if found else part)
    return {n for n in names if n not in ("<lambda>", "_lambda_", "pallas_call", "")}


@dataclass(frozen=True)
class Placement:
    """Where a report goes: one site, or the sites it could be (said, never guessed)."""
    sites: tuple            # ((path, KernelSite), ...): one when placed
    why: str


def place(report: Report, candidates: list[tuple[str, object, str]]) -> Placement:
    """The site among `candidates` ((path, KernelSite, file text)) that made the
    report: by its source metadata, else its names (function, kernel), else
    its operands matched to the BlockSpecs (count and literal block shapes)."""
    from .budget import literal_shape
    from .source.calls import kernel_name
    located = [a for a in report.allocations if a.source_file and a.source_line]
    if located:
        a = located[0]
        hits = [(p, s) for p, s, _ in candidates
                if p.endswith(a.source_file.split("/")[-1]) and s.span.contains_line(a.source_line)]
        if len(hits) == 1:
            return Placement(tuple(hits), "its source_file and source_line")
    names = report_names(report)
    windows = [a for a in report.allocations if a.kind in ("input_window", "output_window")]

    def named(site, text) -> bool:
        return bool(names & {(site.function or "").split(".")[-1], kernel_name(text, site.span)})

    def score(site, text) -> int:
        found = 0
        if named(site, text):
            found += 4
        for a in windows:
            specs = site.in_specs if a.kind == "input_window" else site.out_specs
            if a.operand_index is not None and a.operand_index < len(specs):
                found += 1
                if a.window_shape and literal_shape(specs[a.operand_index].block_shape) == a.window_shape.dims:
                    found += 2
            elif a.operand_index is not None:
                return -1       # an operand the site does not have
        # A short report lists every window: the same count of inputs and outputs as the site's specs.
        if windows and len(report.allocations) < 8:
            ins = {a.operand_index for a in windows if a.kind == "input_window"}
            outs = {a.operand_index for a in windows if a.kind == "output_window"}
            found += (len(ins) == len(site.in_specs)) + (len(outs) == len(site.out_specs))
        return found

    def decisive(site, text) -> bool:
        """A name the report gives the kernel, or a window shape written in a BlockSpec: counts
        of operands alone fit too many kernels to place a report on one (single-allocation-v4
        went to an SMEM kernel of compile_errors.py on counts alone)."""
        if named(site, text):
            return True
        return any(a.window_shape and a.operand_index is not None
                   and a.operand_index < len(specs := site.in_specs if a.kind == "input_window" else site.out_specs)
                   and literal_shape(specs[a.operand_index].block_shape) == a.window_shape.dims for a in windows)

    scored = [(score(s, t), p, s) for p, s, t in candidates if decisive(s, t)]
    best = max((sc for sc, _, _ in scored), default=-1)
    if best <= 0:
        return Placement((), "nothing in the report matches a pallas_call of the sources")
    top = tuple((p, s) for sc, p, s in scored if sc == best)
    return Placement(top, "its names and operands" if len(top) == 1 else "as many matches as another")


def placed_diagnostics(found: Found, report: Report, placement: Placement, chip: Chip | None, log_name: str):
    """The diagnostics `check` gives for this report, on the placed site's
    BlockSpecs and pallas_call, marked as read from the log; or, where the
    report could be several sites, a note on each saying so."""
    from .diagnostics import Diagnostic, Related
    where = f"from the report in {log_name}, line {found.line}"
    if len(placement.sites) != 1:
        at = lambda p, s: f"{render.display_path(p)}:{s.name_span.start_line}"
        return [Diagnostic(p, s.name_span, "information", "VMEM040",
                           f"the report in {log_name}, line {found.line} could be this pallas_call or "
                           f"{', '.join(at(q, t) for q, t in placement.sites if (q, t) != (p, s))}: not placed",
                           origin="log") for p, s in placement.sites]
    [(path, site)] = placement.sites
    need = verdict(report, chip)
    out = []
    for a in report.allocations:
        if a.kind in ("input_window", "output_window"):
            specs = site.in_specs if a.kind == "input_window" else site.out_specs
            spec = specs[a.operand_index] if a.operand_index is not None and a.operand_index < len(specs) else None
            span = (spec.block_shape or spec).span if spec is not None else site.name_span
            label = f"{render.allocation_label(a)}"
            wording = render.part(label, a.size, need, buffers=a.buffers, printed=a.size_text, note=where)
            out.append(Diagnostic(path, span, "error", "VMEM001", wording.text(), chip.name if chip else None, "log",
                                  (Related(path, site.name_span, f"pallas_call: {need}"),),
                                  {"log_line": found.line, "size": a.size}))
    out.append(Diagnostic(path, site.name_span, "error", "VMEM002", f"pallas_call: {need} ({where})",
                          chip.name if chip else None, "log", (), {"log_line": found.line, "used": report.used}))
    return out


def source_sites(paths: list[str]) -> list:
    """(path, KernelSite, text) of every pallas_call under `paths` (not in
    .venv, build and the like): the candidates of `place`. Only files that
    mention pallas_call are parsed."""
    from .config import Settings
    from .engine import SourceFiles, python_files
    sources = SourceFiles()
    files = [p for p in python_files(paths, Settings().exclude) if "pallas_call" in (sources.text(p) or "")]
    return [(path, site, sources.text(path)) for path in files for site in sources.sites_of(path).sites]


def placed(found: Found, target: str | None, log_name: str, candidates: list) -> list:
    """The diagnostics of one found report on the candidates' lines (none for a form with no figures)."""
    report = parse_report(found.text)
    if report.form in ("unknown", "block_shape"):
        return []
    return placed_diagnostics(found, report, place(report, candidates), chip_of(found.text, target), log_name)
