"""The TPU a request compiles for, with no TPU attached: libtpu's deviceless
topology of the chip (chips.py names it); or the NVIDIA GPU, a compile-only
CUDA device made from its GpuTargetConfig (gpus.py) by jax's CUDA plugin.

Imports jax; only the worker process loads this module.
"""

from __future__ import annotations

import functools

from jax.experimental import topologies

from ..gpu.targets import gpu, is_gpu
from ..tpu.chips import chip


@functools.cache
def target_devices(target: str) -> tuple:
    """Every device of the target's deviceless topology (a host's chips, as
    `jax.devices()` lists them on that host); a GPU target's one device."""
    if is_gpu(target):
        topology = topologies.get_topology_desc(
            platform="cuda", target_config=gpu(target).target_config(), topology="1x1x1"
        )
    else:
        topology = topologies.get_topology_desc(platform="tpu", topology_name=chip(target).topology)
    found = tuple(topology.devices)
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
    """The target's compile-only device, or None where libtpu is absent (macOS), or
    does not know the chip (v7x on libtpu 0.0.23: "Invalid TPU external name"): a trace
    for the layout model needs no compiler. Why is kept for device_error."""
    try:
        return target_device(target)
    except Exception as error:
        _ERRORS[target] = f"{type(error).__name__}: {error}".strip()
        return None


def device_error(target: str) -> str | None:
    """What libtpu said when it gave no device for `target`, if it said anything."""
    return _ERRORS.get(target)
