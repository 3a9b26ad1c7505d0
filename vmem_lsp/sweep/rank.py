"""Which of the configs that fit is fastest, by the compiler's own static cycle
estimate (tpu/profile.py), which costs several compiles' time each: the target's
family's roofline screens first (Family.roofline: tpu/speed.py), and only the best
`top` of each chip are estimated.

Pure: the screen and the ranks. The estimates come in through run.py. Cycles
compare within one chip only: the clock is not published.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..compile.cut_grids import ESTIMATED_STEPS, extrapolate, grid_steps
from ..results import ExampleResult

# After this many configs of one chip in a row whose compile libtpu aborted under
# the profile, with none estimated, that chip's other configs are not tried.
ABORTS_BEFORE_GIVING_UP = 2


def screen(seconds: dict[int, float | None], top: int | None) -> list[int]:
    """The configs (their numbers) to estimate, best roofline first: the first
    `top`, or all when top is None. A config without a roofline comes last."""
    order = sorted(seconds, key=lambda n: (seconds[n] is None, seconds[n] or 0.0, n))
    return order if top is None else order[:top]


def ranks(cycles: dict[int, int]) -> dict[int, int]:
    """1 for the fewest cycles; configs with equal estimates share a rank (1, 2, 2, 4)."""
    order = sorted(cycles, key=lambda n: (cycles[n], n))
    found: dict[int, int] = {}
    for place, number in enumerate(order, 1):
        earlier = order[place - 2] if place > 1 else None
        found[number] = found[earlier] if earlier is not None and cycles[earlier] == cycles[number] else place
    return found


# Said of the estimates of a kernel whose body loops a number of times known only at run time.
LOOPS_CAVEAT = (
    "the kernel loops a number of times known only at run time (a while loop); the compiler's "
    "estimate leaves such a loop out, body and all, so these ranks need not follow the real speed"
)


# Said of the estimates of a kernel whose loops of run-time length were counted from the example's values.
LOOPS_COUNTED_CAVEAT = (
    "the kernel loops a number of times known only at run time, which the compiler's estimate leaves "
    "out: each loop's trips are counted from the example's values and added, each at what one more trip "
    "of the loop bounded in the code costs, so the ranks hold for these values"
)


def doubtful(caveat: str | None) -> bool:
    """Whether a caveat says the ranks may not follow a run's: every one but the counted loops'."""
    return caveat is not None and caveat != LOOPS_COUNTED_CAVEAT


# Said of the estimates of a long grid whose steps do not all do the same work.
VARYING_CAVEAT = (
    "the kernel does its matrix work under a condition (causal attention skips blocks) and its grid "
    "is longer than the compiler's estimate was run on: the cycles of a cut grid, extrapolated, "
    "need not follow the real speed (bench/RANK.md measured 0.46x to 1.10x)"
)


@dataclass(frozen=True)
class Estimate:
    """The compiler's word on one config's speed: cycles, or why there are none."""

    cycles: int | None
    why_none: str | None = None
    caveat: str | None = None  # why the cycles may not rank the configs as a run would (LOOPS_CAVEAT)
    loops: str | None = None  # its loops' trips and cycles a trip, counted from the example's values
    aborted: bool = False  # the worker died compiling with the profile (libtpu aborted: v7x on 0.0.42.1, v4)


# Said of an estimate the compiler wrote before libtpu aborted the compile (an LLO_CHECK after the
# profile: v7x on libtpu 0.0.42.1, a quantized matmul on v6e).
SCALED_CAVEAT = (
    "where the kernel's grid is longer than the estimate is run on, libtpu died on one of the two cut "
    "grids: that one's cycles are scaled to the whole grid by the steps alone, the fixed cost of the "
    "pipeline's first and last steps with them"
)
ABORTED_CAVEAT = (
    "libtpu aborted the compile after writing its estimate (an LLO_CHECK failure in its analysis): "
    "the estimate it left is the one ranked"
)


def estimate_from(result: ExampleResult, traced: ExampleResult | None = None) -> Estimate:
    """The example's cycles, all its pallas_calls summed; why there are none when
    the compile with the profile failed or a kernel has no estimate. A compile that
    libtpu aborted after writing the estimate (`estimate_left`) gives it, where the
    example (its trace: `traced`) is one pallas_call: as it is when its whole grid was
    compiled, scaled by the steps when it is of one of a long grid's cut grids."""
    if result.error and result.estimate_left and traced is not None and len(traced.calls) == 1:
        [call] = traced.calls
        steps, left_steps = grid_steps(call.grid), result.estimate_left_steps
        left = f"{ABORTED_CAVEAT}; {LOOPS_CAVEAT}" if call.loops_unknown else ABORTED_CAVEAT
        if steps <= ESTIMATED_STEPS:
            return Estimate(result.estimate_left, caveat=left)
        if left_steps and left_steps < steps:  # a cut grid's: libtpu died on it, the other cut is lost
            cycles = extrapolate([(left_steps, result.estimate_left)], steps)
            return Estimate(cycles, caveat=f"{left}; {SCALED_CAVEAT}")
    if result.error:
        first = result.error.strip().splitlines()[0] if result.error.strip() else "the compile failed"
        # libtpu aborting, or running out of the worker's memory or time, under the profile:
        # a chip where that repeats with nothing estimated is not tried further (run.rank_speed).
        aborted = result.error_kind in ("crashed", "memory", "timeout")
        return Estimate(None, f"the compile with the estimate failed: {first}", aborted=aborted)
    missing = [c for c in result.calls if c.estimated_cycles is None]
    if not result.calls:
        return Estimate(None, "the example reaches no pallas_call")
    if missing:
        return Estimate(None, missing[0].no_estimate or no_estimate_of(missing[0]))
    looping = [c for c in result.calls if c.loops_unknown]
    loops = "; ".join(c.loops_counted for c in looping if c.loops_counted) or None
    if looping and all(c.loops_counted for c in looping):
        caveat: str | None = LOOPS_COUNTED_CAVEAT
    elif looping:
        why = next((c.loops_uncounted for c in looping if c.loops_uncounted), None)
        caveat = f"{LOOPS_CAVEAT} ({why})" if why else LOOPS_CAVEAT
    elif any(c.steps_vary and grid_steps(c.grid) > ESTIMATED_STEPS for c in result.calls):
        caveat = VARYING_CAVEAT
    else:
        caveat = None
    return Estimate(sum(c.estimated_cycles or 0 for c in result.calls), caveat=caveat, loops=loops)


def no_estimate_of(call) -> str:
    """Why a kernel the compiler gave no estimate for has none: its compile's own words when it
    failed under the profile (an error of the kernel or of ours, never hidden)."""
    text = (call.compiler_text or "").strip()
    if not call.fits and text:
        return f"the compile with the estimate failed: {text.splitlines()[0]}"
    return "the compiler gave no estimate"


def describe_seconds(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return ""
    return f"{seconds * 1e6:.1f} us"
