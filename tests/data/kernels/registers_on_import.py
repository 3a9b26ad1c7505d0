"""A kernel module that registers a type of another module as a pytree when
imported, as jax's own threefry kernel registers its PRNG: running the module
a second time in one process raises (duplicate registration)."""
import fractions

import jax
from jax.experimental import pallas as pl

jax.tree_util.register_pytree_node(fractions.Fraction, lambda f: ((), (f.numerator, f.denominator)),
                                   lambda aux, _: fractions.Fraction(*aux))


def double_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


# vmem: double(f32[1024, 1024])
def double(x):
    n, m = x.shape
    return pl.pallas_call(
        double_kernel,
        out_shape=jax.ShapeDtypeStruct((n, m), x.dtype),
        grid=(n // 256,),
        in_specs=[pl.BlockSpec((256, m), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((256, m), lambda i: (i, 0)),
    )(x)
