"""A Triton matmul for NVIDIA GPUs: each program multiplies a row block of x by a column block of
y over the whole K. With 128-wide blocks of f16[2048, 512] x f16[512, 2048], the two blocks
Triton stages in shared memory take 256 KiB, over the 227 KiB an H100 gives one block; 64-wide
blocks fit. Checked for a GPU with `vmem-lsp check examples/gpu_matmul.py --target h100`
(docs/gpu.md): no GPU needed, only jax's CUDA plugin. TPU targets leave it alone (VMEM015)."""
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def gpu_matmul_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)


# vmem: gpu_matmul(f16[2048, 512], f16[512, 2048], block=128)
def gpu_matmul(x, y, block=64):
    (m, k), (_, n) = x.shape, y.shape
    return pl.pallas_call(
        gpu_matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // block, n // block),
        in_specs=[
            pl.BlockSpec((block, k), lambda i, j: (i, 0)),
            pl.BlockSpec((k, block), lambda i, j: (0, j)),
        ],
        out_specs=pl.BlockSpec((block, block), lambda i, j: (i, j)),
        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=2),
    )(x, y)
