"""Block sizes written as numbers in the BlockSpecs, and a literal grid."""
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def matmul_kernel(x_ref, y_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


# vmem: matmul(bf16[8192, 8192], bf16[8192, 8192])
def matmul(x, y):
    return pl.pallas_call(
        matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((8192, 8192), x.dtype),
        grid=(8, 8, 8),
        in_specs=[
            pl.BlockSpec((1024, 1024), lambda i, j, k: (i, k)),
            pl.BlockSpec((1024, 1024), lambda i, j, k: (k, j)),
        ],
        out_specs=pl.BlockSpec((1024, 1024), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((1024, 1024), jnp.float32)],
    )(x, y)
