"""One add kernel, called on the example's arguments (plain) and on a value the
program makes (produced). Compiled alone both need 24.00M of v5e's 16.00M scoped
VMEM; in its program, XLA keeps produced's first operand whole in VMEM and the
kernel needs 16.00M (bench/MODEL.md, isolated against whole program)."""
import jax
from jax.experimental import pallas as pl


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def add(x, y, rows=512):
    n, m = y.shape
    return pl.pallas_call(
        add_kernel,
        out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype),
        grid=(n // rows,),
        in_specs=[pl.BlockSpec((rows, m), lambda i: (i, 0))] * 2,
        out_specs=pl.BlockSpec((rows, m), lambda i: (i, 0)),
    )(x, y)


# vmem: plain(f32[8192, 2048], f32[8192, 2048])
def plain(x, y):
    return add(x, y)


# vmem: produced(f32[8192, 2048])
def produced(x):
    return add(x * 2 + 1, x)
