"""Finding fixes for an example that overflows: rank candidates with the
layout model (cheap traces, no compiles), then verify the best with the
compiler on every target, spending few compiles."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple

from .. import budget as budgets
from .. import render
from ..compile.client import CheckRequest
from ..correlate import SitesOf, kernel_site, operand_named, spec_in_site
from ..gpu.layout import estimated_shared_memory
from ..gpu.report import parse_gpu_report
from ..gpu.targets import gpu, is_gpu
from ..render import size as format_size
from ..results import CapturedCall, ExampleResult, Operand
from ..source.directives import Example
from ..source.model import TextEdit
from ..source.text import apply_edits, split_lines
from ..targets import target_label
from ..tpu.chips import MiB, chip
from ..tpu.parse import parse_report
from . import rewrites
from .edits import Fix
from .knobs import Knob, constant_knobs, default_knobs, example_knobs, keyword_knobs

Runner = Callable[[CheckRequest], ExampleResult]
MAX_ALTERNATIVES = 3
HEADROOM = 0.10


@dataclass
class Problem:
    """One overflowing example, with what the compiler said on each target."""

    example: Example
    source: str  # the text of example.path
    targets: tuple[str, ...]
    results: dict  # target -> ExampleResult (as compiled)
    run: Runner  # the worker, without cache
    sites_of: SitesOf
    max_compiles: int = 8
    compiles: int = 0
    traces: int = 0
    progress: Callable[[list[Fix]], None] | None = None  # told the fixes so far and those being compiled
    # Workers with the compiler's cycle estimate on (settings.faster_fixes): verified fixes
    # of one kind are then offered fastest first. None: largest blocks first.
    estimate: Runner | None = None
    estimates: int = 0

    def tell(self, fixes: list[Fix]) -> None:
        if self.progress is not None:
            self.progress(fixes)

    def failing(self, target: str) -> list[CapturedCall]:
        return [c for c in self.results[target].calls if not c.fits]

    def own_site(self, call: CapturedCall):
        """The call's site when it is written in the example's own file, else
        None: fixes edit the user's code, never a library's."""
        site = kernel_site(call, self.sites_of)
        return site if site is not None and site.path == self.example.path else None

    def own_sites(self):
        """(call, site) of the failing kernels written in the example's own file."""
        for call in self.failing(self.targets[0]):
            if (site := self.own_site(call)) is not None:
                yield call, site

    def request(self, target: str, example_text: str, source: str | None, compile: bool) -> CheckRequest:
        return CheckRequest(
            example_text,
            target,
            path=self.example.path,
            source=source if source != self.source else None,
            compile=compile,
        )


@dataclass(frozen=True)
class Variant:
    """The example and source after some edits."""

    edits: tuple[TextEdit, ...]
    example_text: str
    source: str
    label: str
    scale: float = 1.0  # how compiler-internal bytes are expected to scale (product of size ratios)
    shared: bool = False  # it edits what other code shares: offered after the edits that touch only this example

    @staticmethod
    def of(problem: Problem, edits: list[TextEdit], label: str, scale: float = 1.0, shared: bool = False) -> Variant:
        ex = problem.example
        in_example = [
            e
            for e in edits
            if e.path == ex.path and e.span.start_line == ex.line and e.span.start_col >= ex.span.start_col
        ]
        in_source = [e for e in edits if e not in in_example]
        lines = split_lines(problem.source)
        line = lines[ex.line - 1] if ex.line <= len(lines) else ""
        new_line = apply_edits(line, [replace(e, span=replace(e.span, start_line=1, end_line=1)) for e in in_example])
        start = ex.span.start_col
        new_example = new_line[start : len(new_line) - (len(line) - ex.span.end_col)]
        return Variant(
            tuple(edits), new_example, apply_edits(problem.source, in_source + in_example), label, scale, shared
        )


def key(call: CapturedCall):
    origin = call.call_origin or call.invoke_origin
    return (origin.file, origin.line) if origin else call.name


# ---- the model's view of a variant ----------------------------------------------------


