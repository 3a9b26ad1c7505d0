"""Examples for bench/bench_check_overhead.py: jax's own TPU flash attention,
forward and backward, called as jax's tests call it (big enough blocks that
each compile takes real time)."""

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.flash_attention import BlockSizes, flash_attention

BLOCKS = BlockSizes(
    block_q=512,
    block_k_major=512,
    block_k=512,
    block_b=1,
    block_q_major_dkv=512,
    block_k_major_dkv=512,
    block_k_dkv=512,
    block_q_dkv=512,
    block_k_major_dq=512,
    block_k_dq=512,
    block_q_dq=512,
)


# vmem: forward(bf16[2, 8, 4096, 128], bf16[2, 8, 4096, 128], bf16[2, 8, 4096, 128])
def forward(q, k, v):
    return flash_attention(q, k, v, causal=True, block_sizes=BLOCKS)


# vmem: backward(bf16[2, 8, 4096, 128], bf16[2, 8, 4096, 128], bf16[2, 8, 4096, 128])
def backward(q, k, v):
    def loss(q, k, v):
        return flash_attention(q, k, v, causal=True, block_sizes=BLOCKS).astype(jnp.float32).sum()

    return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)
