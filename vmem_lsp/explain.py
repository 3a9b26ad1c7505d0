"""`vmem-lsp explain`: the VMEM reports in a job's log, found, parsed and
said in plain words, with the arithmetic of the way out; a GPU job's compile
errors too (explain_gpu.py: shared memory, ops and dtypes an architecture lacks).

A report is met in the log of a job that ran on a real TPU, between other
lines, each line maybe behind a timestamp, its proto tail cut short; or in a
traceback, its first line behind the exception's name (and a logger's record),
the others bare. The log
is read a line at a time (memory bounded by the largest report, not the
log); each report is the parser's (report/parse.py), so what `explain` says
of a text is what `check` would.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import render
from .gpu import explain as explain_gpu
from .tpu.chips import CHIPS, Chip
from .tpu.parse import PROTO_TAIL, parse_report
from .tpu.report import Allocation, Report

if TYPE_CHECKING:  # the worker's and the locator's types, not imported to explain a log
    from .correlate import SitesOf
    from .gpu.report import GpuReport
    from .gpu.targets import Gpu
    from .results import CapturedCall
    from .source.model import KernelSite, Span

Candidate = tuple[str, "KernelSite", str]  # (path, site, the file's text)

# Where a report starts: the first line of each form the parser knows.
START = re.compile(
    r"Ran out of memory in memory space|Scoped allocation with size|CompileTimeScopedVmemOom|"
    r"Allocation \(size=\d+\) would exceed memory|RESOURCE_EXHAUSTED: XLA:TPU compile"
)
# Lines a report goes on with (after its prefix is taken off).
CONTINUES = re.compile(
    r"^(\s*$|\s+\S|Program \w+ requirement|Largest program allocations|\s*\d+\. Size:|"
    r"\s*(Operator|Shape|Unpadded size|Tag|XLA label|Allocation type):|\s*=+\s*$| \[type\.|"
    r"Ran out of memory|Scoped allocation|Allocation \(size|E\d{4}:|See https?://)"
)
# The name Python prints before an uncaught exception's text: jax.errors.JaxRuntimeError,
# jaxlib.xla_extension.XlaRuntimeError. Only the report's first line carries it.
EXCEPTION_NAME = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): $")
MOST_LINES = 2000  # a report longer than this is cut: a runaway never holds the log in memory


@dataclass(frozen=True)
class Found:
    """One report in a log: where it starts (1-based line) and its text, prefixes taken off;
    a GPU report's traceback frames before it ((file, line), innermost last)."""

    line: int
    text: str
    frames: tuple[tuple[str, int], ...] = ()


def _prefix_pattern(prefix: str) -> re.Pattern | None:
    """A log line's prefix as a pattern that matches the same prefix on the
    next lines with other digits (a timestamp, a worker number)."""
    if not prefix.strip():
        return None
    return re.compile(re.sub(r"\d+", r"\\d+", re.escape(prefix)))


def _line_prefix(head: str, second: str) -> re.Pattern | None:
    """The prefix every line of a report carries, judged by its second line: the whole head
    of its first line (a timestamp, a worker), or that head without the exception's name;
    None when the second line carries neither (an exception's name or a logger's record
    prefixes the first line only, the traceback's lines follow bare)."""
    for candidate in (head, EXCEPTION_NAME.sub("", head)):
        pattern = _prefix_pattern(candidate)
        if pattern is not None and pattern.match(second):
            return pattern
    return None


def _start(line: str) -> int | None:
    """Where a report begins in `line` (its RESOURCE_EXHAUSTED where one leads it), or None;
    never inside the proto tail, which echoes the report's first words."""
    hit = START.search(line)
    if hit is None or PROTO_TAIL.search(line, 0, hit.start()):
        return None
    status = line.find("RESOURCE_EXHAUSTED", 0, hit.start() + 1)
    return status if status >= 0 else hit.start()


