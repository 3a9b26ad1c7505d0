"""The fixes a TPU overflow or compile error gets, beside the block shrinks every family
shares (fixes/search.py): a grid for a single-step kernel, a raised vmem_limit_bytes, a
window single-buffered, and for a block the TPU cannot tile, the nearest legal sizes; and
the layout model's figures of a variant, with the compiler-internal bytes it added before."""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

from ..correlate import spec_in_site
from ..fixes import rewrites
from ..fixes.edits import Fix
from ..fixes.knobs import Knob
from ..fixes.search import (
    HEADROOM,
    Problem,
    Variant,
    as_fix,
    covers,
    fits,
    key,
    knob_edit,
    knobs_of,
    scored,
    shrink_fixes,
    verified_best,
    verify,
)
from ..held import held
from ..render import size as format_size
from ..results import CapturedCall, Operand
from . import layout
from .budget import from_compile
from .chips import MiB, chip
from .correlate import operand_named
from .parse import parse_report


def fixes(problem: Problem) -> list[Fix]:
    """Every fix for one failing example, best first. A block the TPU cannot
    tile gets legal block sizes; other compile errors (an unsupported
    operation) get none: no edit is sure. An overflow gets block shrinks,
    then a grid for single-step kernels, a raised limit, single buffering."""
    reports = [parse_report(c.compiler_text or "") for t in problem.targets for c in problem.failing(t)]
    if any(r.form == "block_shape" for r in reports):
        return legal_block_fixes(problem)
    if any(r.form == "unknown" for r in reports):
        return []
    found = shrink_fixes(problem)
    if not found:
        found += grid_fixes(problem)
    found += limit_fixes(problem)
    found += buffer_fixes(problem)
    order = ["shrink", "grid", "raise_limit", "single_buffer"]
    return sorted(found, key=lambda f: (not f.verified, order.index(f.kind)))


def shrinks(problem: Problem, targets: list[str]) -> bool:
    """Block shrinks may help on these chips: every failure there is one of VMEM."""
    forms = {parse_report(c.compiler_text or "").form for t in targets for c in problem.failing(t)}
    return not forms & {"block_shape", "unknown"}


def internal_bytes(call: CapturedCall, target: str) -> int:
    """What the compiler added beyond the model's windows and scratch."""
    if call.fits or not call.compiler_text:
        return 0
    report = parse_report(call.compiler_text)
    compiled = from_compile(call, report, target)
    model = sum(p.bytes for p in from_compile(call, None, target).parts)
    return max(compiled.total - model, 0) if compiled.source == "compiler" else 0


def body_scale(before: CapturedCall, after: CapturedCall, scale: float) -> float:
    """How the body's held values grew from one trace to the other; `scale` where either has no
    body account. A knob that moves only windows leaves the body, and its scratch, as it was."""
    held_before, held_after = (sum(v.bytes for v in held(c)) for c in (before, after))
    return held_after / held_before if held_before and held_after else scale


def figures(problem: Problem, calls: list[CapturedCall], target: str, scale: float = 1.0) -> tuple[int, int]:
    """(largest model total, its limit) over the variant's kernels that failed
    before. Compiler-internal bytes (spills, the body's intermediates) scale as
    the values the body holds at its peak did (the body account of each trace),
    or without one, with the product of the block sizes changed: the body's
    temporaries are blocks of blocks, such as attention's q x k logits."""
    base = {key(c): c for c in problem.failing(target)}
    worst = (0, 1)
    for call in calls:
        before = base.get(key(call))
        if before is None:
            continue
        model = from_compile(call, None, target)
        total = model.total + int(internal_bytes(before, target) * body_scale(before, call, scale))
        if total / model.limit > worst[0] / worst[1]:
            worst = (total, model.limit)
    return worst


# ---- introducing a grid, raising the limit, single buffering ----------------------------------


