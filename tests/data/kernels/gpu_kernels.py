"""Pallas kernels for NVIDIA GPUs, checked without a GPU (vmem-lsp's tests)."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def matmul_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)


# vmem: triton_matmul(f32[1024, 512], f32[512, 1024], block=64)
# vmem: triton_matmul(f32[1024, 512], f32[512, 1024], block=128)
def triton_matmul(x, y, block=128):
    (m, k), (_, n) = x.shape, y.shape
    return pl.pallas_call(
        matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(m // block, n // block),
        in_specs=[
            pl.BlockSpec((block, k), lambda i, j: (i, 0)),
            pl.BlockSpec((k, block), lambda i, j: (0, j)),
        ],
        out_specs=pl.BlockSpec((block, block), lambda i, j: (i, j)),
        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=3),
    )(x, y)


def add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


# vmem: mosaic_copy(f32[4096, 128], rows=256)
# vmem: mosaic_copy(f32[4096, 128], rows=32)
def mosaic_copy(x, rows=64):
    n, m = x.shape
    return pl.pallas_call(
        add_one,
        out_shape=jax.ShapeDtypeStruct((n, m), jnp.float32),
        grid=(n // rows,),
        in_specs=[pl.BlockSpec((rows, m), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((rows, m), lambda i: (i, 0)),
    )(x)


def fp8_dot_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)  # an fp8 dot


# vmem: fp8_dot(f8e4m3fn[64, 64], f8e4m3fn[64, 64])
def fp8_dot(x, y):
    return pl.pallas_call(
        fp8_dot_kernel,
        out_shape=jax.ShapeDtypeStruct((64, 64), jnp.float32),
        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=1),
    )(x, y)
