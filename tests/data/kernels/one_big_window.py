"""One window larger than a v5p core's whole VMEM: its compiler names that one
allocation against 64.00M, its usage reports against 63.94M. vmem-lsp says one
figure per chip: 63.94M."""

import jax
from jax.experimental import pallas as pl


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


# vmem: copy_all(f32[8192, 4096])
def copy_all(x):
    return pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
