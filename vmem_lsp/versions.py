"""The installed versions of the packages that decide what the compiler says:
jax, jaxlib and libtpu (a new libtpu can word a report differently, or fit
what did not). Read from the packages' metadata, never by importing them:
`vmem-lsp --version` and the cache's key must not wait for jax to load."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

COMPILER_PACKAGES = ("jax", "jaxlib", "libtpu")


def installed(packages: tuple[str, ...] = COMPILER_PACKAGES) -> dict[str, str | None]:
    """{package: its version, or None when it is not installed}, in the order asked."""
    found: dict[str, str | None] = {}
    for package in packages:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


# ---- the supported and tested range: the one place that knows version numbers ----------

OLDEST_JAX = "0.8.0"  # pyproject's floor: older jax lacks what compile/capture.py reads
NEWEST_JAX_BELOW = "0.13"  # pyproject's ceiling (exclusive)
# jax -> the libtpu its `[tpu]` extra installs: the pairs CI runs on (0.10.2 the whole suite,
# 0.12.0.1 the tool-mode and --jax tests, 0.8.3 and 0.12.0.1 scripts/check_range.py on examples/).
TESTED: dict[str, str] = {"0.8.3": "0.0.32.1", "0.10.2": "0.0.42.1", "0.12.0.1": "0.0.50.1"}


def key(text: str | None) -> tuple[int, ...]:
    """ "0.0.42.1" -> (0, 0, 42, 1), for comparing versions; () for None or a text without numbers."""
    parts = []
    for piece in (text or "").split("."):
        digits = "".join(c for c in piece if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def supported(jax: str | None) -> bool:
    """Whether `jax` is in the range pyproject allows."""
    return bool(jax) and key(OLDEST_JAX) <= key(jax) < key(NEWEST_JAX_BELOW)


def in_tested_range(jax: str | None, libtpu: str | None) -> bool:
    """Whether (jax, libtpu) is one of the pairs the tests run on."""
    return jax is not None and TESTED.get(jax) == libtpu


def range_text() -> str:
    return f"jax {OLDEST_JAX} to <{NEWEST_JAX_BELOW}"


def tested_text() -> str:
    return ", ".join(f"jax {j} + libtpu {t}" for j, t in TESTED.items())


# ---- facts keyed by the compiler's version -----------------------------------------------

MiB = 1 << 20
KiB = 1 << 10

# (capacity, default scoped limit) per chip as libtpu prints them, keyed by the libtpu from
# which they hold until the next key (scripts/measure_chips.py, run in an environment of
# each libtpu, measured them: the first entry on 0.0.23 and 0.0.32.1, the second on
# 0.0.42.1, the third on 0.0.50.1, where v7x's capacity, like v6e's before it, is 64 KiB
# under the physical size). Between two measured versions the older figures are assumed.
CHIP_FIGURES: dict[str, dict[str, tuple[int, int]]] = {
    "0.0.24": {
        "v4": (16 * MiB, 16 * MiB),  # no scoped limit below its capacity
        "v5e": (128 * MiB, 16 * MiB),
        "v5p": (64 * MiB - 64 * KiB, 16 * MiB),
        "v6e": (128 * MiB, 32 * MiB),
        "v7x": (64 * MiB, 32 * MiB),
    },
    "0.0.42": {
        "v4": (16 * MiB, 16 * MiB),
        "v5e": (128 * MiB, 16 * MiB),
        "v5p": (64 * MiB - 64 * KiB, 16 * MiB),
        "v6e": (128 * MiB - 64 * KiB, 32 * MiB),
        "v7x": (64 * MiB, 32 * MiB),
    },
    "0.0.48": {
        "v4": (16 * MiB, 16 * MiB),
        "v5e": (128 * MiB, 16 * MiB),
        "v5p": (64 * MiB - 64 * KiB, 16 * MiB),
        "v6e": (128 * MiB - 64 * KiB, 32 * MiB),
        "v7x": (64 * MiB - 64 * KiB, 32 * MiB),
    },
}
# The libtpu whose figures hold when the compiler's version is not known (no worker asked).
DEFAULT_LIBTPU = TESTED["0.10.2"]


def facts_for(table: dict[str, Any], libtpu: str | None) -> Any:
    """The entry of `table` (keyed by the libtpu version from which it holds) for `libtpu`:
    the newest key not after it; the oldest entry for a libtpu older than every key."""
    ordered = sorted(table, key=key)
    wanted = key(libtpu or DEFAULT_LIBTPU)
    found = ordered[0]
    for start in ordered:
        if key(start) <= wanted:
            found = start
    return table[found]


def chip_figures(name: str, libtpu: str | None) -> tuple[int, int] | None:
    """(capacity, scoped limit) of chip `name` as `libtpu` prints them; None for an unknown chip."""
    figures = facts_for(CHIP_FIGURES, libtpu)
    return figures.get(name)
