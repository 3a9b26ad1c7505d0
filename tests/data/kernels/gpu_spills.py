"""A Pallas Triton kernel that spills registers on the A100, and one that does not
(vmem-lsp's tests of `check --spills`, tests/test_gpu_spills.py).

One warp holds a whole f32 (64, 64) accumulator, 128 values a thread beside the operands'
fragments: ptxas gives it 255 registers and spills the rest to local memory. Four warps
share the same block without spilling. Measured with ptxas 12.9 (nvidia-cuda-nvcc-cu12
12.9.86) through jax 0.10.2's CUDA plugin, no GPU."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def matmul_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)


# vmem: one_warp_matmul(f32[64, 64], f32[64, 64])
def one_warp_matmul(x, y):
    return pl.pallas_call(
        matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((64, 64), jnp.float32),
        compiler_params=pltriton.CompilerParams(num_warps=1, num_stages=1),
    )(x, y)


def roomy_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)


# vmem: four_warp_matmul(f32[64, 64], f32[64, 64])
def four_warp_matmul(x, y):
    return pl.pallas_call(
        roomy_kernel,
        out_shape=jax.ShapeDtypeStruct((64, 64), jnp.float32),
        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=1),
    )(x, y)
