"""The TPU a request compiles for, with no TPU attached: libtpu's deviceless
topology of the chip (chips.py names it).

Imports jax; only the worker process loads this module.
"""

from __future__ import annotations

import functools

from jax.experimental import topologies

from ..chips import chip


@functools.cache
def target_device(target: str):
    topology = topologies.get_topology_desc(platform="tpu", topology_name=chip(target).topology)
    return topology.devices[0]


def trace_device(target: str):
    """The target's compile-only device, or None where libtpu is absent (macOS):
    a trace for the layout model needs no compiler."""
    try:
        return target_device(target)
    except Exception:
        return None
