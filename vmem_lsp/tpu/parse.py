"""Compiler text -> Report.

The TPU compiler reports a VMEM overflow in a few fixed forms (see tests/data/reports/, made
by scripts/capture_reports.py). Parsing is total: any text gives a Report, and text no regex
recognises comes back as form "unknown" with the whole text, so the user still sees it.
"""

from __future__ import annotations

import re
from dataclasses import replace

from ..render import UNITS
from .report import Allocation, Report, Shape

# Printed sizes: "128.00M", "64.0K", "512B". Digit runs are bounded so that int()/float() on a
# mutated text can neither overflow nor hit Python's int-string length limit.
_BYTES = r"\d{1,20}(?:\.\d{1,20})?[BKMGTPE]"  # an allocation's size: never negative
_SIZE = rf"-?{_BYTES}"
SIZE_TEXT = re.compile(r"(-?\d{1,20}(?:\.\d{1,20})?)([BKMGTPE])")
_SHAPE = r"[a-z][a-z0-9_]*\[(?:\d{1,18}(?:,\d{1,18})*)?\]"
SHAPE_TEXT = re.compile(r"([a-z][a-z0-9_]*)\[((?:\d{1,18}(?:,\d{1,18})*)?)\]")

# Form 1, over physical memory with a breakdown.
PHYSICAL = re.compile(
    rf"Ran out of memory in memory space (\w+)\. Used ({_SIZE}) of ({_SIZE}) \w+\. "
    rf"Exceeded \w+ capacity by ({_SIZE})\."
)
# The CompilationResultProto tail repeats the start of the report, escaped and cut short.
PROTO_TAIL = re.compile(r"\[type\.googleapis\.com/")
ENTRY_START = re.compile(rf"^[ \t]*\d{{1,6}}\. Size: ({_BYTES})[ \t]*$", re.M)
ENTRY_FIELD = re.compile(r"^[ \t]*(Operator|Shape|Unpadded size|Tag|XLA label|Allocation type): ?(.*)$", re.M)
OP_NAME = re.compile(r'op_name="([^"]*)"')
SOURCE_FILE = re.compile(r'source_file="([^"]*)"')
SOURCE_LINE = re.compile(r"source_line=(\d{1,9})")
SPILL_LABEL = re.compile(r"register allocator spill slots")

# Form 2, over the scoped limit (E1001; older libtpu prints it without the "E1001:" prefix).
SCOPED_OOM = re.compile(r"CompileTimeScopedVmemOom|while allocating on stack|Scoped allocation with size")
SCOPED = re.compile(
    rf"Scoped allocation with size ({_SIZE}) and limit ({_SIZE}) exceeded scoped (\w+) limit by ({_SIZE})"
)
SCOPED_SPACE = re.compile(r"Ran out of memory in memory space (\w+) while allocating on stack")
# `\bE` spelled as an E that a \b precedes: a pattern that starts with a literal is searched for
# that letter, one that starts with \b tries every position (on a 30 KB report, half the parse).
ERROR_CODE = re.compile(r"(E(?<=\bE)\d{4}):")

# Form 3, one allocation larger than the whole memory; its attributes are in [...] after it.
WOULD_EXCEED = re.compile(r"Allocation \(size=(\d{1,20})\) would exceed memory \(size=(\d{1,20})\)")
ATTR_SHAPE = re.compile(r"shape = '([^']*)'")
ATTR_SPACE = re.compile(r"space=(\w+)")
ATTR_TYPE = re.compile(r"size = \w+, (\w+),")
ATTR_TAG = re.compile(r"tag = '(.*)'\](?: :: (\S+))?")

# Form 4, block shapes refused by JAX's Pallas TPU lowering or by Mosaic (E2002).
BLOCK_SHAPE = re.compile(r"block shape|BlockAndTiling", re.I)
JAX_ORIGIN = re.compile(r"Block (?:spec|shape) for (\S+)")
JAX_ORIGIN_INDEX = re.compile(r"(args|outputs)(?:\[(\d{1,9})\])?")
MOSAIC_OPERAND = re.compile(r"window params for (input|output) (\d{1,9})")

# What a Tag says about the allocation.
TAG_KINDS = (
    (re.compile(r"input window allocation for operator input (\d{1,9})"), "input_window"),
    (re.compile(r"output window allocation for operator output (\d{1,9})"), "output_window"),
    (re.compile(r"prefetched SMEM operand (\d{1,9})"), "smem_prefetch"),
    (re.compile(r"scratch operand(?: (\d{1,9}))?"), "scratch"),
)
WINDOW = re.compile(rf"The window shape is ({_SHAPE}), while the full shape is ({_SHAPE})")
SINGLE_BUFFERED = re.compile(r"This allocation is single buffered")
BUFFERING_LEVELS = re.compile(r"This allocation has (\d{1,3}) buffering levels?")

