"""`vmem-lsp explain` for TPU jobs: libtpu's VMEM reports found in a log (a report runs
over many lines, its proto tail cut short, its first line maybe behind an exception's name or
a logger's record), said in plain words with the arithmetic of the way out, and placed on the
sources' pallas_calls by their names, written block shapes, or the traced calls of their
examples. Each report is the parser's (parse.py), so what `explain` says of a text is what
`check` would. explain.py drives; logs.py holds what the families share."""

from __future__ import annotations

import ast
import dataclasses
import math
import re
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, NamedTuple

from .. import render
from ..budget import SMALL_SHARE, culprit_indices, literal_shape
from ..correlate import Anchor, spec_anchor
from ..diagnostics import Diagnostic, Related
from ..dtypes import ITEM_BITS
from ..logs import MOST_LINES, Candidate, Found, Placement, Sources, Traced, TracedCall, sites_at, undecided
from ..versions import CHIP_FIGURES
from .chips import CHIPS, Chip, chip
from .correlate import SCOPED_TAG, operand_for, scoped_allocations
from .parse import PROTO_TAIL, SHAPE_TEXT, parse_report
from .report import Allocation, Report

if TYPE_CHECKING:
    from ..correlate import SitesOf
    from ..source.model import KernelSite, Span

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


class Reader:
    """TPU reports in a log (logs.LogReader): a report runs over many lines, each maybe behind
    the prefix its first line had (a timestamp, a worker); it ends at a line that is not of its
    shape, or at a new start once it has its figures."""

    def __init__(self) -> None:
        self.current: list[str] = []
        self.start, self.head = 0, ""
        self.prefix: re.Pattern | None = None

    def _strip(self, line: str) -> str | None:
        if self.prefix is None:
            return line
        found = self.prefix.match(line)
        return line[found.end() :] if found else None

    def _close(self) -> list[Found]:
        if not self.current:
            return []
        found = Found(self.start, "\n".join(self.current).strip("\n"), family="tpu")
        self.current = []
        return [found]

    def see(self, number: int, line: str) -> tuple[list[Found], bool]:
        ended: list[Found] = []
        if self.current:
            if len(self.current) == 1:
                self.prefix = _line_prefix(self.head, line)
            body = self._strip(line)
            if body is not None and len(self.current) < MOST_LINES and _goes_on(self.current, body):
                self.current.append(body)
                return [], True
            ended = self._close()
        cut = _start(line)
        if cut is None:
            return ended, False
        self.head = line[:cut]
        self.current, self.start = [line[cut:]], number
        return ended, True

    def interrupt(self) -> list[Found]:
        return self._close()

    def finish(self) -> list[Found]:
        return self._close()


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


class Way(NamedTuple):
    """A way out of an overflow: what to change, the operand it changes, the bytes it saves."""

    what: str
    operand: str
    saves: int


def halving_dim(window: tuple[int, ...], full: tuple[int, ...]) -> int | None:
    """The block dimension a user halves: the first that tiles its array (flash attention's
    [1,1,4096,128] of [1,8,8192,128]: 2, block_q), else the first wider than 1 (a whole array)."""
    tiled = [i for i, (b, f) in enumerate(zip(window, full)) if 1 < b < f]
    wide = [i for i, b in enumerate(window) if b > 1]
    found = tiled or wide
    return found[0] if found else None


