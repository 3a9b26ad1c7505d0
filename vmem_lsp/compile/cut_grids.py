"""A long grid's cycle estimate from shorter ones: the compiler's static profile simulates
every grid step, so a kernel whose grid is long is estimated on two grids of its axes cut
short, and the cycles are extrapolated along the steps. Pure."""

from __future__ import annotations

import math

# The static profile simulates every grid step: a 512-step matmul of 1024-blocks took
# 60 s and 8 GB (0.9 s and 0.4 GB without it). A longer grid is estimated on two
# shorter ones, its axes cut, and the cycles extrapolated along the steps
# (bench/RESULTS.md: within 1% of the whole grid's estimate on the matmuls measured).
ESTIMATED_STEPS = 64


def grid_steps(grid: tuple[int, ...]) -> int:
    """Steps of the grid; a dimension only known at run time counts as many."""
    return math.prod(g if g > 0 else 2 for g in grid)


def cut_grids(grid: tuple[int, ...], most: int = ESTIMATED_STEPS) -> list[tuple[int, ...]]:
    """The grid itself when it has at most `most` steps; else two grids of its
    axes cut to k and k-1 (the largest k whose grid has at most `most` steps)."""
    if math.prod(grid) <= most:
        return [grid]
    cut = lambda k: tuple(min(extent, k) for extent in grid)
    k = max((k for k in range(1, most + 1) if math.prod(cut(k)) <= most), default=1)
    shorter = cut(max(k - 1, 1))
    return [cut(k)] if math.prod(shorter) == math.prod(cut(k)) else [shorter, cut(k)]


def extrapolate(points: list[tuple[int, int]], steps: int) -> int:
    """Cycles at `steps` from (steps, cycles) measured: the line through two
    points, or one point scaled."""
    if len(points) == 1:
        ((measured, cycles),) = points
        if measured == steps or measured == 0:  # the grid itself (one with no step: a block over the array)
            return cycles
        return round(cycles * steps / measured)
    (s1, c1), (s2, c2) = points
    per_step = (c2 - c1) / (s2 - s1)
    return round(c2 + per_step * (steps - s2))
