"""The cycles a trip of a kernel's loop of run-time length costs. libtpu's static estimate
leaves such a loop out, body and all (bench/probe_loop_count.py); a loop bounded in the code
it counts trip by trip. So the kernel is traced again with the loop bounded at one trip and
at two (its enclosing loops of run-time length at one), and the difference of the two
estimates, per grid step, is what one more trip costs.

Imports jax; only the worker process loads this module.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass

from jax import lax

from ..compile import jax_compat
from ..compile.capture import counted_when_compiled
from ..compile.provenance import traceback_origin
from ..results import Origin

# A step of a path into a kernel's jaxpr: the equation's place, then which of its jaxprs
# (the param's name and, for a tuple of them such as a cond's branches, the place in it).
Step = tuple[int, str | None, int | None]


@dataclass(frozen=True)
class RunTimeLoop:
    """A while loop whose trip count the compiler does not know, where it is in the kernel."""

    path: tuple[Step, ...]  # to the while equation; its enclosing loops are its prefixes
    origin: Origin | None  # the line that makes it (lax.while_loop, fori_loop)


def run_time_loops(kernel_jaxpr) -> list[RunTimeLoop]:
    """Every loop of run-time length in the kernel body, outer ones before the loops inside them."""
    found: list[RunTimeLoop] = []

    def walk(jaxpr, prefix: tuple[Step, ...]) -> None:
        for at, eqn in enumerate(jaxpr.eqns):
            if eqn.primitive.name == "while" and not counted_when_compiled(eqn):
                found.append(RunTimeLoop((*prefix, (at, None, None)), traceback_origin(eqn.source_info.traceback)))
            for name, index, sub in inner_jaxprs(eqn):
                walk(sub, (*prefix, (at, name, index)))

    walk(kernel_jaxpr, ())
    return found


def inner_jaxprs(eqn) -> Iterator[tuple[str, int | None, object]]:
    """(param name, place in a tuple or None, the open jaxpr) of each jaxpr an equation holds."""
    for name, value in eqn.params.items():
        items = value if isinstance(value, (tuple, list)) else (value,)
        for index, item in enumerate(items):
            inner = getattr(item, "jaxpr", item)
            if hasattr(inner, "eqns") and hasattr(inner, "invars"):
                yield name, index if isinstance(value, (tuple, list)) else None, inner


def enclosing(loop: RunTimeLoop, loops: list[RunTimeLoop]) -> list[RunTimeLoop]:
    """The loops of run-time length `loop` is inside of (their bodies hold it)."""

    def holds(outer: RunTimeLoop) -> bool:
        depth = len(outer.path)
        return (
            depth < len(loop.path)
            and loop.path[: depth - 1] == outer.path[: depth - 1]
            and loop.path[depth - 1][0] == outer.path[-1][0]
        )

    return [outer for outer in loops if holds(outer)]


class NotBounded(Exception):
    """The kernel could not be traced again with the loop bounded (an op on the way in
    that this does not rebuild): the loop's cost is not measured."""


def bounded_kernel(kernel_jaxpr, bounds: dict[tuple[Step, ...], int], grid_mapping=None):
    """The kernel's jaxpr with each loop at a path in `bounds` run that many trips, a
    bound written in the code (`while i < k` from i = 0) that the compiler counts."""
    in_avals = [v.aval for v in kernel_jaxpr.invars]

    def kernel(*refs):
        return run(kernel_jaxpr, (), refs, (), bounds)

    pe, lu, api_util = jax_compat.partial_eval, jax_compat.linear_util, jax_compat.api_util
    if pe is None or lu is None or api_util is None:
        raise NotBounded("this jax has no tracer to rebuild the kernel with")
    debug = api_util.debug_info("vmem-lsp: a loop bounded", kernel, in_avals, {})
    env = grid_mapping.trace_env() if hasattr(grid_mapping, "trace_env") else contextlib.nullcontext()
    try:
        with env:
            jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(lu.wrap_init(kernel, debug_info=debug), in_avals)
    except NotBounded:
        raise
    except Exception as error:
        raise NotBounded(f"tracing the kernel again failed: {type(error).__name__}: {error}") from error
    if consts:
        raise NotBounded("the kernel traced again holds constants a pallas_call cannot take")
    return jaxpr