def _says_something(lines: list[str]) -> bool:
    """The report so far has its figures: another start line begins the next one."""
    report = parse_report("\n".join(lines))
    return report.form != "unknown" and bool(report.used or report.limit)


def _goes_on(report: list[str], line: str) -> bool:
    """`line` (its prefix taken off) is more of `report`: its proto tail, a line of a report's
    shape, or a start line while the report says nothing yet (E1001's header line)."""
    if PROTO_TAIL.search(line):
        return True
    return bool(CONTINUES.match(line)) and (_start(line) is None or not _says_something(report))


def find_reports(lines: Iterable[str]) -> Iterator[Found]:
    """Every report in a stream of log lines, in order."""
    current: list[str] = []
    start, head = 0, ""
    prefix: re.Pattern | None = None
    traceback = explain_gpu.Traceback()

    def strip(line: str) -> str | None:
        if prefix is None:
            return line
        found = prefix.match(line)
        return line[found.end() :] if found else None

    for number, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        gpu = traceback.see(number, line)  # a GPU report is one line: (its text, the frames before it)
        if current:
            if len(current) == 1:
                prefix = _line_prefix(head, line)
            body = strip(line)
            if gpu is None and body is not None and len(current) < MOST_LINES and _goes_on(current, body):
                current.append(body)
                continue
            yield Found(start, "\n".join(current).strip("\n"))
            current = []
        if gpu is not None:
            yield Found(number, *gpu)
            continue
        cut = _start(line)
        if cut is not None:
            head = line[:cut]
            current, start = [line[cut:]], number
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
    if report.form == "single_allocation" and report.allocations:  # no total: the one allocation named
        over = report.allocations[0].size - (report.limit or 0)
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

    said = [
        f"{what} saves {render.size(saves)}: {outcome(saves)}"
        for what, saves in sorted(ways, key=lambda w: (w[1] < over, w[1] if w[1] >= over else -w[1]))
    ]
    if report.limit_kind == "scoped" and report.used:
        room = [c for c in ([chip] if chip else CHIPS.values()) if c.capacity >= report.used]
        if room:
            said.append(
                f"raising vmem_limit_bytes to {-(-report.used // (1 << 20))} MiB would do on "
                f"{', '.join(c.label for c in room)}"
            )
    return said


def verdict(report: Report, chip: Chip | None) -> str:
    label, space = chip.label if chip else None, (report.memory_space or "vmem").upper()
    if report.form == "single_allocation":
        return render.single_allocation(report.limit or 0, label, space, report.limit_text)
    return render.needs(
        report.used or 0,
        report.limit or 0,
        label,
        scoped=report.limit_kind == "scoped",
        space=space,
        over=report.exceeded_by or 0,
        printed=(report.used_text, report.limit_text, report.exceeded_by_text),
    )


def chip_of(text: str, target: str | None) -> Chip | None:
    """The chip a report is from: --target, else a device kind the text names."""
    if target and explain_gpu.target_gpu(target):
        return None
    if target:
        from .tpu.chips import chip

        return chip(target)
    return next((c for c in CHIPS.values() if c.device_kind in text), None)


def explain_text(found: Found, target: str | None = None, source_name: str = "the log") -> str:
    head = f"report at {source_name}, line {found.line}"
    if (gpu := explain_gpu.parsed(found.text)) is not None:
        return explain_gpu.explain_text(gpu, head, target, found.frames)
    report = parse_report(found.text)
    chip = chip_of(found.text, target)
    if report.form in ("unknown", "block_shape"):
        return f"{head}: not understood; the text, whole:\n{found.text}\n"
    lines = [f"{head}: {verdict(report, chip)}"]
    if report.form == "scoped":
        lines.append(
            "  the compiler gives only the total against the scoped limit (E1001): run `vmem-lsp check` "
            "on the kernel for the split by BlockSpec"
        )
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

    if (gpu := explain_gpu.parsed(found.text)) is not None:
        return explain_gpu.explain_json(gpu, found.line, target, found.frames)
    report = parse_report(found.text)
    chip = chip_of(found.text, target)
    return {
        "line": found.line,
        "platform": "tpu",
        "form": report.form,
        "chip": chip.name if chip else None,
        "used": report.used,
        "limit": report.limit,
        "limit_kind": report.limit_kind,
        "exceeded_by": report.exceeded_by,
        "allocations": [{**dataclasses.asdict(a), "described": describe(a)} for a in report.allocations],
        "ways_out": ways_out(report, chip) if report.form not in ("unknown", "block_shape") else [],
        "text": found.text,
    }


