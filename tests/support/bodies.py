"""Kernel bodies traced for the tests that read them (the body account, the live values):
the jaxpr of the one pallas_call a function makes."""

from __future__ import annotations

import jax
from jax.experimental import pallas as pl


def kernel_jaxpr(f, *shapes):
    """The kernel body of the one pallas_call `f` makes, traced for `shapes` ((shape, dtype), ...)."""
    from vmem_lsp.compile.tracing import pallas_equations

    args = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in shapes]
    [eqn] = pallas_equations(jax.make_jaxpr(f)(*args).jaxpr)
    return eqn.params["jaxpr"]


def on_rows(kernel, rows: int = 512, cols: int = 1024):
    """`kernel` over (rows, cols) blocks of an array of whole rows, one block a grid step."""

    def f(x):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(x.shape[0] // rows,),
            in_specs=[pl.BlockSpec((rows, cols), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((rows, cols), lambda i: (i, 0)),
        )(x)

    return f