EMPTY = Report(
    form="unknown",
    memory_space=None,
    used=None,
    used_text=None,
    limit=None,
    limit_text=None,
    exceeded_by=None,
    exceeded_by_text=None,
    limit_kind=None,
    error_code=None,
    op_name=None,
    allocations=(),
    text="",
)


def parse_size(s: str) -> int:
    """Bytes of a size as the compiler prints it ("128.00M"); 1K = 1024. Raises ValueError otherwise."""
    m = SIZE_TEXT.fullmatch(s.strip())
    if not m:
        raise ValueError(f"not a compiler size: {s!r}")
    return round(float(m[1]) * 1024 ** UNITS.index(m[2]))


def parse_shape(s: str) -> Shape | None:
    """The first typed shape in `s` ("f32[4096,4096]{1,0:T(8,128)}" -> f32[4096,4096]), if any."""
    m = SHAPE_TEXT.search(s)
    return Shape(m[1], tuple(int(d) for d in m[2].split(",") if d)) if m else None


def parse_report(text: str) -> Report:
    """The report in `text`; never raises."""
    for parse in (_physical, _scoped, _single_allocation, _block_shape):
        report = parse(text)
        if report is not None:
            return report
    return replace(EMPTY, text=text)


def _sizes(printed: str) -> tuple[int, str]:
    return parse_size(printed), printed


def _physical(text: str) -> Report | None:
    """'Ran out of memory ... Used X of Y': every allocation listed, summing to X."""
    head = PHYSICAL.search(text)
    if head is None:
        return None
    space = head[1]
    tail = PROTO_TAIL.search(text)
    listing = text[: tail.start()] if tail else text
    starts = list(ENTRY_START.finditer(listing))
    ends = [m.start() for m in starts[1:]] + [len(listing)]
    allocations = tuple(_entry(m[1], listing[m.end() : end], space) for m, end in zip(starts, ends))
    (used, used_text), (limit, limit_text), (over, over_text) = map(_sizes, head.group(2, 3, 4))
    return replace(
        EMPTY,
        form="physical",
        memory_space=space,
        used=used,
        used_text=used_text,
        limit=limit,
        limit_text=limit_text,
        exceeded_by=over,
        exceeded_by_text=over_text,
        limit_kind="physical",
        error_code=_error_code(text),
        op_name=next((a.op_name for a in allocations if a.op_name), None),
        allocations=allocations,
        text=text,
    )


def _entry(size_text: str, body: str, space: str) -> Allocation:
    """One numbered entry of a breakdown; fields absent from the text stay None."""
    fields: dict[str, str] = {}
    for m in ENTRY_FIELD.finditer(body):
        fields.setdefault(m[1], m[2].strip())
    operator = fields.get("Operator", "")
    op_name, source_file, source_line = (
        OP_NAME.search(operator),
        SOURCE_FILE.search(operator),
        SOURCE_LINE.search(operator),
    )
    unpadded = SIZE_TEXT.fullmatch(fields.get("Unpadded size", ""))
    return _allocation(
        size=parse_size(size_text),
        size_text=size_text,
        shape_text=fields.get("Shape"),
        tag=fields.get("Tag"),
        label=fields.get("XLA label"),
        memory_space=space,
        allocation_type=fields.get("Allocation type"),
        unpadded_size=parse_size(unpadded[0]) if unpadded else None,
        op_name=op_name[1] if op_name else None,
        source_file=source_file[1] if source_file else None,
        source_line=int(source_line[1]) if source_line else None,
    )


def _allocation(
    *,
    size: int,
    size_text: str | None,
    shape_text: str | None,
    tag: str | None,
    label: str | None,
    memory_space: str,
    allocation_type: str | None,
    unpadded_size: int | None = None,
    op_name: str | None = None,
    source_file: str | None = None,
    source_line: int | None = None,
) -> Allocation:
    """An Allocation with the facts its Tag and label carry (kind, operand, window, buffering)."""
    kind, index = _kind(tag or "", label or "")
    window = WINDOW.search(tag or "")
    if window:
        window_shape, full_shape = parse_shape(window[1]), parse_shape(window[2])
    else:  # a scratch buffer is printed with its own typed shape; other shapes are raw u8 bytes
        window_shape = parse_shape(shape_text) if kind == "scratch" and shape_text else None
        full_shape = None
    return Allocation(
        size=size,
        size_text=size_text,
        kind=kind,
        operand_index=index,
        window_shape=window_shape,
        full_shape=full_shape,
        unpadded_size=unpadded_size,
        buffers=_buffers(tag or ""),
        memory_space=memory_space,
        op_name=op_name,
        source_file=source_file,
        source_line=source_line,
        tag=tag,
        label=label,
        allocation_type=allocation_type,
        shape_text=shape_text,
    )


def _kind(tag: str, label: str) -> tuple[str, int | None]:
    for pattern, kind in TAG_KINDS:
        m = pattern.search(tag)
        if m:
            return kind, int(m[1]) if m[1] else None
    return ("spill" if SPILL_LABEL.search(label) else "other"), None


