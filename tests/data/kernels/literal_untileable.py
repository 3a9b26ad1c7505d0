"""Block sizes the TPU cannot tile, written as numbers in the BlockSpecs (issue 17):
blocks of 100 rows, where f32 tiles are (8, 128) and bf16 ones (16, 128). `add`
counts its grid as numbers; `scale` computes it from the shapes, with non-ASCII
text before the numbers on its BlockSpec's line; `square`'s blocks are 100 wide
too, each place with its own legal size and its own grid axis; `shifted` has
its grid in a PrefetchScalarGridSpec, and no multiple of 8 divides its 500 rows."""
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def add(x, y):
    return pl.pallas_call(
        add_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(10, 4),
        in_specs=[pl.BlockSpec((100, 256), lambda i, j: (i, j)), pl.BlockSpec((100, 256), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((100, 256), lambda i, j: (i, j)),
    )(x, y)

# vmem: add(f32[1000, 1024], f32[1000, 1024])


def scale_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def scale(x):
    _ñ = "ß😀𝔘"; spëc = pl.BlockSpec((100, 256), lambda i, j: (i, j))  # ü 𝔘
    return pl.pallas_call(
        scale_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 100, x.shape[1] // 256),
        in_specs=[spëc],
        out_specs=spëc,
    )(x)

# vmem: scale(bf16[1600, 1024])


def square_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * x_ref[...]


def square(x):
    spec = pl.BlockSpec((100, 100), lambda i, j: (i, j))
    return pl.pallas_call(
        square_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 100, x.shape[1] // 100),
        in_specs=[spec],
        out_specs=spec,
    )(x)

# vmem: square(f32[1000, 1280])


def shifted_kernel(s_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] + s_ref[0].astype(jnp.float32)


def shifted(x):
    return pl.pallas_call(
        shifted_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(5, 2),
            in_specs=[pl.BlockSpec((100, 256), lambda i, j, s: (i, j))],
            out_specs=pl.BlockSpec((100, 256), lambda i, j, s: (i, j)),
        ),
    )(jnp.ones((8,), jnp.int32), x)

# vmem: shifted(f32[500, 512])
