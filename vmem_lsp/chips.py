"""Per-chip facts: how to get a compile-only device, and what VMEM it has.

Capacities and scoped limits are as the compiler prints them in its reports
(tests/data/reports holds captured ones: "127.94M" of v6e, "16.00M" scoped on
v5e); they are used for messages and for the static model when no compiler
report says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

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


CHIPS: dict[str, Chip] = {
    c.name: c
    for c in (
        # v4 never printed E1001: its scoped limit is its capacity.
        Chip("v4", "v4:2x2x1", "TPU v4", 16 * MiB, 16 * MiB),
        Chip("v5e", "v5e:2x2", "TPU v5 lite", 128 * MiB, 16 * MiB),
        # v5p and v6e print capacity 64 KiB under the physical size.
        Chip("v5p", "v5p:2x2x1", "TPU v5", 64 * MiB - 64 * 1024, 16 * MiB),
        Chip("v6e", "v6e:2x2", "TPU v6 lite", 128 * MiB - 64 * 1024, 32 * MiB),
        Chip("v7x", "tpu7x:2x2x1", "TPU7x", 64 * MiB, 32 * MiB),
    )
}

DEFAULT_TARGETS = ("v5e", "v6e")


def chip(name: str) -> Chip:
    """The chip called `name` (case-insensitive; "tpu7x" is accepted for v7x)."""
    key = name.strip().lower()
    key = {"tpu7x": "v7x", "v5litepod": "v5e", "v6lite": "v6e"}.get(key, key)
    if key not in CHIPS:
        raise ValueError(f"unknown target {name!r}: choose from {', '.join(CHIPS)}")
    return CHIPS[key]