def run(jaxpr, consts, args, prefix: tuple[Step, ...], bounds) -> list:
    """Evaluate `jaxpr` on tracers as jax's eval_jaxpr does, rebuilding the equations on the
    way to a loop in `bounds`: that loop bounded, a cond's branches, a call inlined."""
    env: dict = {}

    def read(var):
        return var.val if isinstance(var, jax_compat.Literal) else env[var]

    for var, value in zip(jaxpr.constvars, consts, strict=True):
        env[var] = value
    for var, value in zip(jaxpr.invars, args, strict=True):
        env[var] = value
    for at, eqn in enumerate(jaxpr.eqns):
        values = [read(v) for v in eqn.invars]
        inside = [path for path in bounds if len(path) > len(prefix) and path[len(prefix)][0] == at]
        if inside:
            outs = rebuilt(eqn, values, (*prefix,), at, bounds)
        else:
            subfuns, params = bind_params(eqn)
            outs = eqn.primitive.bind(*subfuns, *values, **params)
            outs = outs if eqn.primitive.multiple_results else [outs]
        for var, value in zip(eqn.outvars, outs, strict=True):
            env[var] = value
    return [read(v) for v in jaxpr.outvars]


def bind_params(eqn) -> tuple[list, dict]:
    """What binding the equation again takes: jax before 0.9 gives (subfuns, params), later params."""
    found = eqn.primitive.get_bind_params(eqn.params)
    if isinstance(found, tuple) and len(found) == 2 and isinstance(found[1], dict):
        return list(found[0]), found[1]
    return [], found


def rebuilt(eqn, values: list, prefix: tuple[Step, ...], at: int, bounds) -> list:
    """One equation on the way to a bounded loop, made again."""
    name = eqn.primitive.name
    if name == "while":
        params = eqn.params
        cond_n, body_n = params["cond_nconsts"], params["body_nconsts"]
        body_consts, init = values[cond_n : cond_n + body_n], values[cond_n + body_n :]
        body = params["body_jaxpr"]
        here = (*prefix, (at, "body_jaxpr", None))
        trips = bounds.get((*prefix, (at, None, None)))
        if trips is None:
            raise NotBounded("a loop of run-time length around the one measured was not bounded")

        def step(carry):
            return (carry[0] + 1, *run(body.jaxpr, body.consts, [*body_consts, *carry[1:]], here, bounds))

        return list(lax.while_loop(lambda carry: carry[0] < trips, step, (0, *init))[1:])
    if name == "cond":
        index, operands = values[0], values[1:]
        branches = [
            functools.partial(branch_run, b.jaxpr, b.consts, operands, (*prefix, (at, "branches", i)), bounds)
            for i, b in enumerate(eqn.params["branches"])
        ]
        return list(lax.switch(index, branches))
    if (key := jax_compat.CALLS.get(name)) is not None:
        inner = eqn.params[key]
        inner_jaxpr, inner_consts = getattr(inner, "jaxpr", inner), getattr(inner, "consts", ())
        return run(inner_jaxpr, inner_consts, values, (*prefix, (at, key, None)), bounds)
    raise NotBounded(f"a {name} around the loop is not rebuilt")


def branch_run(jaxpr, consts, operands, prefix, bounds):
    return tuple(run(jaxpr, consts, operands, prefix, bounds))


def loop_bounds(loop: RunTimeLoop, loops: list[RunTimeLoop], trips: int) -> dict[tuple[Step, ...], int]:
    """The bounds that measure `loop`: it at `trips`, the loops around it at one trip."""
    return {**{outer.path: 1 for outer in enclosing(loop, loops)}, loop.path: trips}
