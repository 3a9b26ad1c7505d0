"""The TPU family's part of the worker process (family.WorkerSide): libtpu's deviceless
topology of a chip, the scoped VMEM limit as a compile option, one pallas_call compiled
alone (with libtpu's static cycle estimate read after it, in a worker started with
--estimate), and what the layout model cannot see in its body (body.py).

Imports jax; only the worker process loads this module.
"""

from __future__ import annotations

import math
import time

from jax.experimental import topologies

from ..compile.kernels import error_text, lower_and_compile, no_phase, raised_in_body
from ..compile.tracing import extra
from ..family import Verdict
from . import loop_cycles, profile
from .body import kept_values, large_values
from .chips import chip


def install() -> None:
    """Nothing of its own: pallas' BlockSpec, memory refs and run_scoped are stamped by the core."""


def devices(target: str) -> tuple:
    """Every device of the chip's deviceless topology (a host's chips, as jax.devices() lists them)."""
    return tuple(topologies.get_topology_desc(platform="tpu", topology_name=chip(target).topology).devices)


def missing(target: str, said: str) -> str:
    if "Invalid TPU external name" in said:  # a libtpu older than the chip
        return f"no TPU compiler for {target}: this libtpu does not know {target} ({said.splitlines()[0]})"
    return (
        f"no TPU compiler for {target}: libtpu is not available here (install jax[tpu] on Linux, or use --no-compile)"
    )


def fresh_process(device) -> bool:
    return False


def compiler_options(scoped_limit: int | None) -> dict | None:
    """The compiler's scoped VMEM limit for kernels that set none themselves (whole KiB)."""
    return {"xla_tpu_scoped_vmem_limit_kib": scoped_limit // 1024} if scoped_limit else None


def prepare(target: str, spills: bool) -> None:
    pass


def verdict_key() -> tuple:
    return ()


def compile(eqn, device, compiler_options: dict | None, on_phase=no_phase, params: dict | None = None) -> Verdict:
    """libtpu's verdict on one pallas_call; in a worker started with --estimate, with its
    static cycle estimate (the profile of this compile alone: earlier ones are forgotten)."""
    # Ours, before the compile: an error here is a bug of vmem-lsp's (the worker says so, and it is
    # never cached), not the compiler's verdict on the kernel.
    profile.forget()
    grid = tuple((params or eqn.params)["grid_mapping"].grid)
    if profile.enabled() and all(isinstance(extent, int) for extent in grid):
        profile.note_steps(math.prod(grid))
    started = time.perf_counter()
    try:
        lower_and_compile(eqn, device, compiler_options, on_phase, params)
    except Exception as error:  # the compiler's verdict, whatever its type
        return Verdict(False, error_text(error), raised_in_body(error), time.perf_counter() - started)
    cycles, why = profile.estimate_of() if profile.enabled() else (None, None)
    return Verdict(True, None, None, time.perf_counter() - started, cycles, why)


def count_loops(eqn, estimate: Verdict, prefetch: list | None, compile_with) -> Verdict:
    """libtpu's estimate leaves a loop of run-time length out: its trips counted from the
    example's values (trips.py), each at what one more trip costs (loops.py), added."""
    return loop_cycles.counted(eqn, estimate, prefetch, compile_with)


def call_facts(eqn) -> dict:
    """What the layout model cannot place in VMEM, read from the body: its largest staged
    values, the temporaries live at once and the body accounts (CapturedCall.unseen)."""
    body = eqn.params["jaxpr"]
    return {"unseen": (*extra(large_values, (), body), *extra(kept_values, (), body))}