def _buffers(tag: str) -> int | None:
    if SINGLE_BUFFERED.search(tag):
        return 1
    levels = BUFFERING_LEVELS.search(tag)
    return int(levels[1]) if levels else None


def _error_code(text: str) -> str | None:
    m = ERROR_CODE.search(text)
    return m[1] if m else None


def _scoped(text: str) -> Report | None:
    """E1001: only the total against the scoped limit; the split must come from the layout model."""
    if not SCOPED_OOM.search(text):
        return None
    numbers = SCOPED.search(text)
    space = SCOPED_SPACE.search(text)
    op_name = OP_NAME.search(text)
    report = replace(
        EMPTY,
        form="scoped",
        memory_space=space[1] if space else None,
        limit_kind="scoped",
        error_code=_error_code(text),
        op_name=op_name[1] if op_name else None,
        text=text,
    )
    if numbers is None:
        return report
    (used, used_text), (limit, limit_text), (over, over_text) = map(_sizes, numbers.group(1, 2, 4))
    return replace(
        report,
        memory_space=report.memory_space or numbers[3],
        used=used,
        used_text=used_text,
        limit=limit,
        limit_text=limit_text,
        exceeded_by=over,
        exceeded_by_text=over_text,
    )


def _single_allocation(text: str) -> Report | None:
    """'Allocation (size=N) would exceed memory (size=M)': only the first allocation that does not fit."""
    head = WOULD_EXCEED.search(text)
    if head is None:
        return None
    attrs = text[head.end() :]
    shape, space, kind, tag = (
        ATTR_SHAPE.search(attrs),
        ATTR_SPACE.search(attrs),
        ATTR_TYPE.search(attrs),
        ATTR_TAG.search(attrs),
    )
    memory_space = space[1] if space else None
    allocation = _allocation(
        size=int(head[1]),
        size_text=None,
        shape_text=shape[1] if shape else None,
        tag=tag[1] if tag else None,
        label=tag[2] if tag else None,
        memory_space=memory_space or "vmem",  # the usual space when cut off
        allocation_type=kind[1] if kind else None,
    )
    return replace(
        EMPTY,
        form="single_allocation",
        memory_space=memory_space,
        limit=int(head[2]),
        limit_kind="physical",
        error_code=_error_code(text),
        allocations=(allocation,),
        text=text,
    )


def _block_shape(text: str) -> Report | None:
    """A block shape the lowering refuses; names the operand when the text does."""
    if not BLOCK_SHAPE.search(text):
        return None
    kind, index = _jax_operand(text)
    mosaic = MOSAIC_OPERAND.search(text)
    if kind is None and mosaic:
        # Mosaic numbers the windows: the blocked inputs (in_specs), after the scalar-prefetch operands
        kind, index = "window_input" if mosaic[1] == "input" else "output", int(mosaic[2])
    origin = JAX_ORIGIN.search(text)
    return replace(
        EMPTY,
        form="block_shape",
        error_code=_error_code(text),
        operand_kind=kind,
        operand_index=index,
        operand_path=origin[1] if origin else None,
        text=text,
    )


def _jax_operand(text: str) -> tuple[str | None, int | None]:
    """JAX names an operand by its pytree path: args[0], outputs[1], outputs (the only output)."""
    origin = JAX_ORIGIN.search(text)
    if origin is None:
        return None, None
    kind = "input" if origin[1].startswith("args") else "output" if origin[1].startswith("outputs") else None
    simple = JAX_ORIGIN_INDEX.fullmatch(origin[1])
    if simple is None:
        return kind, None
    return kind, int(simple[2]) if simple[2] else (0 if simple[1] == "outputs" else None)


# What kind of compile error a text is, for its code and its help page (tests/data/reports/ERRORS.md).
ERROR_KINDS = (
    ("alignment", re.compile(r"cannot statically prove that index|E2003")),
    (
        "dtype",
        re.compile(
            r"E2001|Unsupported matmul RHS type|Only arrays with \d+-bit element types|"
            r"Target does not support this comparison|failed to legalize operation 'arith\.cmp|"
            r"Invalid relayout|Only vector<\w+>(?: and vector<\w+>)* are supported, but got"
        ),
    ),
    ("memory_space", re.compile(r"Can only load scalars from SMEM|Can only store scalars to SMEM|memory space")),
    ("partitioning", re.compile(r"cannot be automatically partitioned")),
    ("unsupported", re.compile(r"Unimplemented primitive|unsupported|Not implemented|not supported", re.I)),
)


def error_kind(text: str) -> str:
    """The kind of a compile error that is no VMEM report: alignment, dtype,
    memory_space, partitioning, unsupported (an op, a layout, a shape cast), or other."""
    return next((kind for kind, pattern in ERROR_KINDS if pattern.search(text)), "other")
