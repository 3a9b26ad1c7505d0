"""The fake family's part of the worker (family.WorkerSide): the host's CPU stands in for a
device (a trace needs one; the toy compiler needs none), and the toy compiler refuses a block
over fake_family.BLOCK_LIMIT bytes in its own words, without asking XLA."""

from __future__ import annotations

import math
import time

import jax

from support.fake_family import BLOCK_LIMIT
from vmem_lsp.compile import jax_compat
from vmem_lsp.compile.kernels import kernel_name, no_phase
from vmem_lsp.dtypes import COMPILER_DTYPES
from vmem_lsp.family import Verdict


def install() -> None:
    """No jax classes of its own to stamp."""


def devices(target: str) -> tuple:
    return tuple(jax.devices("cpu"))


def missing(target: str, said: str) -> str:
    return f"no fake compiler for {target}: {said}"


def fresh_process(device) -> bool:
    return False


def compiler_options(scoped_limit: int | None) -> dict | None:
    return None


def prepare(target: str, spills: bool) -> None:
    pass


def verdict_key() -> tuple:
    return ("fakecc",)


def compile(eqn, device, compiler_options, on_phase=no_phase, params=None) -> Verdict:
    """FAKECC: every block of the call must hold at most BLOCK_LIMIT bytes."""
    started = time.perf_counter()
    on_phase("compile", kernel_name(eqn))
    mapping = (params or eqn.params)["grid_mapping"]
    refused = []
    for n, bm in enumerate(mapping.block_mappings):
        aval = jax_compat.array_aval(bm)
        block = tuple(
            getattr(d, "block_size", d) if isinstance(getattr(d, "block_size", d), int) else 1 for d in bm.block_shape
        )
        dtype = COMPILER_DTYPES.get(aval.dtype.name, aval.dtype.name)
        size = math.prod(block) * aval.dtype.itemsize
        role, index = ("input", n) if n < mapping.num_inputs else ("output", n - mapping.num_inputs)
        if size > BLOCK_LIMIT:
            refused.append(
                f"FAKECC: {role} {index} block {dtype}[{','.join(map(str, block))}] is {size} bytes; fakechip holds {BLOCK_LIMIT}"
            )
    return Verdict(not refused, "\n".join(refused) or None, None, time.perf_counter() - started)


def count_loops(eqn, estimate: Verdict, prefetch, compile_with) -> Verdict:
    return estimate


def call_facts(eqn) -> dict:
    return {}
