"""From a check's results to fixes: one Problem per overflowing example."""

from __future__ import annotations

import difflib
import functools
import os
from collections.abc import Callable

from ..correlate import SitesOf
from ..families import family_of
from ..source.directives import Example
from ..source.text import split_lines
from .edits import Fix
from .search import Problem, Runner, find_fixes


def overflowing(results) -> dict:
    """example -> {target: result} for the examples with a kernel that does not fit."""
    by_example: dict = {}
    for example, target, result in results:
        by_example.setdefault(example, {})[target] = result
    return {
        ex: per
        for ex, per in by_example.items()
        if any(not c.fits for r in per.values() for c in r.calls) and all(not r.error for r in per.values())
    }


def plan(
    results,
    targets,
    text_of,
    run: Runner,
    sites_of: SitesOf,
    max_compiles: int = 8,
    progress: Callable[[Example, list[Fix]], None] | None = None,
    estimate: Runner | None = None,
) -> list[tuple]:
    """[(example, [Fix, ...])] for every overflowing example, fixes best first.
    `progress(example, fixes)` is told the candidates while they are compiled.
    `estimate`: workers with the cycle estimate on; verified fixes come fastest first."""
    planned = []
    for example, per_target in overflowing(results).items():
        source = text_of(example.path)
        if source is None or example.module is not None:
            continue
        problem = Problem(
            example,
            source,
            tuple(t for t in targets if t in per_target),
            per_target,
            run,
            sites_of,
            max_compiles=max_compiles,
            progress=progress and functools.partial(progress, example),
            estimate=estimate,
            family_of=family_of,
        )
        planned.append((example, find_fixes(problem)))
    return planned


def unified_diff(path: str, before: str, after: str, label: str) -> str:
    """git's a/ b/ headers for a relative path (`git apply`, `patch -p1`); an
    absolute path, outside the working folder, is named as it is."""
    old, new = (label, label) if os.path.isabs(label) else (f"a/{label}", f"b/{label}")
    return "".join(
        difflib.unified_diff(
            split_lines(before, keepends=True), split_lines(after, keepends=True), fromfile=old, tofile=new
        )
    )
