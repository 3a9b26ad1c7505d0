"""A sweep's verdicts as a table per chip (text), JSON, CSV, and a picture of
the fit frontier (matplotlib, the optional `plot` extra)."""

from __future__ import annotations

import csv
import io
import json
import os
from itertools import groupby

from ..families import target_label
from ..render import size
from .decide import Verdict, describe
from .rank import describe_seconds
from .run import S, SweepOutcome
from .spec import Sweep

COLUMNS = ("config", "fits", "needs", "limit", "headroom", "decided by")
RANKED = ("config", "fits", "needs", "limit", "headroom", "roofline", "cycles", "rank", "decided by")


def fits_word(v: Verdict) -> str:
    if v.decided_by == "error":
        return "error"
    return {True: "fits", False: "over", None: "?"}[v.fits]


def row(v: Verdict, ranked: bool = False) -> tuple[str, ...]:
    who = v.decided_by if v.decided_by in ("compiler", "undecided") else f"{v.decided_by}: {v.why}"
    if v.decided_by == "error":
        who = f"error: {v.error or v.why}"[:120]
    sizes = ("" if n is None else size(n) for n in (v.used, v.limit, v.headroom))
    if not ranked:
        return (describe(v.config), fits_word(v), *sizes, who)
    cycles = f"{v.estimated_cycles:,}" if v.estimated_cycles is not None else ("-" if v.fits else "")
    speed = (describe_seconds(v.roofline_seconds), cycles, str(v.speed_rank or ""))
    return (describe(v.config), fits_word(v), *sizes, *speed, who)


def summary(outcome: SweepOutcome[S]) -> str:
    decided = sum(v.fits is not None for v in outcome.verdicts)
    fit = sum(bool(v.fits) for v in outcome.verdicts)
    line = (
        f"{fit} of {outcome.configs_total} configs x chips fit, {decided} decided; "
        f"{outcome.compiles} compiled ({outcome.cache_hits} from the cache), {outcome.seconds:.1f} s"
    )
    broken = "".join(f"\nmonotonicity off on {chip}: {why}" for chip, why in outcome.broken.items())
    if any(v.speed_rank is not None or v.no_estimate for v in outcome.verdicts):
        line += (
            f"; {outcome.estimates} compiled with the cycle estimate (cycles compare within one chip only; "
            f"rank 1 is the fewest)"
        )
    missing = "".join(f"\nno estimate on {chip}: {why}" for chip, why in outcome.no_estimates.items())
    doubtful = "".join(f"\nestimates on {chip}: {why}" for chip, why in outcome.caveats.items())
    unchecked = "".join(f"\nnot checked on {chip}: {why}" for chip, why in outcome.no_compiler.items())
    return line + broken + missing + doubtful + unchecked


def text(outcome: SweepOutcome[S]) -> str:
    out = [outcome.sweep.example.text]
    ranked = any(v.speed_rank is not None or v.no_estimate for v in outcome.verdicts)
    columns = RANKED if ranked else COLUMNS
    for target, verdicts in groupby(outcome.verdicts, key=lambda v: v.target):
        rows = [columns] + [row(v, ranked) for v in verdicts]
        widths = [max(len(r[i]) for r in rows) for i in range(len(columns) - 1)]
        out.append(f"\n{target_label(target)}")
        for r in rows:
            out.append(
                "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
                + "  "
                + r[-1]
            )
    out.append("\n" + summary(outcome))
    return "\n".join(out) + "\n"


def as_dict(v: Verdict) -> dict:
    return {
        "params": v.config,
        "target": v.target,
        "fits": v.fits,
        "used": v.used,
        "limit": v.limit,
        "headroom": v.headroom,
        "decided_by": v.decided_by,
        "why": v.why,
        "error": v.error,
        "roofline_seconds": v.roofline_seconds,
        "estimated_cycles": v.estimated_cycles,
        "no_estimate": v.no_estimate,
        "speed_rank": v.speed_rank,
        "estimate_caveat": v.estimate_caveat,
        "estimate_loops": v.estimate_loops,
    }


def json_text(outcome: SweepOutcome[S]) -> str:
    return (
        json.dumps(
            {
                "example": outcome.sweep.example.text,
                "configs": [as_dict(v) for v in outcome.verdicts],
                "compiles": outcome.compiles,
                "cache_hits": outcome.cache_hits,
                "configs_total": outcome.configs_total,
                "seconds": round(outcome.seconds, 3),
                "monotonicity_off": outcome.broken,
                "estimates": outcome.estimates,
                "estimate_cache_hits": outcome.estimate_cache_hits,
                "no_estimates": outcome.no_estimates,
                "estimate_caveats": outcome.caveats,
                "no_compiler": outcome.no_compiler,
            },
            indent=2,
        )
        + "\n"
    )


