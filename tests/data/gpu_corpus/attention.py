"""jax's fused flash attention for GPUs (jax.experimental.pallas.ops.gpu.attention), Triton, as
jax's tests/pallas/gpu_ops_test.py calls it: q, k, v of [batch, seq_len, num_heads, head_dim] in
f16, no segment ids, BlockSizes of 64 and 128; `mha`'s own num_stages (2 unless given)."""

import jax
from jax.experimental.pallas.ops.gpu import attention


# vmem: mha(f16[2, 384, 2, 64], f16[2, 384, 2, 64], f16[2, 384, 2, 64], block_q=64, block_k=128)
# vmem: mha(f16[2, 384, 2, 128], f16[2, 384, 2, 128], f16[2, 384, 2, 128], block_q=128, block_k=128)
# vmem: mha(f16[2, 384, 2, 128], f16[2, 384, 2, 128], f16[2, 384, 2, 128], block_q=128, block_k=128, num_stages=3)
# vmem: mha(f16[2, 384, 2, 128], f16[2, 384, 2, 128], f16[2, 384, 2, 128], block_q=128, block_k=128, num_stages=4)
def mha(q, k, v, block_q=128, block_k=128, causal=False, num_stages=2):
    """The forward kernel: q's tile held across a loop over k and v tiles, pipelined num_stages
    deep. The third example overflows the L4 only, the fourth every GPU."""
    blocks = attention.BlockSizes(block_q=block_q, block_k=block_k)
    return attention.mha(q, k, v, segment_ids=None, causal=causal, block_sizes=blocks, num_stages=num_stages)


# vmem: mha_backward(f16[1, 384, 2, 64], f16[1, 384, 2, 64], f16[1, 384, 2, 64], block=64)
# vmem: mha_backward(f16[2, 384, 2, 128], f16[2, 384, 2, 128], f16[2, 384, 2, 128], block=128)
def mha_backward(q, k, v, block=64, causal=False):
    """jax.grad through mha, as test_fused_attention_bwd: the forward with its residuals, the
    preprocess and the fused backward kernel (two loops: dK and dV, then dQ). The second example
    overflows the B200 and the L4 only."""
    blocks = attention.BlockSizes(
        block_q=block,
        block_k=block,
        block_q_dkv=block,
        block_kv_dkv=block,
        block_q_dq=block,
        block_kv_dq=block,
    )

    def loss(q, k, v):
        return attention.mha(q, k, v, segment_ids=None, causal=causal, block_sizes=blocks).sum()

    return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)
