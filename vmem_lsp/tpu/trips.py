"""How many times a kernel's loops of run-time length run, from the example's own values: the
scalar part of the kernel body (program ids, the scalar-prefetched arrays in SMEM, the
scalars computed from them, the loops and branches they steer) evaluated on the host, grid
step by grid step in order, as the chip runs them; the vector work is skipped. Ragged paged
attention loops over its sequences and their kv blocks by `cu_q_lens`, `kv_lens` and
`num_seqs`, and carries where it stopped from one grid step to the next in an SMEM array.

Gives up, saying why, where a loop's test depends on what it does not evaluate (a value read
from VMEM, a DMA's result) or the count runs past a bound. Imports jax; only the worker
process loads this module.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import jax
import numpy as np

from ..compile import jax_compat
from ..compile.known_values import UNKNOWN, evaluate
from .loops import Step

# The most equations evaluated for one kernel's count: a long grid of many sequences stays
# well under it (ragged paged attention, 64 sequences, 512 grid steps: about 10^6).
MOST_EQUATIONS = 20_000_000
# A value larger than this is vector work, not steering: skipped.
MOST_ELEMENTS = 4096


class CannotCount(Exception):
    """The trips are not known from the example's values; the message says why."""


@dataclass
class SmemArray:
    """A scalar-prefetched array the kernel reads and may write, as the chip's SMEM holds it."""

    values: np.ndarray


