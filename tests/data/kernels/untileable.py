"""A block shape the TPU cannot tile (issue 17): (100, 100) blocks of f32[1000, 1000], where f32 tiles are (8, 128)."""
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def add(x, y, b: int = 100):
    spec = pl.BlockSpec((b, b), lambda i, j: (i, j))
    return pl.pallas_call(
        add_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // b, x.shape[1] // b),
        in_specs=[spec, spec],
        out_specs=spec,
    )(x, y)

# vmem: add(f32[1000, 1000], f32[1000, 1000])