def window_ways(report: Report, site=None) -> list[Way]:
    """Halve a window's block, single-buffer a double-buffered window: each saves half the window.
    A halving names the dimension as the site's BlockSpec writes it, where it is written there."""
    ways: list[Way] = []
    for allocation in report.allocations:
        if allocation.kind not in ("input_window", "output_window") or allocation.window_shape is None:
            continue
        operand = render.allocation_label(allocation).split(" window")[0]
        dims = allocation.window_shape.dims
        full = allocation.full_shape.dims if allocation.full_shape else dims
        if (at := halving_dim(dims, full)) is not None:
            what = "rows" if at == len(dims) - 2 else f"in dimension {at}"
            written = written_dim(site, allocation, at, len(dims)) if site is not None else None
            named = f"{written}: " if written else ""
            halving = f"halving {operand}'s block ({named}{dims[at]} → {dims[at] // 2} {what})"
            ways.append(Way(halving, operand, allocation.size // 2))
        if allocation.buffers == 2:
            ways.append(
                Way(f"single-buffering {operand} (pipeline_mode=pl.Buffered(1))", operand, allocation.size // 2)
            )
    return ways


def written_dim(site, allocation: Allocation, at: int, rank: int) -> str | None:
    """The text the site's BlockSpec gives the window's dimension `at` (`bm` of `(bm, bk)`, `block_q`
    of flash attention's `(None, None, block_q, head_dim)`: None is a squeezed dimension of 1), where
    its block shape is a tuple written out with one entry per dimension; else None."""
    specs = site.in_specs if allocation.kind == "input_window" else site.out_specs
    index = allocation.operand_index
    spec = specs[index] if index is not None and index < len(specs) else None
    if spec is None or spec.block_shape is None:
        return None
    try:
        tree = ast.parse(spec.block_shape.text.strip(), mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(tree, (ast.Tuple, ast.List)) or len(tree.elts) != rank:
        return None
    entry = tree.elts[at]
    if isinstance(entry, ast.Constant):  # a number written there names no knob
        return None
    return ast.unparse(entry)


def combination(ways: list[Way], over: int) -> list[Way] | None:
    """The fewest ways, largest first and each on an operand of its own (two on one window do not
    add up), that close the gap together; None when one alone is enough, or all together are not."""
    if not ways or any(way.saves >= over for way in ways):
        return None
    chosen: list[Way] = []
    for way in sorted(ways, key=lambda w: -w.saves):
        if way.operand not in {w.operand for w in chosen}:
            chosen.append(way)
            if sum(w.saves for w in chosen) >= over:
                return chosen
    return None


def spill_way(report: Report) -> str | None:
    """Register spills are the kernel body's values, which grow with the blocks the body computes
    on: halving one such block shrinks them, by about half (the values may grow with two blocks,
    or be streamed; the compile says)."""
    spills = sum(a.size for a in report.allocations if a.kind == "spill")
    if spills < SMALL_SHARE * (report.used or 0) or not spills:
        return None
    return (
        f"the register spills ({render.size(spills)}) are the kernel body's values: halving a block they grow "
        f"with saves about {render.size(spills // 2)} of them (`vmem-lsp check` on the kernel names the values, "
        f"their lines and the blocks)"
    )


def scoped_note(report: Report, chip: Chip | None, saves: int) -> str:
    """A way out of a report against the chip's whole VMEM that still leaves more than the scoped
    default: the limit to set with it (the compile then meets the scoped limit, E1001)."""
    left = (report.used or 0) - saves
    if report.limit_kind == "scoped" or chip is None or not report.used or left <= chip.scoped_limit:
        return ""
    return (
        f" of the chip's VMEM, with vmem_limit_bytes >= {-(-left // (1 << 20))} MiB "
        f"(above {chip.label}'s scoped default, {render.size(chip.scoped_limit)})"
    )


def ways_out(report: Report, chip: Chip | None, site=None) -> list[str]:
    """The arithmetic of fitting, what fits alone first: halve a window's
    block, single-buffer a double-buffered window; where none is enough alone,
    the fewest that are together; what halving a block does to the body's
    spills; raise the scoped limit where the chip has the room. `site`: the
    pallas_call the report was placed on, whose written block dimensions the
    halvings name (`bm: 2048 → 1024 rows`)."""
    over = report.exceeded_by or ((report.used or 0) - (report.limit or 0))
    if report.form == "single_allocation" and report.allocations:  # no total: the one allocation named
        over = report.allocations[0].size - (report.limit or 0)
    ways = window_ways(report, site)

    def outcome(saves: int) -> str:
        if saves >= over:
            return f"fits with {render.size(saves - over)} to spare{scoped_note(report, chip, saves)}"
        return f"not enough alone, {render.size(over - saves)} short"

    said = [
        f"{what} saves {render.size(saves)}: {outcome(saves)}"
        for what, _, saves in sorted(ways, key=lambda w: (w.saves < over, w.saves if w.saves >= over else -w.saves))
    ]
    if together := combination(ways, over):
        saves = sum(w.saves for w in together)
        said.append(f"together, {' and '.join(w.what for w in together)} save {render.size(saves)}: {outcome(saves)}")
    if spills := spill_way(report):
        said.append(spills)
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


def chip_of(text: str, target: str | None, report: Report | None = None) -> Chip | None:
    """The chip a report is from: --target (None when it names no chip), else a device kind the text
    names, else the one chip whose VMEM the report's limit is (chips_by_limit)."""
    if target:
        try:
            return chip(target)
        except ValueError:  # another family's target
            return None
    named = chip_named_in(text)
    if named is None and report is not None and len(by_limit := chips_by_limit(report)) == 1:
        return chip(by_limit[0])
    return named


def chip_named_in(text: str) -> Chip | None:
    """The chip whose device kind a report's text names ("TPU v5 lite"), if any."""
    return next((c for c in CHIPS.values() if c.device_kind in text), None)


def chips_by_limit(report: Report) -> list[str]:
    """The chips whose VMEM the report's limit is, as some libtpu prints it: a capacity, or a
    default scoped limit for an E1001 total (a raised vmem_limit_bytes matches none). For a log
    that names no chip: 63.94M is v5p's capacity; 32.00M scoped is v6e's or v7x's."""
    if not report.limit or (report.memory_space or "vmem") != "vmem":
        return []
    at, printed = (1 if report.limit_kind == "scoped" else 0), render.size(report.limit)  # a log's figures are rounded
    return [
        name
        for name in CHIPS
        if any(name in figures and render.size(figures[name][at]) == printed for figures in CHIP_FIGURES.values())
    ]


def chip_line(report: Report, text: str, target: str | None) -> str | None:
    """What explain says of the chip when neither --target nor the log names one."""
    if target or chip_named_in(text) is not None:
        return None
    names = chips_by_limit(report)
    kind = "default scoped limit" if report.limit_kind == "scoped" else "capacity"
    if not names:
        return "  chip: the log names none, and no chip's VMEM is this limit (give --target to name it)"
    whose = "TPU " + " or ".join(names)
    return (
        f"  chip: the log names none; {render.size(report.limit or 0)} is the {kind} of {whose} (--target to be sure)"
    )


def explain_text(report: Report, found: Found, head: str, target: str | None, site=None) -> str:
    chip = chip_of(found.text, target, report)
    if report.form in ("unknown", "block_shape"):
        return f"{head}: not understood; the text, whole:\n{found.text}\n"
    lines = [f"{head}: {verdict(report, chip)}"]
    if said := chip_line(report, found.text, target):
        lines.append(said)
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
    ways = ways_out(report, chip, site)
    if ways:
        lines.append("  ways out:")
        lines += [f"    - {w}" for w in ways]
    return "\n".join(lines) + "\n"


def explain_json(report: Report, found: Found, target: str | None) -> dict:
    chip = chip_of(found.text, target, report)
    return {
        "line": found.line,
        "platform": "tpu",
        "form": report.form,
        "chip": chip.name if chip else None,
        "chips_by_limit": chips_by_limit(report),
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
    by_trace = place_by_trace(report, trace, named)
    if by_trace is not None:
        return by_trace
    said = trace.note or "no traced call of the examples has its shapes"
    return Placement(by_names.sites, f"{by_names.why}; {said}")


BY_SOURCE = "its source_file and source_line"


def is_named(names: set[str], site: KernelSite, text: str) -> bool:
    """The report names this site's function or its kernel."""
    from ..source.calls import kernel_name

    return bool(names & {(site.function or "").split(".")[-1], kernel_name(text, site.span)})


def place_by_names(report: Report, candidates: list[Candidate]) -> Placement:
    """By source metadata, else names and literal block shapes: what the report and the text alone tell."""
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


def typed_shapes(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """Every dtype[dims] of a piece of HLO text, layouts skipped."""
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
    return math.prod(shape) * ITEM_BITS.get(dtype, 32) // 8


def place_by_trace(
    report: Report, trace: Traced, named: AbstractSet[tuple[str, Span]] = frozenset()
) -> Placement | None:
    """The one site whose traced calls the report fits; among sites that fit
    alike, the one the report names, else a tie said as one; None when no
    traced call fits (the report's kernel is not reached by the examples).
    A site outside the sources is one their examples reach (a library's
    kernel: jax's flash attention called from the user's file), as check finds it."""
    fitting = [
        (agree, t) for t in trace.calls for wrong, agree in [contradiction(report, t.call)] if not wrong and agree
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
        return Placement(((only.path, only.site),), why, window_spans(report, only, trace.sites_of), only)
    if len(chosen) > 1:
        return Placement(
            tuple((t.path, t.site) for t in chosen),
            f"its shapes fit the traced calls of {len(chosen)} pallas_calls alike",
        )
    [only] = chosen
    why = f"its shapes, matched to the call traced from the example at {only.example}"
    return Placement(((only.path, only.site),), why, window_spans(report, only, trace.sites_of), only)


def window_spans(report: Report, traced: TracedCall, sites_of: SitesOf | None) -> tuple:
    """Where check marks each window of the report: the BlockSpec that made its operand."""
    fallback = Anchor(traced.path, traced.site.name_span)
    spans = []
    for a in report.allocations:
        op = operand_for(traced.call, a) if a.kind in ("input_window", "output_window") else None
        anchor = spec_anchor(op, traced.site, sites_of, fallback) if op is not None and sites_of else None
        spans.append((anchor.path, anchor.span) if anchor is not None else None)
    return tuple(spans)


def placed_diagnostics(found: Found, report: Report, placement: Placement, chip: Chip | None, log_name: str):
    """The diagnostics `check` gives for this report, on the placed site's
    BlockSpecs and pallas_call, marked as read from the log; or, where the
    report could be several sites, a note on each saying so."""
    where = f"from the report in {log_name}, line {found.line}"
    facts = {"log_line": found.line, "why": placement.why}
    if len(placement.sites) != 1:
        return undecided(found, placement, log_name)
    [(path, site)] = placement.sites
    need = verdict(report, chip)
    # As check does: a window too small to close the gap is related information of the total, not an error.
    chosen = culprit_indices([a.size for a in report.allocations], report.exceeded_by, report.used)
    out, small = [], []
    for number, a in enumerate(report.allocations):
        if a.kind in ("input_window", "output_window"):
            at_path, span = (
                placement.spans[number] if placement.spans and placement.spans[number] else (path, spec_span(site, a))
            )
            wording = render.part(
                render.allocation_label(a), a.size, need, buffers=a.buffers, printed=a.size_text, note=where
            )
            if number not in chosen:
                small.append(Related(at_path, span, f"{wording.text()} (too small to close the gap alone)"))
                continue
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
            (*(Related(d.path, d.span, d.message) for d in out), *small),
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


def placing(
    report: Report, found: Found, target: str | None, log_name: str, sources: Sources
) -> tuple[list, Placement | None]:
    """The diagnostics of one found report on the sources' lines, and the placement
    they come from (None for a form with no figures)."""
    if report.form in ("unknown", "block_shape"):
        return [], None
    chip = chip_of(found.text, target, report)
    traced = sources.tracer.on(chip) if sources.tracer else None
    placement = place(report, sources.sites, traced)
    out = placed_diagnostics(found, report, placement, chip, log_name)
    reached = placement.traced
    if out and reached is not None and reached.directive and reached.path not in {p for p, _, _ in sources.sites}:
        out.append(example_verdict(reached, report, placement, chip, log_name, found))
    return out, placement


def example_verdict(
    reached: TracedCall, report: Report, placement: Placement, chip: Chip | None, log_name: str, found: Found
) -> Diagnostic:
    """VMEM004 on the example that reaches a kernel outside the sources, as check says it: the
    report's other diagnostics are in that kernel's file, which the user did not write."""
    example = reached.directive
    assert example is not None
    at = render.at_from(reached.path, reached.site.name_span.start_line, example.path)
    said = render.example_total(reached.call.name, at, verdict(report, chip))
    return Diagnostic(
        example.path,
        example.span,
        "error",
        "VMEM004",
        f"{said.text()} (from the report in {log_name}, line {found.line})",
        chip.name if chip else None,
        "log",
        (Related(reached.path, reached.site.name_span, f"pallas_call {reached.call.name}"),),
        {"log_line": found.line, "why": placement.why, "example": str(example.key)},
    )