# ---- putting a report on the user's lines (--source) ---------------------------------------------

NAME_IN_OP = re.compile(r"jit\(([\w.<>]+)\)")
NAME_IN_LABEL = re.compile(r"^%?([\w.]+?)(?:\.\d+)?(?: = custom-call|$)")  # the second: "would exceed"'s
NAME_IN_TAG = re.compile(r"scoped memory for %?([\w]+?)(?:\.\d+)?$")


def report_names(report: Report) -> set[str]:
    """The names a report gives its kernel: the jitted function of op_name, the
    custom call's label, a scoped allocation's tag."""
    names = set()
    for allocation in report.allocations:
        for pattern, text in ((NAME_IN_LABEL, allocation.label or ""), (NAME_IN_TAG, allocation.tag or "")):
            if found := pattern.search(text):
                names.add(found[1])
    for op_name in {n for n in (report.op_name, *(a.op_name for a in report.allocations)) if n is not None}:
        # "jit(train_step)/jit(main)/flash_attention/pallas_call": every function on the path
        for part in op_name.split("/"):
            found = NAME_IN_OP.fullmatch(part)
            names.add(found[1] if found else part)
    return {n for n in names if n not in ("<lambda>", "_lambda_", "pallas_call", "")}


@dataclass(frozen=True)
class Placement:
    """Where a report goes: one site, or the sites it could be (said, never guessed).
    `spans`, when a traced call placed it: the BlockSpec of each allocation, as check anchors it."""

    sites: tuple  # ((path, KernelSite), ...): one when placed
    why: str
    spans: tuple = ()  # per allocation: (path, Span) or None


def place(report: Report, candidates: list[Candidate], traced=None) -> Placement:
    """The site among `candidates` ((path, KernelSite, file text)) that made the
    report: by its source metadata, or the one site it names; else, where the
    examples can be traced (`traced()`: a Traced), the one site whose traced
    call fits every shape the report gives (its names choosing among sites
    that fit alike); else its names and operands matched to the BlockSpecs
    (count and literal block shapes). Literal shapes that match one site do not
    rule out a site whose shapes are not written: only a trace does that."""
    by_names = place_by_names(report, candidates)
    names = report_names(report)
    alone = [c for c in candidates if is_named(names, c[1], c[2])]
    decided = by_names.why == BY_SOURCE or len(alone) == 1 and by_names.sites == ((alone[0][0], alone[0][1]),)
    if decided or traced is None:
        return by_names
    trace = traced()
    named = {(p, s.span) for p, s, _ in alone}
    by_trace = place_by_trace(report, {(p, s.span) for p, s, _ in candidates}, trace, named)
    if by_trace is not None:
        return by_trace
    said = trace.note or "no traced call of the examples has its shapes"
    return Placement(by_names.sites, f"{by_names.why}; {said}")


BY_SOURCE = "its source_file and source_line"


def is_named(names: set[str], site: KernelSite, text: str) -> bool:
    """The report names this site's function or its kernel."""
    from .source.calls import kernel_name

    return bool(names & {(site.function or "").split(".")[-1], kernel_name(text, site.span)})