def grid_fixes(problem: Problem) -> list[Fix]:
    variants = [
        Variant.of(
            problem,
            edits,
            f"Split the array into blocks of {rows} rows with a grid",
            rows / call.operands[-1].full_shape[0],
        )
        for call, site in problem.own_sites()
        for rows, edits in rewrites.introduce_grid(site, call, problem.source)
    ]
    return verified_best(problem, "grid", scored(problem, variants))


def scoped_need(calls) -> int | None:
    """The most scoped VMEM the compiler said these calls use; None when a
    report is not of that form (raising the limit would not help)."""
    need = 0
    for call in calls:
        report = parse_report(call.compiler_text or "")
        if report.form != "scoped" or not report.used:
            return None
        need = max(need, report.used)
    return need


def limit_for(need: int, capacity: int) -> int | None:
    """The need in whole MiB with HEADROOM of the limit free (so that the fixed kernel gets no
    VMEM005, which warns below that share of the limit) and at least 1 MiB, within the chip;
    None if it cannot fit."""
    room = max(math.ceil(need / MiB) + 1, math.ceil(need / (1 - HEADROOM) / MiB))
    limit = min(room * MiB, capacity // MiB * MiB)
    return limit if limit >= need else None


def limit_fixes(problem: Problem) -> list[Fix]:
    """Raise vmem_limit_bytes when every chip has the room. Given more room,
    the compiler may use more (megablox gmm: 22.36M under a raised 22 MiB
    limit): a limit that fails that way is tried once more from the new need."""
    need = scoped_need([call for target in problem.targets for call in problem.failing(target)])
    capacity = min(chip(t).capacity for t in problem.targets)
    fixes = []
    for _call, site in problem.own_sites():
        for _ in range(2):
            if not need:
                break
            limit = limit_for(need, capacity)
            edits = rewrites.set_vmem_limit(site, problem.source, limit) if limit else None
            if limit is None or not edits:
                break
            variant = Variant.of(problem, edits, f"Raise vmem_limit_bytes to {limit // MiB} MiB")
            failures: list = []
            verified = verify(problem, variant, failures)
            if verified is not False:
                figures = {t: (need, limit) for t in problem.targets}
                fixes.append(as_fix("raise_limit", problem, variant, figures, verified))
                break
            grown = scoped_need([c for result in failures for c in result.calls if not c.fits])
            if not grown or grown <= need:
                break
            need = grown
    return fixes


def buffer_fixes(problem: Problem) -> list[Fix]:
    """pipeline_mode=pl.Buffered(1) on a double-buffered window whose second
    buffer is what does not fit."""
    fixes = []
    for call, site in problem.own_sites():
        worst = {
            t: figures(problem, [c for c in problem.failing(t) if key(c) == key(call)], t) for t in problem.targets
        }
        for cost in layout.window_costs(call, problem.targets[0]):
            if cost.buffers < 2 or cost.kind == "scratch":
                continue
            saving = cost.bytes // cost.buffers
            after = {t: (total - saving, limit) for t, (total, limit) in worst.items()}
            if not fits(after):
                continue
            role = "in" if cost.kind == "input_window" else "out"
            edits = rewrites.single_buffer(site, call, role, cost.index, problem.source)
            if edits is None:
                continue
            label = (
                f"Single-buffer {'input' if role == 'in' else 'output'} {cost.index} with "
                f"pipeline_mode=Buffered(1): saves {format_size(saving)}; its next block's copy no "
                f"longer overlaps compute"
            )
            variant = Variant.of(problem, edits, label)
            verified = verify(problem, variant)
            if verified is not False:
                fixes.append(as_fix("single_buffer", problem, variant, after, verified))
    return fixes


# ---- blocks the TPU cannot tile -------------------------------------------------------------


def untileable(problem: Problem) -> list[tuple[CapturedCall, Operand]]:
    """(call, operand) of each failing kernel whose compile error is a block
    shape the TPU cannot tile, on any target."""
    found = []
    for target in problem.targets:
        for call in problem.failing(target):
            report = parse_report(call.compiler_text or "")
            if report.form != "block_shape":
                continue
            op = operand_named(call, report.operand_kind, report.operand_index, report.operand_path)
            if op is not None and op.block_shape and (call, op) not in found:
                found.append((call, op))
    return found


def tiles_at(size: int, positions: list[tuple[int, int]]) -> bool:
    """The size is legal at every (tile, full) position: a multiple of the tile, or the whole dimension."""
    return all(size % tile == 0 or size == full for tile, full in positions)


def legal_sizes(value: int, positions: list[tuple[int, int]], near: int = 2) -> list[int]:
    """Sizes near `value` that tile at every (tile, full) position it sizes,
    and divide the whole dimension, so that the grid reads all of the array.
    Nearest first."""

    def legal(v: int) -> bool:
        return tiles_at(v, positions) and all(full % v == 0 for _, full in positions)

    found = sorted({full for _, full in positions if legal(full)}, key=lambda v: abs(v - value))
    step = max(tile for tile, _ in positions)
    below = [v for v in range(value - value % step, 0, -step) if legal(v)][:near]
    above = [v for v in range(value - value % step + step, value * 4 + step, step) if legal(v)][:near]
    return sorted(dict.fromkeys([*below, *above, *found]), key=lambda v: (abs(v - value), v))[: 2 * near + 1]


def tiled_dims(op: Operand) -> list[tuple[int, int, int, int]]:
    """(place from the end, size, tile, full) of the block's dimensions the
    TPU tiles: its last two, rows by the dtype's sublanes, lanes by 128."""
    tiles, block = layout.tile(op.dtype), op.block_shape
    if not block:  # the whole array: no block to tile
        return []
    return [(d, block[d], tiles[d], op.full_shape[d]) for d in range(-min(2, len(block)), 0)]


def tile_why(value: int, positions: list[tuple[int, int]]) -> str:
    """Why a size is legal, for a fix's title."""
    if any(value == full for _, full in positions):
        return "the whole dimension"
    return f"a multiple of {' x '.join(dict.fromkeys(str(tile) for tile, _ in positions))}"


def distance(changes) -> float:
    """How far (old, new) sizes move the blocks: ratios, whichever way."""
    return sum(abs(math.log(new / old)) for old, new in changes)


def knob_tile_variants(problem: Problem, op: Operand, knobs: list[Knob]) -> list[tuple[float, Variant]]:
    """(distance, variant) of legal sizes set by a knob (a parameter, keyword,
    default or constant) that sizes the untileable block."""
    variants = []
    for knob in knobs:
        positions = [(tile, full) for _, size, tile, full in tiled_dims(op) if size == knob.value]
        if not positions or tiles_at(knob.value, positions):
            continue
        for value in legal_sizes(knob.value, positions):
            label = (
                f"Make the block tile: {knob.name.rsplit('.', 1)[-1]}={value} "
                f"({tile_why(value, positions)} for {op.dtype})"
            )
            variants.append(
                (
                    distance([(knob.value, value)]),
                    Variant.of(problem, [knob_edit(knob, value)], label, value / knob.value, knob.shared),
                )
            )
    return variants


class Place(NamedTuple):
    """A place of a block that does not tile, written as a number in the site's shapes."""

    name: str  # "rows" | "lanes"
    size: int
    written: list  # its numbers (rewrites.Written)
    positions: list  # (tile, full) of every window with that size there


def untileable_places(site, call: CapturedCall, op: Operand) -> list[Place]:
    """The places of the operand's block that do not tile and are written as
    numbers; every window with that size at that place bounds its new size."""
    written = rewrites.written_sizes(site)
    windows = [o for o in call.operands if o.role != "prefetch" and o.block_shape]
    places = []
    for d, size, _, _ in tiled_dims(op):
        at = [w for w in written if w.value == size and w.dim == d]
        positions = [(t, f) for o in windows for e, s, t, f in tiled_dims(o) if (e, s) == (d, size)]
        if at and not tiles_at(size, positions):
            places.append(Place("lanes" if d == -1 else "rows", size, at, positions))
    return places


def literal_tile_variants(
    problem: Problem, call: CapturedCall, op: Operand, most: int = 5
) -> list[tuple[float, Variant]]:
    """(distance, variant) of legal sizes written where the BlockSpecs write
    the untileable ones as numbers, with the grid that follows; places that
    are both wrong change together, the nearest combinations first."""
    site = problem.own_site(call)
    places = untileable_places(site, call, op) if site is not None else []
    moved = lambda values: distance((p.size, v) for v, p in zip(values, places))
    combinations = itertools.product(*(legal_sizes(p.size, p.positions) for p in places))
    variants = []
    for values in sorted(combinations, key=moved)[:most] if places else []:
        edits = list(
            dict.fromkeys(e for v, p in zip(values, places) for e in rewrites.resized(site, call, p.written, v))
        )
        if len({e.span for e in edits}) < len(edits):
            continue  # both places' counts are one number in the grid: which one it follows is not known
        changes = ", ".join(f"{p.name} {p.size} -> {v}" for v, p in zip(values, places))
        why = "; ".join(tile_why(v, p.positions) for v, p in zip(values, places))
        label = f"Make the block tile: {changes} in the BlockSpecs ({why} for {op.dtype})"
        ratio = math.prod(v / p.size for v, p in zip(values, places))
        variants.append((moved(values), Variant.of(problem, edits, label, ratio)))
    return variants


def walked(problem: Problem) -> dict:
    """key(call) -> [(grid axis, role, index, place)] of the failing kernels
    written in the example's file: which axis steps along which place of
    which window, by index maps written as `lambda i, j: (i, j)`."""
    found: dict = {}
    for call, site in problem.own_sites():
        steps = found.setdefault(key(call), [])
        for op in call.operands:
            spec = spec_in_site(site, call, op.role, op.index) if op.role != "prefetch" else None
            if spec is not None:
                steps += [(axis, op.role, op.index, place) for axis, place in rewrites.axis_places(spec)]
    return found


def steps_exactly(call: CapturedCall, walks: dict) -> bool:
    """Each grid axis counts the blocks of the places it walks, no more: a
    block made bigger under the old count would read past the array's end,
    which neither the compiler nor `covers` sees."""
    windows = {(o.role, o.index): (o.full_shape, block) for o in call.operands if (block := o.block_shape)}
    for axis, role, index, place in walks.get(key(call), []):
        shapes = windows.get((role, index))
        if (
            shapes is not None
            and 0 <= axis < len(call.grid)
            and call.grid[axis] >= 0
            and call.grid[axis] != -(-shapes[0][place] // shapes[1][place])
        ):
            return False
    return True


def legal_block_fixes(problem: Problem) -> list[Fix]:
    """For a block the TPU cannot tile: the nearest legal sizes for its dtype
    (rows a multiple of 8, 16 or 32 by item size, lanes of 128, or the whole
    dimension), set where the number is written (a knob, or the BlockSpec
    itself), each checked to read the whole array and no more, and verified
    by the compiler like the VMEM fixes; the nearest first."""
    knobs = knobs_of(problem)
    found = [
        pair
        for call, op in untileable(problem)
        for pair in knob_tile_variants(problem, op, knobs) + literal_tile_variants(problem, call, op)
    ]
    variants: dict = {}
    for _, variant in sorted(found, key=lambda pair: pair[0]):
        variants.setdefault(variant.edits, variant)  # each target's call names the same block
    walks = walked(problem)
    reads = lambda call: covers(call) and steps_exactly(call, walks)
    return verified_best(problem, "tile", scored(problem, list(variants.values()), reads), nearest=True)
