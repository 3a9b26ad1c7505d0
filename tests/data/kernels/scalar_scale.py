"""A kernel whose example passes a 0-d array, written as the compiler writes its type: `f32[]`."""

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def scale_kernel(s_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] * s_ref[0]


# vmem: scale(f32[], f32[4096, 4096])
def scale(s, x):
    return pl.pallas_call(
        scale_kernel,
        grid=(1,),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec((4096, 4096), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((4096, 4096), lambda i: (0, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(s.reshape(1), x)
