"""The device a request compiles for, with no hardware attached: its target's family makes
it (Family.worker().devices: libtpu's deviceless topology of a TPU chip, a compile-only
CUDA device from a GPU's target config), kept here once per target with why none came.

Only the worker process loads this module (the families' devices import jax).
"""

from __future__ import annotations

import functools

from ..families import family_of


@functools.cache
def target_devices(target: str) -> tuple:
    """Every device of the target's deviceless topology (a host's chips, as
    `jax.devices()` lists them on that host); a GPU target's one device."""
    found = family_of(target).worker().devices(target)
    _SIBLINGS[id(found[0])] = found
    return found


def target_device(target: str):
    """The device a request traces and compiles on: its topology's first."""
    return target_devices(target)[0]


_SIBLINGS: dict[int, tuple] = {}  # id of a target device -> its topology's devices


def all_devices(device) -> tuple | None:
    """The devices of `device`'s topology, for chip_view; None for None."""
    if device is None:
        return None
    return _SIBLINGS.get(id(device), (device,))


_ERRORS: dict[str, str] = {}  # target -> why libtpu gave no device for it


def trace_device(target: str):
    """The target's compile-only device, or None where its compiler is absent (libtpu on
    macOS, jax's CUDA plugin), or does not know the target (v7x on libtpu 0.0.23: "Invalid
    TPU external name"): a trace for the layout model needs no compiler. Why is kept for
    device_error."""
    try:
        return target_device(target)
    except Exception as error:
        _ERRORS[target] = f"{type(error).__name__}: {error}".strip()
        return None


def device_error(target: str) -> str | None:
    """What the compiler said when it gave no device for `target`, if it said anything."""
    return _ERRORS.get(target)