def csv_text(outcome: SweepOutcome[S]) -> str:
    names = list(outcome.sweep.configs()[0]) if outcome.verdicts else []
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        ["target", *names, "fits", "used", "limit", "headroom", "decided_by", "why", "estimated_cycles", "speed_rank"]
    )
    for v in outcome.verdicts:
        writer.writerow(
            [
                v.target,
                *(v.config[n] for n in names),
                "" if v.fits is None else v.fits,
                v.used if v.used is not None else "",
                v.limit if v.limit is not None else "",
                v.headroom if v.headroom is not None else "",
                v.decided_by,
                v.error or v.why,
                v.estimated_cycles if v.estimated_cycles is not None else "",
                v.speed_rank or "",
            ]
        )
    return buffer.getvalue()


FORMATS = {"text": text, "json": json_text, "csv": csv_text}


def pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install 'vmem-lsp[plot]'") from None
    return plt


def speed_plot_path(path: str) -> str:
    """Where --plot puts the estimates of a ranked sweep: beside the frontier's picture."""
    stem, suffix = os.path.splitext(path)
    return f"{stem}-speed{suffix}"


def plot(outcome: SweepOutcome[Sweep], path: str) -> None:
    """A heat map of headroom (share of the limit) over the first two axes,
    one panel per chip and value of the other axes; over is red, undecided
    grey. A ranked sweep also gets plot_speed at speed_plot_path(path).
    Needs matplotlib: `pip install 'vmem-lsp[plot]'`."""
    plt = pyplot()
    if any(v.estimated_cycles is not None for v in outcome.verdicts):
        plot_speed(outcome, speed_plot_path(path))
    axes = outcome.sweep.axes
    x, y = axes[0], axes[1] if len(axes) > 1 else None
    others = [a.name for a in axes[2:]]
    panels: dict = {}
    for v in outcome.verdicts:
        facet = (v.target, tuple(v.config[n] for n in others))
        panels.setdefault(facet, []).append(v)
    figure, grid = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.2), squeeze=False)
    for axis, ((target, facet), verdicts) in zip(grid[0], sorted(panels.items(), key=lambda p: str(p[0]))):
        xs, ys = list(x.values), list(y.values) if y else [None]
        values = [[float("nan")] * len(xs) for _ in ys]
        for v in verdicts:
            i = ys.index(v.config[y.name]) if y else 0
            j = xs.index(v.config[x.name])
            if v.fits is not None and v.headroom is not None and v.limit:
                values[i][j] = v.headroom / v.limit
        axis.imshow(values, cmap="RdYlGn", vmin=-0.5, vmax=0.5, origin="lower")
        for v in verdicts:
            i = ys.index(v.config[y.name]) if y else 0
            axis.text(xs.index(v.config[x.name]), i, fits_word(v), ha="center", va="center", fontsize=7)
        axis.set_xticks(range(len(xs)), [str(v) for v in xs])
        axis.set_xlabel(x.name)
        if y:
            axis.set_yticks(range(len(ys)), [str(v) for v in ys])
            axis.set_ylabel(y.name)
        axis.set_title(f"{target}" + "".join(f", {n}={f}" for n, f in zip(others, facet)), fontsize=8)
    figure.suptitle("headroom as a share of the limit (green fits, red over)", fontsize=9)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def plot_speed(outcome: SweepOutcome[S], path: str) -> None:
    """The compiler's cycle estimate against the VMEM used, one panel per chip
    (cycles compare within a chip only), each estimated config labelled with
    its rank: how much memory the speed costs."""
    plt = pyplot()
    chips = sorted({v.target for v in outcome.verdicts if v.estimated_cycles is not None})
    figure, grid = plt.subplots(1, len(chips), figsize=(4.2 * len(chips), 3.6), squeeze=False)
    for axis, target in zip(grid[0], chips):
        shown = [v for v in outcome.verdicts if v.target == target and v.estimated_cycles is not None and v.used]
        mib = [(v.used or 0) / 2**20 for v in shown]
        axis.scatter(mib, [v.estimated_cycles for v in shown], s=18)
        for v, x in zip(shown, mib):
            axis.annotate(f"{v.speed_rank}: {describe(v.config)}", (x, v.estimated_cycles), fontsize=6)
        axis.set_xlabel("VMEM used (MiB)")
        axis.set_ylabel("estimated cycles (fewer is faster)")
        axis.set_title(target_label(target), fontsize=8)
    figure.suptitle("the compiler's cycle estimate of each config that fits, by rank", fontsize=9)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
