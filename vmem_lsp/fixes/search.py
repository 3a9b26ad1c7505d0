"""Finding fixes for an example that overflows: rank candidates with the
family's model (cheap traces, no compiles), then verify the best with the
compiler on every target, spending few compiles. The machinery every family
shares (variants, block shrinks through knobs, verification, the fastest of
the verified); which kinds of fix a failure gets, and the model's figures of a
variant, are the target's family's (Family.fixes, Family.fix_figures:
tpu/fixes.py's grids, limits, single buffers and legal tiles)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..budget import HEADROOM_WARNING
from ..correlate import SitesOf, kernel_site
from ..held import body_block_dims
from ..render import size as format_size
from ..results import CapturedCall, CheckRequest, ExampleResult
from ..source.directives import Example
from ..source.model import TextEdit
from ..source.text import apply_edits, split_lines
from . import rewrites
from .edits import Fix
from .knobs import Knob, constant_knobs, default_knobs, example_knobs, keyword_knobs

if TYPE_CHECKING:
    from ..family import Family

Runner = Callable[[CheckRequest], ExampleResult]
MAX_ALTERNATIVES = 3
HEADROOM = HEADROOM_WARNING  # a fix leaves what the headroom warning (VMEM005) asks for


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
    # Each target's family (families.family_of): its model sizes a variant, it words a title.
    family_of: Callable[[str], Family] | None = None

    def family(self, target: str) -> Family:
        if self.family_of is None:
            raise ValueError("a Problem without family_of cannot size or title a fix")
        return self.family_of(target)

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


def estimate(problem: Problem, calls: list[CapturedCall], target: str, scale: float = 1.0) -> tuple[int, int]:
    """(largest model total, its limit) over the variant's kernels that failed before, by the
    target's family (`scale`: the product of the block sizes' ratios, for what grows with them)."""
    return problem.family(target).fix_figures(problem, calls, target, scale)


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


def traced(problem: Problem, variant: Variant, reads: Callable[[CapturedCall], bool] = covers) -> dict | None:
    """target -> the variant's traced kernels; None if it does not trace, or its calls do not
    read their arrays as they should (`reads`)."""
    calls = {}
    for target in problem.targets:
        problem.traces += 1
        result = problem.run(problem.request(target, variant.example_text, variant.source, compile=False))
        if result.error or not all(reads(c) for c in result.calls):
            return None
        calls[target] = list(result.calls)
    return calls


def fits(figures: dict, headroom: float = 0.0) -> bool:
    return all(total <= limit * (1 - headroom) for total, limit in figures.values())


def compile_variant(problem: Problem, variant: Variant, target: str) -> ExampleResult | None:
    """The variant compiled for `target` (a name the family knows: a GPU's probe too), counted
    against the problem's compile budget; None when that is spent."""
    if problem.compiles >= problem.max_compiles:
        return None
    problem.compiles += 1
    return problem.run(problem.request(target, variant.example_text, variant.source, compile=True))


def verify(problem: Problem, variant: Variant, failures: list | None = None) -> bool | None:
    """Compile the variant on every target: True when it fits everywhere;
    None when the compile budget is spent. The failing result goes in `failures`."""
    for target in problem.targets:
        result = compile_variant(problem, variant, target)
        if result is None:
            return None
        if result.error or any(not c.fits for c in result.calls):
            if failures is not None:
                failures.append(result)
            return False
    return True


def title(problem: Problem, variant: Variant, figures: dict, how: str, exact: bool = False) -> str:
    """ "block=64 (fits: ~128.0K of 227.0K of shared memory on NVIDIA H100, estimated)"; no
    "~" where the figure is the compiler's (`exact`)."""
    target = max(figures, key=lambda t: figures[t][0] / figures[t][1])
    total, limit = figures[target]
    family = problem.family(target)
    memory = f" of {family.space}" if family.space_in_fix_titles else ""
    about = "" if exact else "~"
    return f"{variant.label} (fits: {about}{format_size(total)} of {format_size(limit)}{memory} on {family.label(target)}, {how})"


def as_fix(
    kind: str,
    problem: Problem,
    variant: Variant,
    figures: dict,
    verified: bool | None,
    compiling: bool = False,
    exact: bool = False,
) -> Fix:
    """`compiling`: a candidate the search is still to compile, told while it does; `exact`:
    the figures are the compiler's own."""
    how = "compiler-verified" if verified else "estimate, verifying…" if compiling else "estimated"
    return Fix(
        kind,
        title(problem, variant, figures, how, exact),
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


@dataclass(frozen=True)
class Scored:
    """A variant the model says fits: its largest total over the targets, its figures per
    target, and whether it shrinks a block dimension the failing body's held values grow with
    (held.body_block_dims): such a variant is tried first, since the body is what overflowed."""

    total: int
    variant: Variant
    figures: dict
    shrinks_body: bool = False


def body_dims(problem: Problem) -> dict:
    """(kernel, role, index, dim) -> block size of each block dimension a failing kernel's body
    grows with, on the first target."""
    return {
        (key(call), *where): size
        for call in problem.failing(problem.targets[0])
        for where, size in body_block_dims(call).items()
    }


def shrinks(dims: dict, calls: list[CapturedCall]) -> bool:
    """Some kernel's block is smaller along one of `dims` (body_dims) than before."""
    shapes = block_shapes(calls)
    return any(
        (shape := shapes.get((kernel, role, index))) is not None and dim < len(shape) and (shape[dim] or size) < size
        for (kernel, role, index, dim), size in dims.items()
    )


def scored(problem: Problem, variants, reads: Callable[[CapturedCall], bool] = covers) -> list[Scored]:
    """The variants the model says fit."""
    dims = body_dims(problem)
    found = []
    for variant in variants:
        calls = traced(problem, variant, reads)
        if calls is None:
            continue
        figures = {target: estimate(problem, c, target, variant.scale) for target, c in calls.items()}
        if fits(figures):
            eases = shrinks(dims, calls[problem.targets[0]])
            if eases:
                variant = replace(variant, label=f"{variant.label}, which shrinks what the kernel body holds")
            found.append(Scored(sum(t for t, _ in figures.values()), variant, figures, eases))
    return found


def literal_variants(problem: Problem) -> list[Variant]:
    """Block sizes written as numbers in the BlockSpecs of the user's own kernels."""
    variants = []
    for call, site in problem.own_sites():
        for label, edits, ratio in rewrites.literal_block_sizes(site, call, problem.source):
            variants.append(Variant.of(problem, edits, label, ratio))
    return variants


def verified_best(problem: Problem, kind: str, scored: list[Scored], nearest: bool = False) -> list[Fix]:
    """The largest candidates the compiler accepts, up to three; estimated
    ones only when no compile could be spent. `nearest`: the candidates come
    nearest first and keep that order (a legal size for a block the user chose)."""
    fixes: list[Fix] = []
    # Prefer fixes that leave no headroom warning behind, where the family warns: a GPU does not
    # (its fit has no compiler's figure), and there the largest block that fits comes first.
    warns = any(problem.family(t).headroom_warnings for t in problem.targets)
    roomy = lambda figures: fits(figures, HEADROOM) or not warns

    def rank(entry):
        at, found = entry
        return found.variant.shared, not found.shrinks_body, not roomy(found.figures), at if nearest else -found.total

    ranked = [(found.variant, found.figures) for _, found in sorted(enumerate(scored), key=rank)]
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
        said = problem.family(problem.targets[0]).compiled_figures(problem, variant) if verified else None
        fixes.append(as_fix(kind, problem, variant, said or figures, verified, exact=said is not None))
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
    kernel loops a number of times known only at run time and the example's values
    do not count it (the estimate leaves such a loop out: sweep.rank.doubtful)."""
    from ..sweep.rank import doubtful, estimate_from

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
            if doubtful(found.caveat):
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
            title=title(problem, verified[at][1], verified[at][2], f"compiler-verified, {slower_said(slower, place)}"),
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


def find_fixes(problem: Problem) -> list[Fix]:
    """Every fix for one failing example, best first, as its targets' family finds them.
    Targets of several families share what every family's model can size, block shrinks,
    when each of them would try them (Family.shrinks), verified on every target."""
    owners = list(dict.fromkeys(problem.family(t) for t in problem.targets))
    if len(owners) == 1:
        return owners[0].fixes(problem)
    return shrink_fixes(problem) if all(f.shrinks(problem) for f in owners) else []
