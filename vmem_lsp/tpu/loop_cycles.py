"""A TPU kernel's estimate with its loops of run-time length put back: libtpu's static
estimate leaves them out, body and all (bench/probe_loop_count.py). Each loop's trips over
the grid come from the example's values (trips.py); what one trip costs, from two more
estimates of the kernel with the loop bounded in the code at one trip and at two
(loops.py), their difference spread over the grid steps they ran. The estimate gains
trips x cycles a trip, per loop. Where the trips are not known the estimate is left as it
was, and says why (rank.LOOPS_CAVEAT then stands).

Imports jax; only the worker process loads this module.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..compile.cut_grids import cut_grids
from ..family import Verdict
from .loops import NotBounded, RunTimeLoop, bounded_kernel, loop_bounds, run_time_loops
from .trips import CannotCount, count_trips

# The grid steps a trip's cost is measured on (the kernel's grid cut to them). libtpu's static
# profile of a bounded loop grows fast with the body and the steps: ragged paged attention (12 q
# heads, 256-query blocks, 1024-token kv blocks, v6e) ran over 6 minutes at 8 GB on 64 steps, 134 s
# on 4, 47 s on 1. On one step a trip costs 0-24% less than on four (no next step's copies to
# overlap: 16,977 against 16,997 cycles there, 6,644 against 8,734 with 128-token kv blocks).
LOOP_STEPS = 1


def counted(eqn, estimate: Verdict, prefetch: list | None, compile_with) -> Verdict:
    """`estimate` (the kernel's, loops left out) with its loops' trips added, or with why not."""
    kernel = eqn.params["jaxpr"]
    loops = run_time_loops(kernel)
    if not loops or estimate.estimated_cycles is None:
        return estimate
    mapping = eqn.params["grid_mapping"]
    grid = tuple(mapping.grid)
    if prefetch is None:
        return replace(estimate, loops_uncounted="the example's operands were not followed to the kernel")
    try:
        trips = count_trips(kernel, grid, prefetch, [loop.path for loop in loops])
    except CannotCount as error:
        return replace(estimate, loops_uncounted=str(error))
    cut = replace(mapping, grid=cut_grids(grid, LOOP_STEPS)[0])
    steps = math.prod(cut.grid)
    added, said, seconds = 0.0, [], estimate.seconds
    for loop in loops:
        if not trips[loop.path]:
            said.append(f"{where(loop)}: 0 trips")
            continue
        cycles = []
        for bound in (1, 2):
            try:
                jaxpr = bounded_kernel(kernel, loop_bounds(loop, loops, bound), cut)
            except NotBounded as error:
                return replace(estimate, seconds=seconds, loops_uncounted=f"{where(loop)}: {error}")
            verdict = compile_with({**eqn.params, "jaxpr": jaxpr, "grid_mapping": cut})
            seconds += verdict.seconds
            if not verdict.fits or verdict.estimated_cycles is None:
                why = (verdict.text or verdict.no_estimate or "no estimate").strip().splitlines()[0]
                return replace(
                    estimate, seconds=seconds, loops_uncounted=f"{where(loop)} bounded at {bound} trips: {why}"
                )
            cycles.append(verdict.estimated_cycles)
        per_trip = max(cycles[1] - cycles[0], 0) / steps
        added += trips[loop.path] * per_trip
        said.append(f"{where(loop)}: {trips[loop.path]:,} trips at ~{per_trip:,.0f} cycles")
    return replace(
        estimate,
        estimated_cycles=estimate.estimated_cycles + round(added),
        seconds=seconds,
        loops_counted="; ".join(said),
    )


def where(loop: RunTimeLoop) -> str:
    """The loop as the user finds it: its file's name and line."""
    if loop.origin is None:
        return "a loop"
    return f"the loop at {loop.origin.file.rsplit('/', 1)[-1]}:{loop.origin.line}"
