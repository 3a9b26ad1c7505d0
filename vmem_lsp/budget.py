"""A kernel's budget on one target, as every family gives it: what each part (a window, a
block, a scratch buffer, the compiler's own remainder) takes, the total against the limit.
The figures are the family's (tpu/budget.py, gpu/budget.py); here are the data, what the
last compile taught of a site (KnownKernel), the reading of the literals a user has typed
since, which every family's estimate starts from, and the diagnostics an estimate gives.
Pure functions over plain data.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field

from . import render
from .diagnostics import Diagnostic
from .results import CapturedCall, Operand
from .source.model import Expr, KernelSite, Span
from .source.syntax import parse_quietly


@dataclass(frozen=True)
class Part:
    kind: str  # "input_window" | "output_window" | "scratch" | "internal"
    index: int | None  # in_specs / out_specs / scratch_shapes index
    label: str  # "input 0 window bf16[1024,1024]"
    bytes: int
    buffers: int | None
    estimated: bool  # the layout model's figure, not the compiler's


@dataclass(frozen=True)
class Budget:
    target: str
    parts: tuple[Part, ...]
    total: int
    limit: int  # the limit that applies: scoped (default or vmem_limit_bytes), capacity, shared memory per block
    limit_kind: str  # "scoped" | "physical" | "shared" (a block's share, with no capacity of its own to show)
    capacity: int
    source: str  # "compiler": the total is the compiler's; "model": an estimate
    fits: bool  # the compiler's verdict when it has one, else the estimate's
    label: str = ""  # the target as messages name it: "TPU v5e", "NVIDIA H100 80GB HBM3"
    space: str = "VMEM"  # the memory its figures are of: "VMEM", "shared memory"
    note: str | None = None  # what the family says under its hover table (how its parts are counted)

    def headroom(self) -> float:
        return 1 - self.total / self.limit if self.limit else 0.0


# ---- estimates while typing ---------------------------------------------------------


@dataclass(frozen=True)
class KnownKernel:
    """What the last compile taught about one site, kept to estimate edits."""

    call: CapturedCall
    spec_ordinals: dict = field(default_factory=dict)  # (role, index) -> position in the site's spec tuple
    names: dict = field(default_factory=dict)  # name -> the value it had in the compiled block shapes and grid
    learned: dict = field(default_factory=dict)  # family name -> what its compiles taught (Family.learn)


_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
}


def literal_int(node: ast.AST, names: dict | None = None) -> int | None:
    """An integer written with literals and + - * // ** <<, e.g. 64 * 1024 * 1024;
    with `names`, also those names (`n // 256`, where the last compile showed n)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name) and names and node.id in names:
        return names[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = literal_int(node.left, names), literal_int(node.right, names)
        if left is not None and right is not None and abs(right) < 4096:
            try:
                return _OPERATORS[type(node.op)](left, right)
            except (ZeroDivisionError, ValueError):
                return None
    return None


def shape_elements(expr: Expr | None) -> list[ast.AST] | None:
    """The elements of a tuple or list written at `expr`, parsed; None for anything else."""
    if expr is None:
        return None
    try:
        node = parse_quietly(expr.text.strip(), mode="eval").body
    except SyntaxError:
        return None
    return list(node.elts) if isinstance(node, (ast.Tuple, ast.List)) else None


def literal_shape(expr: Expr | None, names: dict | None = None) -> tuple[int, ...] | None:
    """The dims of a block shape written as literals, e.g. (512, 1024), or with
    names whose values are known; None dims count 1."""
    elements = shape_elements(expr)
    if elements is None:
        return None
    dims = []
    for element in elements:
        if isinstance(element, ast.Constant) and element.value is None:
            dims.append(1)
            continue
        value = literal_int(element, names)
        if value is None or value <= 0:
            return None
        dims.append(value)
    return tuple(dims)


def literal_limit(site: KernelSite) -> int | None:
    if site.vmem_limit_bytes is None:
        return None
    try:
        return literal_int(parse_quietly(site.vmem_limit_bytes.text.strip(), mode="eval").body)
    except SyntaxError:
        return None


def names_shown(call: CapturedCall, site: KernelSite, ordinals: dict) -> dict:
    """name -> value for each bare name the compiled site wrote as a block
    dimension or a grid count (`pl.BlockSpec((n, m), ...)` compiled as
    (4096, 4096)): what lets an estimate read `(256, m)` or `grid=(n // 256,)`
    typed since. A name seen with two values is dropped."""
    seen: dict = {}
    written = [
        (
            (site.in_specs if op.role == "in" else site.out_specs)[ordinals[(op.role, op.index)]].block_shape,
            op.block_shape,
        )
        for op in call.operands
        if (op.role, op.index) in ordinals and op.block_shape
    ]
    written.append((site.grid, call.grid))
    for expr, values in written:
        elements = shape_elements(expr)
        if elements is None or values is None or len(elements) != len(values):
            continue
        for element, value in zip(elements, values):
            if isinstance(element, ast.Name) and value and value > 0:
                seen.setdefault(element.id, set()).add(value)
    return {name: values.pop() for name, values in seen.items() if len(values) == 1}


def edited_operand(op: Operand, site: KernelSite, known: KnownKernel) -> Operand:
    ordinal = known.spec_ordinals.get((op.role, op.index))
    specs = site.in_specs if op.role == "in" else site.out_specs
    if ordinal is None or ordinal >= len(specs):
        return op
    shape = literal_shape(specs[ordinal].block_shape, known.names)
    if shape is None or op.block_shape is None or len(shape) != len(op.block_shape):
        return op
    buffers = specs[ordinal].buffer_count or op.buffer_count
    return Operand(**{**vars(op), "block_shape": shape, "buffer_count": buffers})


# ---- what an estimate says while the user types ------------------------------------------


def part_span(part: Part, site: KernelSite, known: KnownKernel | None) -> Span:
    """Where an estimated part is marked: its BlockSpec's block shape, its
    scratch entry, or the pallas_call."""
    if part.kind in ("input_window", "output_window") and known is not None:
        role = "in" if part.kind == "input_window" else "out"
        ordinal = known.spec_ordinals.get((role, part.index))
        specs = site.in_specs if role == "in" else site.out_specs
        if ordinal is not None and ordinal < len(specs):
            return (specs[ordinal].block_shape or specs[ordinal]).span
    if part.kind == "scratch":
        entry = next((s for s in site.scratch if s.index == part.index), None)
        if entry is not None:
            return entry.span
    return site.name_span


def needs_text(b: Budget, over: bool = False) -> str:
    """The budget sentence of an estimate; with how much it is over, to save and compile."""
    return render.needs(
        b.total,
        b.limit,
        b.label,
        scoped=b.limit_kind == "scoped",
        space=b.space,
        approx=True,
        over=b.total - b.limit if over else None,
        note=render.SAVE_TO_COMPILE,
    )


def overflow_estimate(
    site: KernelSite, known: KnownKernel, b: Budget, parts: list[Part], codes: tuple[str, str]
) -> list[Diagnostic]:
    """An estimated overflow as a compile would say it: each part that makes it on its own line
    (`codes[0]`: VMEM001, VMEM050), the total on the pallas_call (`codes[1]`: VMEM002, VMEM051)."""
    need = needs_text(b, over=True)
    found = [
        Diagnostic(
            site.path,
            part_span(part, site, known),
            "error",
            codes[0],
            render.part(part.label, part.bytes, need, buffers=part.buffers, approx=True).text(),
            b.target,
            "model",
            facts={"estimated": True, "size": part.bytes},
        )
        for part in parts
    ]
    found.append(
        Diagnostic(
            site.path,
            site.name_span,
            "error",
            codes[1],
            need,
            b.target,
            "model",
            facts={"estimated": True, "total": b.total},
        )
    )
    return found


HEADROOM_WARNING = 0.10  # VMEM005 below this share of the limit free: check's, and the editor's headroomWarning default


def headroom_warning(site: KernelSite, b: Budget, estimated: bool) -> Diagnostic:
    """VMEM005: a kernel that fits with little to spare."""
    free = max(b.headroom(), 0.0)
    return Diagnostic(
        site.path,
        site.name_span,
        "warning",
        "VMEM005",
        render.headroom(b.label, free, needs_text(b), estimated),
        b.target,
        "model",
        facts={"estimated": True, "total": b.total, "limit": b.limit},
    )


SMALL_SHARE = 0.05  # of the kernel's total: a part below it is a culprit only if the gap needs it


def culprit_indices(known: list[int | None], over: int | None, used: int | None) -> set[int]:
    """Which parts (by their sizes) make an overflow: every part of at least SMALL_SHARE of
    the total, and a smaller one only when the larger parts could not close the gap without
    it. A 1.0K bias window beside two 64M windows is not one; it stays related information
    of the kernel's total. A part of unknown size is always one, and so is every part when
    the gap is unknown or larger than all the parts together."""
    sizes: list[int] = [size for size in known if size is not None]
    if not over or over <= 0 or len(sizes) < len(known) or sum(sizes) < over:
        return set(range(len(known)))
    small = SMALL_SHARE * (used or sum(sizes))
    return {i for i, size in enumerate(sizes) if size >= small or sum(s for s in sizes if s > size) < over}
