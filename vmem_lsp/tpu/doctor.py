"""What `vmem-lsp doctor` tries for TPU chips: the tiny kernel compiled for each chip in one
worker (libtpu loads once), each said: compiled and how long it took, a chip this libtpu does
not know, a libtpu jax refuses, no libtpu at all."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import versions
from ..checkup import KERNEL, NO_COMPILE, Check, compile_error, install_command
from ..family import TinyCompiles
from .chips import CHIPS

if TYPE_CHECKING:
    from ..results import PhaseLimits

REFUSED = "requires a libtpu version"  # jax's own refusal of a libtpu it was not built with
UNKNOWN_CHIP = "Invalid TPU external name"  # a libtpu older than the chip


def chip_checks(tiny: TinyCompiles, limits: PhaseLimits, libtpu: str | None = None) -> list[Check]:
    """One tiny compile per chip, all in one worker, each timed."""
    results = tiny(list(CHIPS), KERNEL)
    install = install_command()
    missing = [name for name, result, _ in results if result.error_kind == "no_compiler"]
    if missing and len(missing) == len(results):
        return [
            Check(
                "chips",
                "libtpu",
                "problem",
                f"libtpu missing: the worker has no TPU compiler, so no chip can be compiled for "
                f"({', '.join(missing)}): {results[0][1].error}",
                f"install libtpu where the worker runs ({install}; Linux only), {NO_COMPILE}",
            )
        ]
    checks = []
    for name, result, seconds in results:
        why = compile_error(result)
        if why is None:
            checks.append(
                Check(
                    "chips",
                    name,
                    "ok",
                    f"{name}: compiled in {seconds:.1f} s ({result.device_kind})",
                    seconds=round(seconds, 2),
                )
            )
            continue
        what = why.strip().splitlines()[0] if why.strip() else why
        if UNKNOWN_CHIP in why:
            checks.append(
                Check(
                    "chips",
                    name,
                    "info",
                    f"{name}: libtpu {libtpu or '(version unknown)'} does not know this chip ({what})",
                    "a newer libtpu knows it (a newer jax[tpu])",
                    round(seconds, 2),
                )
            )
            continue
        if REFUSED in why:
            checks.append(
                Check(
                    "chips",
                    name,
                    "problem",
                    f"{name}: jax refuses this libtpu: {what}",
                    f"install the libtpu this jax pairs with: {install_command()}",
                    round(seconds, 2),
                )
            )
            continue
        fix = (
            f"install libtpu where the worker runs ({install}), {NO_COMPILE}"
            if result.error_kind == "no_compiler"
            else f"run with a tested pair ({versions.tested_text()}), or report it with this line"
        )
        checks.append(
            Check(
                "chips",
                name,
                "problem",
                f"{name}: the tiny compile failed after {seconds:.1f} s: {what}",
                fix,
                round(seconds, 2),
            )
        )
    return checks