def sites_at(candidates: list[Candidate], file: str, line: int) -> list[tuple[str, KernelSite]]:
    """The candidates that hold `line` of a file named like `file` (a path of the job's machine)."""
    return [(p, s) for p, s, _ in candidates if p.endswith(file.split("/")[-1]) and s.span.contains_line(line)]


def place_by_names(report: Report, candidates: list[Candidate]) -> Placement:
    """By source metadata, else names and literal block shapes: what the report and the text alone tell."""
    from .budget import literal_shape

    located = [(file, line) for a in report.allocations if (file := a.source_file) and (line := a.source_line)]
    if located:
        hits = sites_at(candidates, *located[0])
        if len(hits) == 1:
            return Placement(tuple(hits), BY_SOURCE)
    names = report_names(report)
    windows = [a for a in report.allocations if a.kind in ("input_window", "output_window")]

    def named(site, text) -> bool:
        return is_named(names, site, text)

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
                return -1  # an operand the site does not have
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
        return any(
            a.window_shape
            and a.operand_index is not None
            and a.operand_index < len(specs := site.in_specs if a.kind == "input_window" else site.out_specs)
            and literal_shape(specs[a.operand_index].block_shape) == a.window_shape.dims
            for a in windows
        )

    scored = [(score(s, t), p, s) for p, s, t in candidates if decisive(s, t)]
    best = max((sc for sc, _, _ in scored), default=-1)
    if best <= 0:
        return Placement((), "nothing in the report names or shapes a pallas_call of the sources")
    top = tuple((p, s) for sc, p, s in scored if sc == best)
    return Placement(top, "its names and operands" if len(top) == 1 else "as many matches as another")


# ---- placing by the calls the examples reach, traced -------------------------------------------

OPERAND_SHAPES = re.compile(r"operand_layout_constraints=\{((?:[^{}]|\{[^{}]*\})*)\}")
RESULT_SHAPES = re.compile(r"= (.*?) custom-call\(")


@dataclass(frozen=True)
class TracedCall:
    """A pallas_call an example reaches, traced on a chip, and the site it came from."""

    path: str
    site: KernelSite
    call: CapturedCall
    example: str  # "file:line" of the example that reached it


@dataclass(frozen=True)
class Traced:
    """Every call the examples of the sources reach on one chip, or why there are none."""

    calls: tuple[TracedCall, ...]
    note: str | None  # "the examples could not be traced: ...", or None
    sites_of: SitesOf | None = None  # where check's anchors are looked up


