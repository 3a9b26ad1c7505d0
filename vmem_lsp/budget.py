"""A kernel's VMEM budget on one chip: what each window and scratch buffer
takes, the compiler-internal remainder, the total against the limit.

Two sources: a compile (the compiler's figures where its report lists them,
the layout model's split where it gives only a total) and, while the user
types, an estimate from the last compile's shapes with the edited literals.
Pure functions over plain data.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field

from . import render
from .correlate import part_indices, scoped_entry
from .gpu.targets import gpu, is_gpu
from .results import CapturedCall, Operand
from .source.model import Expr, KernelSite
from .source.syntax import parse_quietly
from .tpu import layout
from .tpu.chips import Chip, chip
from .tpu.report import Report


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
    limit: int  # the limit that applies: scoped (default or vmem_limit_bytes) or capacity
    limit_kind: str  # "scoped" | "physical" | "shared" (a GPU's shared memory per block: gpu_budget.py)
    capacity: int
    source: str  # "compiler": the total is the compiler's; "model": an estimate
    fits: bool  # the compiler's verdict when it has one, else the estimate's

    @property
    def chip(self) -> Chip:
        return chip(self.target)

    @property
    def label(self) -> str:
        """The chip's or the GPU's name as messages give it."""
        return gpu(self.target).label if is_gpu(self.target) else chip(self.target).label

    @property
    def space(self) -> str:
        return "shared memory" if is_gpu(self.target) else "VMEM"

    def headroom(self) -> float:
        return 1 - self.total / self.limit if self.limit else 0.0


def part_for_cost(cost: layout.WindowCost, call: CapturedCall) -> Part:
    """A priced buffer as the budget table lists it, labelled as its diagnostic
    is (a pipeline window by its place in its pipeline: "pipeline input 0 window")."""
    entry = scoped_entry(call, cost.index) if cost.kind in layout.SCOPED_KINDS and cost.index is not None else None
    label = render.cost_label(cost.kind, cost.index, cost.dtype, cost.shape, entry.window if entry else None)
    return Part(cost.kind, cost.index, label, cost.bytes, cost.buffering, True)


def scoped_limit(call: CapturedCall, target: Chip) -> int:
    """The kernel's own vmem_limit_bytes, else the limit the compile ran under
    (a setting, LIBTPU_INIT_ARGS), else the chip's default."""
    return min(call.vmem_limit_bytes or call.scoped_limit or target.scoped_limit, target.capacity)


def from_compile(
    call: CapturedCall, report: Report | None, target_name: str | Chip, libtpu: str | None = None
) -> Budget:
    """The budget a compile established: exact where the report lists allocations. The chip's
    figures are `libtpu`'s (or those of the Chip given)."""
    target = target_name if isinstance(target_name, Chip) else chip(target_name, libtpu)
    costs = [part_for_cost(c, call) for c in layout.window_costs(call, target.name)]
    modelled = sum(p.bytes for p in costs)
    if report is None or report.form not in ("physical", "scoped", "single_allocation"):
        internal = layout.internal_estimate(call, target.name)
        parts = (*costs, *((internal_part(internal, "compiler-internal (model estimate)"),) if internal else ()))
        return Budget(
            target.name,
            parts,
            modelled + internal,
            scoped_limit(call, target),
            "scoped",
            target.capacity,
            "model",
            report is None,
        )
    if report.form == "physical":
        listed = tuple(
            Part(a.kind, index, render.allocation_label(a), a.size, a.buffers, False)
            for a, index in zip(report.allocations, part_indices(call, report.allocations))
        )
        return Budget(
            target.name,
            listed,
            report.used or sum(p.bytes for p in listed),
            report.limit or target.capacity,
            "physical",
            target.capacity,
            "compiler",
            False,
        )
    if report.form == "scoped":
        remainder = (report.used or modelled) - modelled
        unlisted = (internal_part(remainder, "compiler-internal"),) if remainder > 0 else ()
        return Budget(
            target.name,
            (*costs, *unlisted),
            report.used or modelled,
            report.limit or scoped_limit(call, target),
            "scoped",
            target.capacity,
            "compiler",
            False,
        )
    return Budget(
        target.name,
        tuple(costs),
        modelled,
        report.limit or target.capacity,
        "physical",
        target.capacity,
        "model",
        False,
    )


def internal_part(size: int, label: str) -> Part:
    return Part("internal", None, label, size, None, True)


# ---- estimates while typing ---------------------------------------------------------


@dataclass(frozen=True)
class KnownKernel:
    """What the last compile taught about one site, kept to estimate edits."""

    call: CapturedCall
    spec_ordinals: dict = field(default_factory=dict)  # (role, index) -> position in the site's spec tuple
    internal: dict = field(default_factory=dict)  # target -> compiler-internal bytes last seen
    names: dict = field(default_factory=dict)  # name -> the value it had in the compiled block shapes and grid
    libtpu: str | None = None  # the compiler that compiled it: its chip figures bound the estimate
    gpu: dict = field(default_factory=dict)  # GPU target -> (backend, compiler's request / model) last seen
    tpu: bool = True  # compiled or traced for a TPU chip: not a GPU kernel only, so TPU chips are estimated


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


def estimate(site: KernelSite, known: KnownKernel, target_name: str) -> Budget:
    """The budget of the site as it is written now, from the last compile's
    dtypes and array shapes and the literals the user has since typed."""
    target = chip(target_name, known.libtpu)
    call = known.call
    operands = tuple(edited_operand(op, site, known) for op in call.operands)
    limit = literal_limit(site) or call.vmem_limit_bytes
    grid = literal_shape(site.grid, known.names) if site.grid is not None else None
    edited = CapturedCall(
        **{
            **vars(call),
            "operands": operands,
            "vmem_limit_bytes": limit,
            "grid": grid if grid is not None else call.grid,
        }
    )
    parts = [part_for_cost(c, edited) for c in layout.window_costs(edited, target.name)]
    internal = known.internal.get(target.name)
    label = "compiler-internal (last compile)"
    if internal is None:
        internal, label = layout.internal_estimate(edited, target.name), "compiler-internal (model estimate)"
    if internal:
        parts.append(internal_part(internal, label))
    total = sum(p.bytes for p in parts)
    scoped = scoped_limit(edited, target)
    limit, kind = (scoped, "scoped") if scoped < target.capacity else (target.capacity, "physical")
    return Budget(target.name, tuple(parts), total, limit, kind, target.capacity, "model", total <= limit)