def internal_bytes(call: CapturedCall, target: str) -> int:
    """What the compiler added beyond the model's windows and scratch."""
    if call.fits or not call.compiler_text:
        return 0
    report = parse_report(call.compiler_text)
    compiled = budgets.from_compile(call, report, target)
    model = sum(p.bytes for p in budgets.from_compile(call, None, target).parts)
    return max(compiled.total - model, 0) if compiled.source == "compiler" else 0


def estimate(problem: Problem, calls: list[CapturedCall], target: str, scale: float = 1.0) -> tuple[int, int]:
    """(largest model total, its limit) over the variant's kernels that failed
    before. Compiler-internal bytes (spills, the body's intermediates) are
    taken to scale with the product of the block sizes changed: the body's
    temporaries are blocks of blocks, such as attention's q x k logits."""
    if is_gpu(target):
        return gpu_estimate(problem, calls, target)
    base = {key(c): c for c in problem.failing(target)}
    worst = (0, 1)
    for call in calls:
        before = base.get(key(call))
        if before is None:
            continue
        model = budgets.from_compile(call, None, target)
        total = model.total + int(internal_bytes(before, target) * scale)
        if total / model.limit > worst[0] / worst[1]:
            worst = (total, model.limit)
    return worst


def gpu_estimate(problem: Problem, calls: list[CapturedCall], target: str) -> tuple[int, int]:
    """(largest shared memory, the GPU's limit) over the variant's kernels that
    failed before: the model's staged bytes (gpu_layout), scaled by what the
    compiler asked for the failing kernel over what the model said of it."""
    limit = gpu(target).shared_memory_limit
    base = {key(c): c for c in problem.failing(target)}
    worst = 0
    for call in calls:
        before = base.get(key(call))
        if before is None:
            continue
        report = parse_gpu_report(before.compiler_text or "")
        modelled = estimated_shared_memory(before, report.backend, target)
        if report.form != "shared_memory" or not report.requested or not modelled:
            continue
        worst = max(worst, estimated_shared_memory(call, report.backend, target) * report.requested // modelled)
    return worst, limit


def covers(call: CapturedCall) -> bool:
    """The grid visits enough blocks to cover each array: a block shrunk along
    a dimension the grid does not iterate would leave part of it untouched.
    A grid dimension sized at run time (-1; megablox gmm's count of active
    tiles, worked out from the block sizes) cannot be counted here: such a
    grid is taken to cover, else no shrink of it is ever tried. The compile
    that verifies a fix still decides whether it fits."""
    if any(g < 0 for g in call.grid):
        return True
    steps = math.prod(g if g > 0 else 1 for g in call.grid)
    return all(
        steps * math.prod(op.block_shape) >= math.prod(op.full_shape)
        for op in call.operands
        if op.block_shape is not None and op.role != "prefetch"
    )


def traced_fit(problem: Problem, variant: Variant, reads: Callable[[CapturedCall], bool] = covers) -> dict | None:
    """target -> (total, limit) by the model for the variant; None if it does
    not trace, or its calls do not read their arrays as they should (`reads`)."""
    figures = {}
    for target in problem.targets:
        problem.traces += 1
        result = problem.run(problem.request(target, variant.example_text, variant.source, compile=False))
        if result.error or not all(reads(c) for c in result.calls):
            return None
        figures[target] = estimate(problem, list(result.calls), target, variant.scale)
    return figures


def fits(figures: dict, headroom: float = 0.0) -> bool:
    return all(total <= limit * (1 - headroom) for total, limit in figures.values())


def verify(problem: Problem, variant: Variant, failures: list | None = None) -> bool | None:
    """Compile the variant on every target: True when it fits everywhere;
    None when the compile budget is spent. The failing result goes in `failures`."""
    for target in problem.targets:
        if problem.compiles >= problem.max_compiles:
            return None
        problem.compiles += 1
        result = problem.run(problem.request(target, variant.example_text, variant.source, compile=True))
        if result.error or any(not c.fits for c in result.calls):
            if failures is not None:
                failures.append(result)
            return False
    return True


def title(variant: Variant, figures: dict, how: str) -> str:
    target = max(figures, key=lambda t: figures[t][0] / figures[t][1])
    total, limit = figures[target]
    memory = " of shared memory" if is_gpu(target) else ""
    return f"{variant.label} (fits: ~{format_size(total)} of {format_size(limit)}{memory} on {target_label(target)}, {how})"


def as_fix(
    kind: str, problem: Problem, variant: Variant, figures: dict, verified: bool | None, compiling: bool = False
) -> Fix:
    """`compiling`: a candidate the search is still to compile, told while it does."""
    how = "compiler-verified" if verified else "estimate, verifying…" if compiling else "estimated"
    return Fix(
        kind,
        title(variant, figures, how),
        variant.edits,
        bool(verified),
        {t: f[0] for t, f in figures.items()},
        problem.compiles,
    )


# ---- shrinking blocks through knobs -------------------------------------------------------


def knob_edit(knob: Knob, value: int) -> TextEdit:
    return TextEdit(knob.path, knob.span, knob.edit_text(value))


def knob_label(changes: list[tuple[Knob, int]]) -> str:
    where = {
        "example": "in the example",
        "keyword": "added to the example",
        "default": "default argument",
        "constant": "module constant",
        "field": "field default",
    }
    parts = ", ".join(f"{k.name.rsplit('.', 1)[-1]}={v}" for k, v in changes)
    shared = "; changes a shared default for its other users" if any(k.shared for k, _ in changes) else ""
    return f"Shrink blocks: {parts} ({where[changes[0][0].where]}{shared})"


def block_shapes(calls) -> dict:
    """Every block a kernel moves: its operands' windows and the windows its
    body allocates (an emit_pipeline's inner BlockSpecs), by kernel."""
    shapes = {(key(c), op.role, op.index): op.block_shape for c in calls for op in c.operands}
    shapes.update({(key(c), "scoped", s.index): s.shape for c in calls for s in c.scoped})
    return shapes


def relevant_knobs(problem: Problem, knobs: list[Knob]) -> list[Knob]:
    """The knobs worth trying: the example's own numbers (the user wrote them
    for this kernel), and any other whose halving moves a block of a failing
    kernel or breaks the trace (it is coupled to one that does). One trace each."""
    target = problem.targets[0]
    baseline = block_shapes(problem.failing(target))
    moving = []
    for knob in knobs:
        if knob.value < 2:
            continue
        if knob.where in ("example", "keyword"):
            moving.append(knob)
            continue
        variant = Variant.of(problem, [knob_edit(knob, knob.value // 2)], "")
        problem.traces += 1
        result = problem.run(problem.request(target, variant.example_text, variant.source, compile=False))
        shapes = block_shapes(result.calls)
        if result.error or any(shapes.get(k) not in (None, v) for k, v in baseline.items()):
            moving.append(knob)
    return moving


def candidates(knobs: list[Knob], levels: int = 4) -> list[list[tuple[Knob, int]]]:
    """Halvings of each knob alone, then of all together: the example's own
    numbers together, and all of them together. A parameter is set once: by
    a keyword added to the example, or by its default, not both."""
    found = []
    for knob in knobs:
        for level in range(1, levels + 1):
            value = knob.value >> level
            if value >= 1 and value << level == knob.value:
                found.append([(knob, value)])
    own = [k for k in knobs if k.where in ("example", "keyword")]
    keyworded = {k.name for k in own if k.where == "keyword"}
    everything = own + [
        k for k in knobs if k.where not in ("example", "keyword") and not (k.where == "default" and k.name in keyworded)
    ]
    for group in {tuple(own), tuple(everything)}:
        if len(group) > 1:
            for level in range(1, levels):
                if all(k.value >> level >= 1 for k in group):
                    found.append([(k, k.value >> level) for k in group])
    return found


def knobs_of(problem: Problem) -> list[Knob]:
    """Where the example's block sizes are written: its own numbers, keywords to
    add to it, the defaults other code shares, and module constants and fields."""
    example, source = problem.example, problem.source
    keywords = keyword_knobs(example, source)
    added = {k.name for k in keywords}
    # A default no other caller uses is the example's alone: set by the keyword instead.
    defaults = [k for k in default_knobs(example, source) if k.shared or k.name not in added]
    return example_knobs(example, source) + keywords + defaults + constant_knobs(example.path, source)


def shrink_fixes(problem: Problem) -> list[Fix]:
    """Block sizes halved where they are written: the example's own numbers
    and keywords first; defaults and constants that other code shares after,
    titled as such."""
    moving = relevant_knobs(problem, knobs_of(problem))
    variants = [
        Variant.of(
            problem,
            [knob_edit(k, v) for k, v in changes],
            knob_label(changes),
            math.prod(v / k.value for k, v in changes),
            any(k.shared for k, _ in changes),
        )
        for changes in candidates(moving)
    ]
    if not variants:
        variants = literal_variants(problem)
    return verified_best(problem, "shrink", scored(problem, variants))


def scored(problem: Problem, variants, reads: Callable[[CapturedCall], bool] = covers) -> list:
    """(total, variant, figures) of the variants the model says fit."""
    found = []
    for variant in variants:
        figures = traced_fit(problem, variant, reads)
        if figures and fits(figures):
            found.append((sum(t for t, _ in figures.values()), variant, figures))
    return found


def literal_variants(problem: Problem) -> list[Variant]:
    """Block sizes written as numbers in the BlockSpecs of the user's own kernels."""
    variants = []
    for call, site in problem.own_sites():
        for label, edits, ratio in rewrites.literal_block_sizes(site, call, problem.source):
            variants.append(Variant.of(problem, edits, label, ratio))
    return variants


def verified_best(problem: Problem, kind: str, scored: list, nearest: bool = False) -> list[Fix]:
    """The largest candidates the compiler accepts, up to three; estimated
    ones only when no compile could be spent. `nearest`: the candidates come
    nearest first and keep that order (a legal size for a block the user chose)."""
    fixes: list[Fix] = []
    roomy = lambda figures: fits(figures, HEADROOM)  # prefer fixes that leave no warning behind

    def rank(entry):
        at, (total, variant, figures) = entry
        return variant.shared, not roomy(figures), at if nearest else -total

    ranked = [(variant, figures) for _, (_, variant, figures) in sorted(enumerate(scored), key=rank)]
    chosen: list = []  # (variant, figures) of each fix, as `fixes`
    for at, (variant, figures) in enumerate(ranked):
        if len(fixes) >= MAX_ALTERNATIVES:
            break
        # The model's best are worth showing while the compiler decides (seconds to minutes).
        problem.tell(
            fixes
            + [
                as_fix(kind, problem, v, f, None, compiling=True)
                for v, f in ranked[at : at + MAX_ALTERNATIVES - len(fixes)]
            ]
        )
        verified = verify(problem, variant)
        if verified is False:
            continue
        fixes.append(as_fix(kind, problem, variant, figures, verified))
        chosen.append((variant, figures))
    if problem.estimate is not None and sum(f.verified for f in fixes) > 1:
        fixes = fastest_first(problem, kind, fixes, chosen)
    if ranked:
        problem.tell(fixes)
    return fixes


# ---- the fastest of the verified fixes (settings.faster_fixes) -----------------------------


def fastest_first(problem: Problem, kind: str, fixes: list[Fix], chosen: list) -> list[Fix]:
    """The verified fixes ordered by the compiler's cycle estimate of each on
    every target, each titled with how it compares; unverified ones after, as
    they were. The order is kept when no chip estimated them all, or when a
    kernel loops a number of times known only at run time (the estimate counts
    such a loop once: sweep.rank.LOOPS_CAVEAT)."""
    from ..sweep.rank import estimate_from

    estimate = problem.estimate
    assert estimate is not None
    verified = [(fix, variant, figures) for fix, (variant, figures) in zip(fixes, chosen, strict=True) if fix.verified]
    cycles: list[dict] = [{} for _ in verified]
    for target in problem.targets:
        for said, (_, variant, _) in zip(cycles, verified, strict=True):
            problem.estimates += 1
            request = replace(
                problem.request(target, variant.example_text, variant.source, compile=True), estimate=True
            )
            found = estimate_from(estimate(request))
            if found.caveat is not None:
                return fixes
            if found.cycles is None:
                break  # that chip gives no estimate (libtpu aborted, or v4): no use asking it again
            said[target] = found.cycles
    order = speed_order(cycles)
    if order is None:
        return fixes
    return [
        replace(
            verified[at][0],
            title=title(verified[at][1], verified[at][2], f"compiler-verified, {slower_said(slower, place)}"),
            estimated_cycles=cycles[at],
        )
        for place, (at, slower) in enumerate(order)
    ] + [f for f in fixes if not f.verified]


# Estimates closer than this are a tie: the fixes keep the search's order (largest blocks first).
SPEED_TIE = 0.01


def speed_order(cycles: list[dict]) -> list[tuple[int, float]] | None:
    """(index, how much slower than the fastest: 0.12 for 12%) of each fix's
    estimates (target -> cycles), fastest first, ties (SPEED_TIE) in the given
    order. Cycles compare within one chip only, so each chip's count is taken
    over that chip's fewest, and averaged over the chips where every fix has
    one; None when there is no such chip."""
    chips = [t for t in (cycles[0] if cycles else {}) if all(c.get(t) for c in cycles)]
    if not chips:
        return None
    fewest = {t: min(c[t] for c in cycles) for t in chips}
    slower = [sum(c[t] / fewest[t] for t in chips) / len(chips) - 1 for c in cycles]
    return sorted(enumerate(slower), key=lambda entry: entry[1] if entry[1] >= SPEED_TIE else 0.0)


def slower_said(slower: float, place: int) -> str:
    if slower >= SPEED_TIE:
        return f"~{slower:.0%} slower by the compiler's estimate"
    return "the fastest by the compiler's estimate" if place == 0 else "as fast within 1% by the compiler's estimate"


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
    """The need in whole MiB plus headroom, within the chip; None if it cannot fit."""
    limit = min((math.ceil(need / MiB) + max(1, math.ceil(need * HEADROOM / MiB))) * MiB, capacity // MiB * MiB)
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
            t: estimate(problem, [c for c in problem.failing(t) if key(c) == key(call)], t) for t in problem.targets
        }
        for cost in budgets.layout.window_costs(call, problem.targets[0]):
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
    tiles, block = render.tile(op.dtype), op.block_shape
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


def gpu_fixes(problem: Problem) -> list[Fix]:
    """A GPU kernel over its shared memory gets block shrinks, verified by the
    GPU compiler; other GPU errors (an op the architecture lacks) get none."""
    reports = [
        parse_gpu_report(c.compiler_text or "") for t in problem.targets if is_gpu(t) for c in problem.failing(t)
    ]
    if not reports or any(r.form != "shared_memory" for r in reports):
        return []
    return shrink_fixes(problem)


def find_fixes(problem: Problem) -> list[Fix]:
    """Every fix for one failing example, best first. A block the TPU cannot
    tile gets legal block sizes; other compile errors (an unsupported
    operation) get none: no edit is sure. An overflow gets block shrinks,
    then a grid for single-step kernels, a raised limit, single buffering."""
    if any(is_gpu(t) for t in problem.targets):
        return gpu_fixes(problem)
    reports = [parse_report(c.compiler_text or "") for t in problem.targets for c in problem.failing(t)]
    if any(r.form == "block_shape" for r in reports):
        return legal_block_fixes(problem)
    if any(r.form == "unknown" for r in reports):
        return []
    fixes = shrink_fixes(problem)
    if not fixes:
        fixes += grid_fixes(problem)
    fixes += limit_fixes(problem)
    fixes += buffer_fixes(problem)
    order = ["shrink", "grid", "raise_limit", "single_buffer"]
    return sorted(fixes, key=lambda f: (not f.verified, order.index(f.kind)))
