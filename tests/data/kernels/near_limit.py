"""A copy whose double-buffered f32[1056,1024] blocks ask a little more than v5e's scoped 16 MiB (16.50M)."""
import jax
from jax.experimental import pallas as pl


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0  # é


# vmem: near(f32[4224, 1024])
def near(x):
    return pl.pallas_call(
        copy_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 1056,),
        in_specs=[pl.BlockSpec((1056, 1024), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((1056, 1024), lambda i: (i, 0)),
    )(x)
