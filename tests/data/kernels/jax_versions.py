"""A kernel whose verdict depends on the compiler's version (`check --jax`): an s8[64,128]
copy in (8, 128) blocks passes jax's own block check on every version, but libtpu
0.0.42.1 (jax 0.10.2) refuses it (int8 tiles are (32, 128)), while libtpu 0.0.50.1
(jax 0.12.0.1) compiles it. scripts/capture_reports.py captures the same kernel as
block-shape-mosaic-v6e."""
import jax
from jax.experimental import pallas as pl


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


# vmem: int8_rows(s8[64, 128])
def int8_rows(x):
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(
        copy_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(8,),
        in_specs=[spec],
        out_specs=spec,
    )(x)


# Overflows alike with both: input and output windows of f32[4096, 4096] need 128.00M, 64K more
# than a v6e core's VMEM, whichever libtpu says so.
# vmem: whole_copy(f32[4096, 4096])
def whole_copy(x):
    spec = pl.BlockSpec(x.shape, lambda: (0, 0))
    return pl.pallas_call(
        copy_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[spec],
        out_specs=spec,
    )(x)