def typed_shapes(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """Every dtype[dims] of a piece of HLO text, layouts skipped."""
    from .tpu.parse import SHAPE_TEXT

    return [(d, tuple(int(x) for x in dims.split(",") if x)) for d, dims in SHAPE_TEXT.findall(text)]


def custom_call_shapes(text: str) -> tuple[list | None, list | None]:
    """(operand shapes, result shapes) of the custom call a report names, where it prints them."""
    operands = OPERAND_SHAPES.search(text)
    results = RESULT_SHAPES.search(text)
    return (typed_shapes(operands[1]) if operands else None, typed_shapes(results[1]) or None if results else None)


def window_of(block, full) -> tuple:
    """The window the compiler prints for a block: the whole array without one, and
    never wider than the array (paged attention: block (1, 8, 128) of f32[1,8,1] is f32[1,8,1])."""
    if block is None:
        return tuple(full)
    if len(block) != len(full):
        return tuple(block)
    return tuple(b if b is None else min(b, f) for b, f in zip(block, full))


def squeezed(dims) -> tuple:
    """A block's dims without the 1s and Nones that a squeezed dimension leaves."""
    return tuple(d for d in dims if d not in (1, None))


def contradiction(report: Report, call) -> tuple[bool, int]:
    """(whether the report contradicts this traced call, how many of its facts agree):
    the custom call's operand and result shapes, each window's full and block shape
    and dtype by operand role and number, each scratch, scoped and SMEM buffer's shape or size."""
    if not operands_fit(report, call):
        return True, 0
    verdicts = [allocation_fits(a, call) for a in report.allocations]
    operands, results = custom_call_shapes(report.text)
    agree = len(operands or ()) + len(results or ()) + sum(v is True for v in verdicts)
    return False in verdicts, agree


def operands_fit(report: Report, call) -> bool:
    """The custom call's printed operand and result shapes are the traced call's. Scalars
    before its own operands are a dynamic grid's bounds (gmm: s32[] first), which the
    compiler's "operator input N" does not count."""
    ins = sorted((o for o in call.operands if o.role in ("in", "prefetch")), key=lambda o: o.operand)
    outs = sorted((o for o in call.operands if o.role == "out"), key=lambda o: o.index)
    operands, results = custom_call_shapes(report.text)
    if results is not None and results != [(o.dtype, tuple(o.full_shape)) for o in outs]:
        return False
    if operands is None:
        return True
    extra = len(operands) - len(ins)
    own = [(o.dtype, tuple(o.full_shape)) for o in ins]
    return extra >= 0 and operands[extra:] == own and not any(dims for _, dims in operands[:extra])


def allocation_fits(a: Allocation, call) -> bool | None:
    """Whether one allocation of the report is one of this call's buffers; None: it says nothing."""
    from .correlate import SCOPED_TAG, operand_for, scoped_allocations

    if a.kind in ("input_window", "output_window") and a.operand_index is not None:
        op = operand_for(call, a)
        if op is None:
            return False
        block = window_of(op.block_shape, op.full_shape)
        return not (
            a.full_shape
            and (a.full_shape.dtype, a.full_shape.dims) != (op.dtype, tuple(op.full_shape))
            or a.window_shape
            and (a.window_shape.dtype != op.dtype or squeezed(a.window_shape.dims) != squeezed(block))
        )
    if a.kind == "scratch":
        # "scratch operand": an entry of scratch_shapes, of the shape printed where one is
        shape = a.window_shape and (a.window_shape.dtype, a.window_shape.dims)
        if not any(shape is None or (s.dtype, tuple(s.shape)) == shape for s in call.scratch):
            return False
        return True if shape else None
    if a.kind == "other" and (a.tag or "").startswith(SCOPED_TAG):
        # "scoped memory for <kernel>": a buffer the body allocates, its size only
        return scoped_allocations(call, [a]) != [None]
    if a.kind == "smem_prefetch" and a.operand_index is not None:
        # "prefetched SMEM operand N", its bytes only: the prefetch operand's whole array
        op = next((o for o in call.operands if o.role == "prefetch" and o.operand == a.operand_index), None)
        return op is not None and a.size in (array_bytes(op.dtype, op.full_shape), a.unpadded_size)
    return None


def array_bytes(dtype: str, shape) -> int:
    """Bytes of an array packed flat, as SMEM holds a prefetched operand."""
    from .dtypes import ITEM_BITS

    return math.prod(shape) * ITEM_BITS.get(dtype, 32) // 8


def place_by_trace(
    report: Report,
    candidates: AbstractSet[tuple[str, Span]],
    trace: Traced,
    named: AbstractSet[tuple[str, Span]] = frozenset(),
) -> Placement | None:
    """The one candidate site whose traced calls the report fits; among sites
    that fit alike, the one the report names, else a tie said as one; None when
    no traced call fits (the report's kernel is not reached by the examples)."""
    fitting = [
        (agree, t)
        for t in trace.calls
        if (t.path, t.site.span) in candidates
        for wrong, agree in [contradiction(report, t.call)]
        if not wrong and agree
    ]
    if not fitting:
        return None
    best = max(agree for agree, _ in fitting)
    sites: dict = {}
    for agree, t in fitting:  # a site's first call that fits: the example said is the first to reach it
        if agree == best:
            sites.setdefault((t.path, t.site.span), t)
    chosen = list(sites.values())
    by_name = [t for t in chosen if (t.path, t.site.span) in named]
    if len(chosen) > 1 and len(by_name) == 1:
        [only] = by_name
        why = f"its shapes, matched to the call traced from the example at {only.example}, and its names"
        return Placement(((only.path, only.site),), why, window_spans(report, only, trace.sites_of))
    if len(chosen) > 1:
        return Placement(
            tuple((t.path, t.site) for t in chosen),
            f"its shapes fit the traced calls of {len(chosen)} pallas_calls alike",
        )
    [only] = chosen
    why = f"its shapes, matched to the call traced from the example at {only.example}"
    return Placement(((only.path, only.site),), why, window_spans(report, only, trace.sites_of))


def window_spans(report: Report, traced: TracedCall, sites_of: SitesOf | None) -> tuple:
    """Where check marks each window of the report: the BlockSpec that made its operand."""
    from .correlate import Anchor, operand_for, spec_anchor

    fallback = Anchor(traced.path, traced.site.name_span)
    spans = []
    for a in report.allocations:
        op = operand_for(traced.call, a) if a.kind in ("input_window", "output_window") else None
        anchor = spec_anchor(op, traced.site, sites_of, fallback) if op is not None and sites_of else None
        spans.append((anchor.path, anchor.span) if anchor is not None else None)
    return tuple(spans)


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
                calls.append(TracedCall(site.path, site, call, f"{render.display_path(example.path)}:{example.line}"))
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

    def on(self, chip: Chip | Gpu | None):
        """A thunk of the trace on the report's chip (the default when the text names none)."""
        name = chip.name if chip else self.default_chip

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


def placed_diagnostics(found: Found, report: Report, placement: Placement, chip: Chip | None, log_name: str):
    """The diagnostics `check` gives for this report, on the placed site's
    BlockSpecs and pallas_call, marked as read from the log; or, where the
    report could be several sites, a note on each saying so."""
    from .diagnostics import Diagnostic, Related

    where = f"from the report in {log_name}, line {found.line}"
    facts = {"log_line": found.line, "why": placement.why}
    if len(placement.sites) != 1:
        return undecided(found, placement, log_name)
    [(path, site)] = placement.sites
    need = verdict(report, chip)
    out = []
    for number, a in enumerate(report.allocations):
        if a.kind in ("input_window", "output_window"):
            at_path, span = (
                placement.spans[number] if placement.spans and placement.spans[number] else (path, spec_span(site, a))
            )
            wording = render.part(
                render.allocation_label(a), a.size, need, buffers=a.buffers, printed=a.size_text, note=where
            )
            out.append(
                Diagnostic(
                    at_path,
                    span,
                    "error",
                    "VMEM001",
                    wording.text(),
                    chip.name if chip else None,
                    "log",
                    (Related(path, site.name_span, f"pallas_call: {need}"),),
                    {**facts, "size": a.size},
                )
            )
    out.append(
        Diagnostic(
            path,
            site.name_span,
            "error",
            "VMEM002",
            f"pallas_call: {need} ({where})",
            chip.name if chip else None,
            "log",
            (),
            {**facts, "used": report.used},
        )
    )
    return out


def spec_span(site, allocation: Allocation):
    """The block shape of the site's BlockSpec of that window's index, else the pallas_call."""
    specs = site.in_specs if allocation.kind == "input_window" else site.out_specs
    index = allocation.operand_index
    spec = specs[index] if index is not None and index < len(specs) else None
    return (spec.block_shape or spec).span if spec is not None else site.name_span


@dataclass
class Sources:
    """What --source gives placement: every pallas_call site of the files, and
    the traces of their examples, made only when names and shapes do not decide."""

    sites: list[Candidate]
    tracer: Tracer | None = None


def source_sites(paths: list[str], trace: bool = True) -> Sources:
    """(path, KernelSite, text) of every pallas_call under `paths` (not in
    .venv, build and the like): the candidates of `place`. Only files that
    mention pallas_call are parsed. `trace`: their examples may be traced when
    a report needs it (the editor's command does not: it would hold the server)."""
    from .config import Settings
    from .engine import SourceFiles, python_files
    from .tpu.chips import DEFAULT_TARGETS

    sources = SourceFiles()
    files = [p for p in python_files(paths, Settings().exclude) if "pallas_call" in (sources.text(p) or "")]
    sites = [
        (path, site, text)
        for path in files
        if (text := sources.text(path)) is not None
        for site in sources.sites_of(path).sites
    ]
    return Sources(sites, Tracer(paths, DEFAULT_TARGETS[0]) if trace and paths else None)


def placing(
    found: Found, target: str | None, log_name: str, sources: Sources | list[Candidate]
) -> tuple[list, Placement | None]:
    """The diagnostics of one found report on the sources' lines, and the placement
    they come from (None for a form with no figures)."""
    if not isinstance(sources, Sources):
        sources = Sources(list(sources))
    if (gpu := explain_gpu.parsed(found.text)) is not None:
        return gpu_placing(found, gpu, target, log_name, sources)
    report = parse_report(found.text)
    if report.form in ("unknown", "block_shape"):
        return [], None
    chip = chip_of(found.text, target)
    traced = sources.tracer.on(chip) if sources.tracer else None
    placement = place(report, sources.sites, traced)
    return placed_diagnostics(found, report, placement, chip, log_name), placement


def gpu_placing(
    found: Found, report: GpuReport, target: str | None, log_name: str, sources: Sources
) -> tuple[list, Placement]:
    """A GPU report on the sources' lines: on the pallas_call at a line the log names (MLIR's
    location of the op, the traceback's frames), else on the line MLIR names in a source file,
    else on the traced call whose staged blocks come nearest the request (explain_gpu.best_calls);
    the staged BlockSpecs from that call. A tie is said on each site (VMEM040). A place MLIR names
    outside the sources is no kernel of theirs: not placed."""
    lines = explain_gpu.places(report, found.frames)
    named = next((hits[:1] for file, line in lines if (hits := sites_at(sources.sites, file, line))), [])
    files = {p for p, _, _ in sources.sites if report.place and p.endswith(report.place[0].split("/")[-1])}
    on_line = (files.pop(), report.place[1]) if report.place and len(files) == 1 and not named else None
    placement = Placement(tuple(named), "the line the log names" if named else "nothing in the log names it")
    if report.place and not named and on_line is None:
        where = f"{render.display_path(report.place[0])}:{report.place[1]}"
        placement = Placement((), f"the compiler places it at {where}, in none of the sources")
    chosen: list[TracedCall] = []
    sites_of = None
    if sources.tracer is not None and report.place is None and (not named or report.form == "shared_memory"):
        trace = sources.tracer.on(explain_gpu.trace_target(report, target))()
        spans = {(p, s.span) for p, s in named} or {(p, s.span) for p, s, _ in sources.sites}
        chosen, why = explain_gpu.best_calls(report, [t for t in trace.calls if (t.path, t.site.span) in spans])
        sites_of = trace.sites_of
        if not named:
            placement = Placement(
                tuple((t.path, t.site) for t in chosen), why if chosen or not trace.note else trace.note
            )
        elif chosen:
            placement = Placement(placement.sites, f"{placement.why}; {why}")
    if len(placement.sites) > 1:
        return undecided(found, placement, log_name), placement
    site = placement.sites[0] if placement.sites else None
    traced = chosen[0] if len(chosen) == 1 else None
    at = (found.line, log_name)
    return explain_gpu.placed_diagnostics(report, at, placement.why, target, site, traced, on_line, sites_of), placement


def placed(found: Found, target: str | None, log_name: str, sources: Sources | list[Candidate]) -> list:
    """The diagnostics of one found report on the sources' lines (none for a form with no figures)."""
    return placing(found, target, log_name, sources)[0]