class Counter:
    """One kernel's count: the loops to count (their paths), the grid, the SMEM arrays."""

    def __init__(self, grid: tuple[int, ...], counted: set[tuple[Step, ...]]):
        self.grid = grid
        self.counted = counted
        self.trips = {path: 0 for path in counted}
        self.evaluated = 0
        self.at: tuple[int, ...] = ()

    def run(self, jaxpr, consts, args, prefix: tuple[Step, ...]) -> list:
        env: dict = {}

        def read(var):
            if isinstance(var, jax_compat.Literal):
                return np.asarray(var.val)
            return env.get(var, UNKNOWN)

        for var, value in itertools.chain(zip(jaxpr.constvars, consts), zip(jaxpr.invars, args, strict=True)):
            env[var] = value
        for at, eqn in enumerate(jaxpr.eqns):
            self.evaluated += 1
            if self.evaluated > MOST_EQUATIONS:
                raise CannotCount(f"counting took over {MOST_EQUATIONS:,} steps of the kernel's scalar work")
            values = [read(v) for v in eqn.invars]
            outs = self.equation(eqn, values, (*prefix, (at, None, None)))
            for var, value in zip(eqn.outvars, outs, strict=True):
                env[var] = value
        return [read(v) for v in jaxpr.outvars]

    def equation(self, eqn, values: list, here: tuple[Step, ...]) -> list:
        name, params = eqn.primitive.name, eqn.params
        unknown = [UNKNOWN] * len(eqn.outvars)
        if name == "program_id":
            return [np.int32(self.at[params["axis"]])]
        if name == "num_programs":
            return [np.int32(self.grid[params["axis"]])]
        if name == "get":
            return [self.read_ref(values[0], params["tree"], values[1:])]
        if name == "swap":
            old = self.read_ref(values[0], params["tree"], values[2:])
            self.write_ref(values[0], params["tree"], values[2:], values[1])
            return [old]
        if name == "while":
            return self.loop(eqn, values, here)
        if name == "cond":
            return self.branch(eqn, values, here)
        if (key := jax_compat.CALLS.get(name, "jaxpr" if name == "run_scoped" else None)) is not None:
            inner = params[key]
            inner_jaxpr, consts = getattr(inner, "jaxpr", inner), getattr(inner, "consts", ())
            args = values if name != "run_scoped" else values + [UNKNOWN] * (len(inner_jaxpr.invars) - len(values))
            outs = self.run(inner_jaxpr, consts, args, (*here[:-1], (here[-1][0], key, None)))
            return outs if name != "run_scoped" else outs[: len(eqn.outvars)]
        if any(v is UNKNOWN or isinstance(v, SmemArray) for v in values):
            return unknown
        if any(math.prod(getattr(v.aval, "shape", ())) > MOST_ELEMENTS for v in eqn.outvars):
            return unknown  # vector work: not what steers the loops
        return evaluate(eqn, values) or unknown

    def index(self, tree, leaves: list):
        """A NumPy index from a ref's indexer (scalars and slices); None where it is not one."""
        if any(v is UNKNOWN for v in leaves):
            return None
        try:
            transforms = jax.tree_util.tree_unflatten(
                tree, [np.asarray(v).item() if np.ndim(v) == 0 else v for v in leaves]
            )
        except Exception:
            return None
        if not transforms:
            return ()
        if len(transforms) != 1 or not hasattr(transforms[0], "indices"):
            return None
        found: list = []
        for part in transforms[0].indices:
            if hasattr(part, "start") and hasattr(part, "size"):
                stride = getattr(part, "stride", 1) or 1
                start = int(np.asarray(part.start))
                found.append(slice(start, start + int(part.size) * stride, stride))
            else:
                found.append(np.asarray(part))
        return tuple(found)

    def read_ref(self, ref, tree, leaves: list):
        if not isinstance(ref, SmemArray):
            return UNKNOWN
        at = self.index(tree, leaves)
        return UNKNOWN if at is None else np.array(ref.values[at])

    def write_ref(self, ref, tree, leaves: list, value) -> None:
        if not isinstance(ref, SmemArray):
            return
        at = self.index(tree, leaves)
        if at is None or value is UNKNOWN:
            raise CannotCount("the kernel writes its scalar-prefetched array with a value not known from the example")
        ref.values[at] = value

    def loop(self, eqn, values: list, here: tuple[Step, ...]) -> list:
        params = eqn.params
        cond_n, body_n = params["cond_nconsts"], params["body_nconsts"]
        cond, body = params["cond_jaxpr"], params["body_jaxpr"]
        cond_consts, body_consts = values[:cond_n], values[cond_n : cond_n + body_n]
        carry = values[cond_n + body_n :]
        inside = (*here[:-1], (here[-1][0], "body_jaxpr", None))
        counted = here in self.counted  # a loop bounded in the code runs too: it may write the SMEM arrays
        while True:
            [go] = self.run(
                cond.jaxpr, cond.consts, [*cond_consts, *carry], (*here[:-1], (here[-1][0], "cond_jaxpr", None))
            )
            if go is UNKNOWN:
                raise CannotCount(
                    "a loop's test depends on a value that is not known from the example (not scalar work)"
                )
            if not bool(go):
                return carry
            if counted:
                self.trips[here] += 1
            carry = self.run(body.jaxpr, body.consts, [*body_consts, *carry], inside)

    def branch(self, eqn, values: list, here: tuple[Step, ...]) -> list:
        which, operands = values[0], values[1:]
        branches = eqn.params["branches"]
        if which is UNKNOWN:
            if any(self.holds_counted((*here[:-1], (here[-1][0], "branches", i))) for i in range(len(branches))):
                raise CannotCount("a branch around a loop depends on a value that is not known from the example")
            return [UNKNOWN] * len(eqn.outvars)
        chosen = int(np.clip(np.asarray(which), 0, len(branches) - 1))
        branch = branches[chosen]
        return self.run(branch.jaxpr, branch.consts, operands, (*here[:-1], (here[-1][0], "branches", chosen)))

    def holds_counted(self, prefix: tuple[Step, ...]) -> bool:
        return any(path[: len(prefix)] == prefix for path in self.counted)


def count_trips(
    kernel_jaxpr, grid: tuple[int, ...], prefetch: list, loops: list[tuple[Step, ...]]
) -> dict[tuple[Step, ...], int]:
    """Each loop's trips over the whole grid (its steps in row-major order, as the chip runs an
    "arbitrary" grid), the kernel's scalar-prefetched arrays (`prefetch`, NumPy values, in
    order) as the example gives them. CannotCount where they are not known."""
    if any(g <= 0 for g in grid):
        raise CannotCount("the grid's size is known only at run time")
    if any(value is None or value is UNKNOWN for value in prefetch):
        raise CannotCount(
            "the example gives the kernel's scalar-prefetched arrays as shapes: given as values "
            "(NumPy arrays), the loops' trips are counted from them"
        )
    counter = Counter(grid, set(loops))
    smem = [SmemArray(np.array(value, copy=True)) for value in prefetch]
    rest = [UNKNOWN] * (len(kernel_jaxpr.invars) - len(smem))
    for at in itertools.product(*(range(g) for g in grid)):
        counter.at = at
        counter.run(kernel_jaxpr, (), [*smem, *rest], ())
    return counter.trips
