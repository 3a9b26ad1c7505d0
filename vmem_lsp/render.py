"""All the wording of diagnostics, in one place: sizes, `dtype[shape]`,
buffering, the budget sentence, and each diagnostic's message.

A message is built as a `Wording`: a head that is the same on every chip
("input 0 window f32[4096,4096] = 64.00M, single buffered") and a clause that
is the chip's ("kernel needs 128.00M of 16.00M scoped VMEM on TPU v5e (over by
112.00M)"). Merging one finding across chips joins the clauses; nothing ever
searches a message's text to learn what it says.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from .source.notebook import cell_line, is_notebook

UNITS = "BKMGTPE"  # as the compiler prints sizes: 12.35M


def size(n: int) -> str:
    """Bytes the way the compiler prints them (tsl's HumanReadableNumBytes), so texts compare equal:
    whole bytes below 1K, K with one decimal, bigger units with two, each unit step truncating."""
    sign, n = ("-", -n) if n < 0 else ("", n)
    if n < 1024:
        return f"{sign}{n}B"
    unit = 1
    while n >= 1024 * 1024 and unit < len(UNITS) - 1:
        n //= 1024
        unit += 1
    return f"{sign}{n / 1024:.{1 if unit == 1 else 2}f}{UNITS[unit]}"


@dataclass(frozen=True)
class Wording:
    """A message as head + separator + the chip's clause; `joiner` joins the
    clauses of several chips ("; " between budget sentences, ", " between
    the chips a compile error fails on)."""

    head: str
    separator: str
    clause: str
    joiner: str = "; "
    tail: str = ""  # after the clauses: "example not checked on TPU v5e, TPU v6e: <why>"

    def text(self) -> str:
        return f"{self.head}{self.separator}{self.clause}{self.tail}"


def per_target(wordings: list[Wording]) -> str:
    """One message for the chips of one finding, in target order: the head
    once and each chip's clause after it ("...; kernel needs ... on TPU v5e
    (...); kernel needs ... on TPU v6e (...)"). Each clause names its chip.
    Heads that differ by chip (a padded size) are each kept with their clause."""
    first = wordings[0]
    if all(w.head == first.head and w.separator == first.separator and w.tail == first.tail for w in wordings):
        return first.head + first.separator + first.joiner.join(w.clause for w in wordings) + first.tail
    return "; ".join(w.text() for w in wordings)


@dataclass(frozen=True)
class Brief:
    """One chip's figures in a few words, for a message that names several chips."""

    used: int | None  # bytes; None: one allocation, no total
    limit_bytes: int
    target: str  # "v5e"
    scoped: bool = False  # the limit is the scoped one, not the chip's VMEM
    asked: str | None = None  # a vmem_limit_bytes above what the chip has: "128.00M"
    approximate: bool = False  # the layout model's total (no compile, or a kernel that fits)

    @property
    def small(self) -> bool:
        """Over the limit by less than SMALL_OVERSHOOT of it."""
        return self.used is not None and overshoot(self.used - self.limit_bytes, self.limit_bytes) is not None

    @property
    def need(self) -> str:
        """ "~512.0K", "128.00M"."""
        return f"{'~' if self.approximate else ''}{size(self.used or 0)}"

    @property
    def limit(self) -> str:
        """ "16.00M scoped", "64.00M (128.00M asked)"."""
        asked = f" ({self.asked} asked)" if self.asked else ""
        return f"{size(self.limit_bytes)}{' scoped' if self.scoped else ''}{asked}"


def brief(facts: dict) -> Brief | None:
    """A chip's Brief from a diagnostic's facts; None without figures. A total
    the layout model gives (no compile, or a kernel that fits) is marked "~"."""
    used, limit, target = facts.get("used"), facts.get("limit"), facts.get("target")
    if not limit or not target:
        return None
    scoped = facts.get("limit_kind") == "scoped"
    asked = size(facts["asked"]) if facts.get("asked") else None
    if facts.get("form") == "single_allocation" or used is None:
        return Brief(None, limit, target)
    approximate = facts.get("form") == "model" or bool(facts.get("fits"))
    return Brief(used, limit, target, scoped, asked, approximate)


# From this many chips on, their figures are said as ranges: a clause per chip
# would take five chips past one line of text output.
RANGE_FROM = 3


def briefs_said(briefs: list[Brief], limits: bool = True) -> str:
    """ "needs 128.00M; limits 16.00M scoped on v5e, 127.94M on v6e; one allocation over
    16.00M on v4": the need said once when every chip's total is the same, chips of
    one limit together, the chips whose compiler names one allocation last. From
    RANGE_FROM chips on, "needs 128.00M; limits 16.00M to 127.94M on v5e, v5p, v6e, v7x",
    without "of ..." for a part of the kernel (`limits` False): its pallas_call says them."""
    totals = [b for b in briefs if b.used is not None]
    said = []
    if len(totals) >= RANGE_FROM:
        chips = ", ".join(b.target for b in totals)
        ranged = size_range([b.limit_bytes for b in totals])
        of = f"; limit{'s' * (' to ' in ranged)} {ranged}{asked(totals)}" if limits else ""
        said.append(f"needs {spread(totals)}{of} on {chips}")
    elif totals and len({b.need for b in totals}) == 1:
        # "needs 128.00M of 16.00M on v5e, 127.94M on v6e" read as if it needed 127.94M on v6e
        grouped = on_chips((b.limit, b.target) for b in totals)
        said.append(f"needs {totals[0].need}; limit{'s' * (len({b.limit for b in totals}) > 1)} {grouped}")
    elif totals:
        said.append("needs " + ", ".join(f"{b.need} of {b.limit} on {b.target}" for b in totals))
    small = [b.target for b in totals if b.small]
    if small and said and limits and len(totals) < RANGE_FROM:  # ranges stay short: the related sentences say it
        said[-1] += f" (a small overshoot on {' and '.join(small)})"
    singles = [(size(b.limit_bytes), b.target) for b in briefs if b.used is None]
    if singles:
        said.append("one allocation over " + on_chips(singles))
    return "; ".join(said)


def on_chips(pairs: Iterable[tuple[str, str]]) -> str:
    """ "16.00M on v4 and v5e, 64.00M on v5p" from (what, chip) pairs: the chips of one thing together."""
    grouped: dict[str, list[str]] = {}
    for what, chip in pairs:
        grouped.setdefault(what, []).append(chip)
    return ", ".join(f"{what} on {' and '.join(chips)}" for what, chips in grouped.items())


def spread(briefs: list[Brief]) -> str:
    """ "18.36M to 18.46M", or the one figure when all chips need the same."""
    low = min(briefs, key=lambda b: b.used or 0)
    high = max(briefs, key=lambda b: b.used or 0)
    return low.need if low.need == high.need else f"{low.need} to {high.need}"


def asked(briefs: list[Brief]) -> str:
    """ " (128.00M asked)" when every chip was asked the same limit above what it has,
    " (128.00M asked on v7x)" when some were; "" when none."""
    were = [b for b in briefs if b.asked]
    if not were:
        return ""
    if len(were) == len(briefs) and len({b.asked for b in were}) == 1:
        return f" ({were[0].asked} asked)"
    return f" ({on_chips((f'{b.asked} asked', b.target) for b in were)})"


def size_range(sizes: list[int]) -> str:
    low, high = size(min(sizes)), size(max(sizes))
    return low if low == high else f"{low} to {high}"


def per_target_briefly(wordings: list[Wording], facts: list[dict], limits: bool = True) -> str | None:
    """per_target for several chips in one line: the head once and each chip's
    figures briefly; None when a chip's figures are unknown (per_target then).
    The whole sentences stay in related information and the JSON facts."""
    briefs = [brief(f) for f in facts]
    if len(wordings) < 2 or any(b is None for b in briefs):
        return None
    said = [b for b in briefs if b is not None]
    first = wordings[0]
    if all(w.head == first.head and w.separator == first.separator for w in wordings):
        return first.head + first.separator + briefs_said(said, limits)
    return "; ".join(f"{w.head}{w.separator}{briefs_said([b], limits)}" for w, b in zip(wordings, said))


# ---- the pieces ----------------------------------------------------------------------


def display_path(path: str) -> str:
    """Relative to the working folder when inside it, else as given."""
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return path
    return path if relative.startswith("..") else relative


def shape(dtype: str, dims) -> str:
    """`f32[4096,4096]`, as the compiler prints a typed shape."""
    return f"{dtype}[{','.join(map(str, dims))}]"


def buffering(buffers: int | None) -> str:
    return {1: "single buffered", 2: "double buffered"}.get(buffers or 0, f"{buffers} buffers" if buffers else "")


def buffering_suffix(buffers: int | None) -> str:
    how = buffering(buffers)
    return f", {how}" if how else ""


def operand(role: str, index: int | None) -> str:
    """`input 0`, `output 1`, `scalar-prefetch operand 0`."""
    return f"{ {'in': 'input', 'out': 'output', 'prefetch': 'scalar-prefetch operand'}[role] } {index}"


def window(role: str, index: int | None, dtype: str, dims) -> str:
    return f"{operand(role, index)} window {shape(dtype, dims)}"


def scratch(index: int | None, dtype: str | None = None, dims=None) -> str:
    return f"scratch {index} {shape(dtype, dims)}" if dtype is not None else f"scratch {index}"


SCOPED_NAMES = {
    "pipeline_in": "pipeline input window",
    "pipeline_out": "pipeline output window",
    "run_scoped": "run_scoped VMEM",
}


def cost_label(kind: str, index: int | None, dtype: str, dims, pipeline_window: int | None = None) -> str:
    """What a priced buffer is called: `input 0 window f32[8,128]`, `scratch 1
    f32[8,128]`, `pipeline input 0 window f32[1024,8192]` (an emit_pipeline's
    block, its in_specs[0], when the worker said which), `run_scoped VMEM
    f32[4096,4096]`."""
    if kind == "scratch":
        return scratch(index, dtype, dims)
    if kind in SCOPED_NAMES:
        name = SCOPED_NAMES[kind]
        if pipeline_window is not None and kind != "run_scoped":
            name = name.replace(" window", f" {pipeline_window} window")
        return f"{name} {shape(dtype, dims)}"
    return window("in" if kind == "input_window" else "out", index, dtype, dims)


def made_by_call(label: str) -> str:
    """The related information on the call of a helper that made a BlockSpec."""
    return f"this call makes the BlockSpec of {label}"


def allocation_label(allocation) -> str:
    """A reported allocation as a hover row names it: `input 0 window bf16[1024,1024]`."""
    if allocation.kind in ("input_window", "output_window"):
        role = "in" if allocation.kind == "input_window" else "out"
        return f"{operand(role, allocation.operand_index)} window {allocation.window_shape or ''}".strip()
    if allocation.kind == "scratch":
        return f"scratch {allocation.window_shape or ''}".strip()
    if allocation.kind == "spill":
        return "register spills"
    return allocation.kind.replace("_", " ")


def needs(
    used: int,
    limit: int,
    chip: str | None,
    *,
    scoped: bool,
    space: str = "VMEM",
    set_in: str | None = None,
    over: int | None = None,
    approx: bool = False,
    note: str | None = None,
    printed: tuple[str | None, str | None, str | None] = (None, None, None),
    limit_note: str | None = None,
    room: str | None = None,
) -> str:
    """The budget sentence: `kernel needs 128.00M of 16.00M scoped VMEM on TPU
    v5e (over by 112.00M)`. `printed` are the compiler's own texts of used,
    limit and over, which win over ours so that figures read as in its log;
    `approx` marks an estimate (~); a scoped limit that is not the chip's
    default says where it was set; with no chip (a log that does not say), none is named.
    An overflow under SMALL_OVERSHOOT of the limit says so, and `room` (a raised limit the
    chip has the memory for) after it."""
    used_text, limit_text, over_text = printed
    tilde = "~" if approx else ""
    where = f" (set in {set_in})" if scoped and set_in and not limit_note else ""
    sentence = (
        f"kernel needs {tilde}{used_text or size(used)} of {limit_text or size(limit)} "
        f"{'scoped ' if scoped else ''}{space}{where}{f' on {chip}' if chip else ''}"
    )
    if over is not None:
        sentence += f" (over by {tilde}{over_text or size(over)}{small_overshoot(over, limit, room)}"
        sentence += f"; {note}" if note else ""
        sentence += f"; {limit_note})" if limit_note else ")"
    elif limit_note:
        sentence += f" ({limit_note})"
    return sentence


SMALL_OVERSHOOT = 0.05  # of the limit: an overflow this small is said as such (jax #38988: 65.05M of 64.00M)


def overshoot(over: int, limit: int) -> str | None:
    """An overflow's share of the limit ("3.1%", "0.05%") when it is a small one, else None."""
    if limit <= 0 or not 0 < over < SMALL_OVERSHOOT * limit:
        return None
    share = over / limit
    return f"{share:.2%}" if share < 0.01 else f"{share:.1%}"


def small_overshoot(over: int, limit: int, room: str | None = None) -> str:
    """What follows "over by X" for a small overflow (", 3.1% of the limit: a small overshoot", and
    `room`, the raise that closes it, after it); "" for any other."""
    share = overshoot(over, limit)
    return f", {share} of the limit: a small overshoot{'; ' + room if room else ''}" if share else ""


def limit_above_capacity(asked: int, chip: str, capacity: int, used_limit: str) -> str:
    """A vmem_limit_bytes the chip cannot give, said as such."""
    return f"vmem_limit_bytes asks {size(asked)}; {chip} has {size(capacity)}; the compiler uses {used_limit}"


def single_allocation(limit: int, chip: str | None, space: str = "VMEM", printed_limit: str | None = None) -> str:
    return f"one allocation would exceed the {printed_limit or size(limit)} of {space}{f' on {chip}' if chip else ''}"


# ---- messages ---------------------------------------------------------------------------

ESTIMATED_SPLIT = "sizes estimated by the layout model; the compiler gives only the total"
NOT_COMPILED = "layout model estimate, not compiled"
SAVE_TO_COMPILE = "layout model estimate, save to compile"
SINGLE_ALLOCATION_NOTE = "the compiler names only the first allocation that does not fit"


def part(
    label: str,
    bytes_: int,
    need: str,
    *,
    buffers: int | None = None,
    approx: bool = False,
    note: str | None = None,
    printed: str | None = None,
) -> Wording:
    """VMEM001: a window or scratch buffer and the budget it takes part in;
    `printed` is the compiler's text of its size."""
    sign = "~" if approx else "="
    clause = f"{need} ({note})" if note else need
    return Wording(f"{label} {sign} {printed or size(bytes_)}{buffering_suffix(buffers)}", "; ", clause)


def spill(bytes_: int, need: str, printed: str | None = None) -> Wording:
    return Wording(
        f"register allocator spill slots {printed or size(bytes_)}: the kernel body's intermediates "
        f"grow with the block sizes",
        "; ",
        need,
    )


def allocation(what: str, bytes_: int, need: str, printed: str | None = None) -> Wording:
    """VMEM003 for an allocation the report names by the compiler's tag."""
    return Wording(f"{what.strip()[:120]} = {printed or size(bytes_)}", "; ", need)


def internal_remainder(remainder: int, modelled: int, need: str) -> Wording:
    return Wording(
        f"compiler-internal scratch ~ {size(remainder)}: the compiler's total less the model's "
        f"windows and scratch ({size(modelled)})",
        "; ",
        need,
    )


def internal_estimate(bytes_: int, need: str) -> Wording:
    return Wording(
        f"compiler-internal scratch ~ {size(bytes_)} (the model's estimate of the kernel body's "
        f"spills and intermediates)",
        "; ",
        need,
    )


def kernel_total(kernel: str, clause: str) -> Wording:
    """VMEM002 at the pallas_call."""
    return Wording(f"pallas_call {kernel}", ": ", clause)


def example_total(kernel: str, where: str, clause: str) -> Wording:
    """VMEM004 at the example."""
    return Wording(f"{kernel} ({where}) does not fit", ": ", clause)


def fits(
    kernel: str, grid: tuple[int, ...], blocks: list[tuple[str, str, int | None]], clause: str, by: str = ""
) -> Wording:
    """VMEM007: what was checked when a kernel fits, so a config that never
    runs (a CPU branch) is seen: its grid, its windows with their buffering
    (said once when they share it) and its other buffers, then the budget.
    `blocks` are (kind, label, buffers) of the layout model's costs; `by`, who
    says it fits when no compiler did (" by the layout model")."""
    windows = [(label, buffers) for kind, label, buffers in blocks if buffers is not None]
    others = [label for kind, label, buffers in blocks if buffers is None]
    shared = {buffers for _, buffers in windows}
    one = shared.pop() if len(shared) == 1 else None
    listed = ", ".join(label if one is not None else label + buffering_suffix(b) for label, b in windows)
    parts = [f"{listed}{buffering_suffix(one)}"] if windows else []
    parts += [", ".join(others)] if others else []
    return Wording(f"pallas_call {kernel} fits{by} ({'; '.join([grid_text(grid), *parts])})", ": ", clause)


def grid_text(grid: tuple[int, ...]) -> str:
    """`grid (4, 8)`; an extent the trace left to run time (the capture's -1) is `?`, said once."""
    if not grid:
        return "no grid"
    dims = ["?" if extent < 0 else str(extent) for extent in grid]
    text = f"grid ({', '.join(dims)}{',' * (len(grid) == 1)})"
    return f"{text}, ? sized from the data at run time" if "?" in dims else text


def fit_label(kind: str, index: int | None, dtype: str, dims) -> str:
    """A buffer as the fit line lists it, shorter than a finding's: `input 0 f32[8,128]`."""
    return cost_label(kind, index, dtype, dims).replace(" window ", " ", 1)


def fit_clause(used: int, limit: int, chip: str, *, scoped: bool, limit_from: str | None, estimated: bool) -> str:
    """A fitting kernel's budget on one chip: "~256.0K of 16.00M scoped VMEM on TPU v5e";
    a limit that is not the chip's default says where it was set."""
    tilde = "~" if estimated else ""
    where = f" ({limit_from})" if limit_from else ""
    return f"{tilde}{size(used)} of {size(limit)} {'scoped ' if scoped else ''}VMEM{where} on {chip}"


def interpret_mode(kernel: str, noun: str = "TPU") -> str:
    """VMEM014: a kernel traced with interpret=True runs on the CPU; nothing was compiled for a TPU (a GPU)."""
    return (
        f"pallas_call {kernel} is traced with interpret=True: it runs on the CPU, so its {noun} path was not "
        f"checked (the example takes a CPU or test branch)"
    )


def lower_bound(what: str, bytes_: int, need: str) -> Wording:
    """VMEM006: the model says it fits, but the body computes what it cannot place."""
    return Wording(
        f"the kernel body computes {what} ({size(bytes_)}), which the layout model cannot place in "
        f"VMEM: its estimate is a lower bound",
        "; ",
        need,
    )


def not_reached(kernel: str | None, function: str | None, to_call: str | None = None) -> str:
    """VMEM020: a pallas_call no example reaches, where it sits (`in outer.inner`:
    the function around it), and the example to add, which calls `to_call` (the
    module-level function that reaches it, as --add-examples writes it)."""
    what = f"pallas_call {kernel}" if kernel else "this pallas_call"
    where = f" (in {function})" if function else ""
    return (
        f"{what}{where} is not checked: no example reaches it; add a `# vmem: {to_call or function or 'f'}(f32[...], ...)` "
        f"line with its shapes"
    )


def headroom(chip: str, free: float, need: str, estimated: bool) -> str:
    return (
        f"fits on {chip} with {free:.0%} to spare: {need} "
        f"(layout model estimate{', save to compile' if estimated else ''})"
    )


def block_summary(label: str, block, where: str) -> str:
    """VMEM030 at the example."""
    return f"example does not compile: {label} block ({', '.join(map(str, block))}) at {where} does not tile"


def block_rejected(first_line: str) -> str:
    """VMEM030's head when the error names no operand the call has."""
    return f"a block shape the TPU cannot tile: {first_line}"


def fails_on(head: str, chip: str) -> Wording:
    """A compile error's wording: its cause, then each chip it fails on."""
    return Wording(head, "; fails on ", chip, ", ")


def compiles_on(chips: list[str]) -> str:
    """What a generation difference adds to a compile error: news in itself."""
    return f"; compiles on {', '.join(chips)}"


def key_line(text: str) -> str:
    """The line of a compiler text that says what is wrong: its first, with
    the next when the first only names the error ("E2003: CompileTime...:")."""
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    if not lines:
        return ""
    first = lines[0].removeprefix("INTERNAL: ").removeprefix("INVALID_ARGUMENT: ")
    return f"{first} {lines[1]}" if first.endswith(":") and len(lines) > 1 else first


BODY_HEADS = {
    "alignment": "the TPU compiler cannot prove this index is aligned to its tile",
    "dtype": "this TPU generation does not support this dtype here",
    "memory_space": "this memory space cannot be used this way in a kernel body",
    "partitioning": "the compiler cannot partition this pallas_call over the devices; wrap it in shard_map",
}


def alone_note(held: list[tuple[str, int]], over: int) -> str:
    """A scoped overflow of a kernel compiled alone that its program may not have."""
    names = ", ".join(f"{name} ({size(window)})" for name, window in held)
    return (
        f"compiled alone; in the example's program XLA may keep {names} whole in VMEM, outside the scoped "
        f"limit and without a window, saving up to {size(sum(w for _, w in held))} of the {size(over)} over"
    )


def body_rejected(text: str, kind: str = "unsupported") -> str:
    """VMEM030-034 at the kernel-body line: what the error is, then the key
    line of what the lowering or Mosaic says (whole in related and facts)."""
    head = BODY_HEADS.get(kind, "the TPU compiler does not support this in a kernel body")
    return f"{head}: {key_line(text)}"


def rejected_whole(text: str) -> str:
    """VMEM011: a compile error no line can be given for, whole."""
    return f"the compiler rejected this kernel: {text}"


def example_rejected_at(where: str, first_line: str) -> str:
    return f"example does not compile (see {where}): {first_line}"


def not_checked(target: str | None, error: str, raised_at: str | None) -> Wording:
    """VMEM010/012, with the target (as messages name it: "TPU v5e") as the clause, so the
    same failure on several chips is one message naming them. Where it raised belongs in
    the text too, not only in JSON's related locations."""
    tail = f": {error}" + (f" (raised at {raised_at})" if raised_at else "")
    if not target:
        return Wording("example not checked", "", "", tail=tail)
    return Wording("example not checked on", " ", target, ", ", tail)


def at(path: str, line: int) -> str:
    """`path:line`; in a notebook, `path:cell N:line`, as the outputs give positions."""
    return f"{display_path(path)}:{(is_notebook(path) and cell_line(path, line)) or line}"


def at_from(path: str, line: int, here: str) -> str:
    """`at` as said from a diagnostic in `here`: "line 15" (or "cell 3:4") in the same file."""
    if path != here:
        return at(path, line)
    return (is_notebook(path) and cell_line(path, line)) or f"line {line}"


def compiler_label(jax: str | None, libtpu: str | None, whose: str | None = None) -> str:
    """`jax 0.12.0.1 (libtpu 0.0.50.1)`: which compiler said it; with `whose`, which
    environment it is in (`jax 0.10.2 (libtpu 0.0.42.1, the project's)`)."""
    return f"jax {jax or 'unknown'} (libtpu {libtpu or 'unknown'}{f', {whose}' if whose else ''})"


def only_with(compilers: list[str], message: str) -> str:
    """A diagnostic that some of the compilers checked with give, and the others do not."""
    return f"with {', '.join(compilers)}: {message}"


def verdict_differs(good: list[str], bad: list[str], overflow: bool, message: str) -> str:
    """A kernel that fits (or compiles) with some compilers and overflows (or fails) with
    the others: the news a jax upgrade brings, ahead of the failing compiler's message."""
    fits, fails = ("fits", "overflows") if overflow else ("compiles", "fails")
    return f"{fits} with {', '.join(good)}, {fails} with {', '.join(bad)}: {message}"
