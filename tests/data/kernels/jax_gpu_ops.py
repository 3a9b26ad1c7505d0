"""jax's own Pallas Triton kernels (jax.experimental.pallas.ops.gpu), with block sizes that fit
an A100's and an H100's shared memory and some that do not, for `check --no-compile` on GPUs
(tests/test_gpu_unchecked.py). The attention's key tiles are transposed before their dot, which
the shared-memory model has no rule for: compiled, the ones marked "over" are refused on both."""

from jax.experimental.pallas.ops.gpu import attention as _attention
from jax.experimental.pallas.ops.gpu import layer_norm as _layer_norm
from jax.experimental.pallas.ops.gpu import softmax as _softmax


# vmem: attention(bf16[1, 2048, 2, 128], bf16[1, 2048, 2, 128], bf16[1, 2048, 2, 128], block_q=64, block_k=64)
# vmem: attention(bf16[1, 2048, 2, 256], bf16[1, 2048, 2, 256], bf16[1, 2048, 2, 256], block_q=128, block_k=128)
# vmem: attention(f32[1, 2048, 2, 128], f32[1, 2048, 2, 128], f32[1, 2048, 2, 128], block_q=128, block_k=128)
# vmem: attention(f32[1, 2048, 2, 256], f32[1, 2048, 2, 256], f32[1, 2048, 2, 256], block_q=128, block_k=128, num_stages=3)
def attention(q, k, v, block_q=128, block_k=128, num_stages=2):
    sizes = _attention.BlockSizes(block_q=block_q, block_k=block_k)
    return _attention.mha(q, k, v, None, block_sizes=sizes, num_stages=num_stages)


# vmem: layer_norm(f32[2, 4, 8192], f32[8192], f32[8192])
def layer_norm(x, w, b):
    return _layer_norm.layer_norm(x, w, b)


# vmem: softmax(f32[16, 8192])
def softmax(x):
    return _softmax.softmax(x)
