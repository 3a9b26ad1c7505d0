"""Per-chip facts: how to get a compile-only device, and what VMEM it has.

Capacities and scoped limits are as the compiler prints them in its reports
(tests/data/reports holds captured ones: "127.94M" of v6e, "16.00M" scoped on
v5e); they are used for messages and for the static model when no compiler
report says otherwise. They depend on the libtpu (v7x lost 64 KiB): versions.py
keeps them per libtpu version, and `chip(name, libtpu)` gives that compiler's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..versions import DEFAULT_LIBTPU, chip_figures

MiB = 1 << 20


@dataclass(frozen=True)
class Chip:
    name: str  # what users write: "v6e"
    topology: str  # what get_topology_desc accepts
    device_kind: str  # what the device reports
    capacity: int  # VMEM bytes the compiler can use (as it prints it)
    scoped_limit: int  # default scoped VMEM limit without vmem_limit_bytes

    @property
    def label(self) -> str:
        return f"TPU {self.name}"


# name, topology, device kind; the figures of the libtpu assumed when none is known.
_NAMES = (
    ("v4", "v4:2x2x1", "TPU v4"),
    ("v5e", "v5e:2x2", "TPU v5 lite"),
    ("v5p", "v5p:2x2x1", "TPU v5"),
    ("v6e", "v6e:2x2", "TPU v6 lite"),
    ("v7x", "tpu7x:2x2x1", "TPU7x"),
)


def _with_figures(name: str, topology: str, kind: str, libtpu: str | None) -> Chip:
    capacity, scoped = chip_figures(name, libtpu) or (0, 0)
    return Chip(name, topology, kind, capacity, scoped)


CHIPS: dict[str, Chip] = {n: _with_figures(n, t, k, DEFAULT_LIBTPU) for n, t, k in _NAMES}

DEFAULT_TARGETS = ("v5e", "v6e")


def chip(name: str, libtpu: str | None = None) -> Chip:
    """The chip called `name` (case-insensitive; "tpu7x" is accepted for v7x), with the
    capacity and scoped limit `libtpu` prints (None: the default libtpu's)."""
    key = name.strip().lower()
    key = {"tpu7x": "v7x", "v5litepod": "v5e", "v6lite": "v6e"}.get(key, key)
    if key not in CHIPS:
        raise ValueError(f"unknown target {name!r}: choose from {', '.join(CHIPS)}")
    found = CHIPS[key]
    if libtpu is None:
        return found
    capacity, scoped = chip_figures(found.name, libtpu) or (found.capacity, found.scoped_limit)
    return replace(found, capacity=capacity, scoped_limit=scoped)


@dataclass(frozen=True)
class Peak:
    """What a chip can do at best, from Google's published specifications, for
    the roofline that screens configs before the compiler estimates them
    (sweep/rank.py): only the ratio of the two matters there, within one chip."""

    flops: float  # bf16 FLOP/s of the chip
    hbm: float  # HBM bytes/s of the chip
    source: str


PEAKS: dict[str, Peak] = {
    "v4": Peak(275e12, 1228e9, "https://cloud.google.com/tpu/docs/v4"),
    "v5e": Peak(197e12, 819e9, "https://cloud.google.com/tpu/docs/v5e"),
    "v5p": Peak(459e12, 2765e9, "https://cloud.google.com/tpu/docs/v5p"),
    "v6e": Peak(918e12, 1640e9, "https://cloud.google.com/tpu/docs/v6e"),
    "v7x": Peak(2307e12, 7370e9, "https://cloud.google.com/tpu/docs/tpu7x"),
}
