"""jax's decode attention for GPUs (jax.experimental.pallas.ops.gpu.decode_attention), Triton, as
jax's tests/pallas/gpu_attention_test.py calls it: one query token per sequence, q [batch,
num_heads, head_dim], k and v [batch, seq_len, head_dim] (gqa: [batch, seq_len, num_kv_heads,
head_dim]) in f16, the kernels' own block_h, block_k, k_splits and num_stages unless given."""

from jax.experimental.pallas.ops.gpu import decode_attention


# vmem: mqa(f16[2, 2, 64], f16[2, 1024, 64], f16[2, 1024, 64])
# vmem: mqa(f16[1, 16, 128], f16[1, 2048, 128], f16[1, 2048, 128], block_k=256, k_splits=8)
# vmem: mqa(f16[1, 16, 128], f16[1, 2048, 128], f16[1, 2048, 128], block_k=256, k_splits=8, num_stages=3)
def mqa(q, k, v, block_h=16, block_k=256, k_splits=16, num_stages=2):
    """Multi-query attention: each head block's q held across a loop over k and v tiles of one
    split of the sequence. The second example overflows the L4 only, the third every GPU."""
    return decode_attention.mqa(q, k, v, block_h=block_h, block_k=block_k, k_splits=k_splits, num_stages=num_stages)


# vmem: mqa_ragged(f16[2, 8, 64], f16[2, 1024, 64], f16[2, 1024, 64], s32[2], s32[2])
def mqa_ragged(q, k, v, start_idx, kv_seq_len, block_k=256, k_splits=16):
    """mqa with each sequence's start and length: the loop runs under a lax.cond."""
    return decode_attention.mqa(q, k, v, start_idx, kv_seq_len, block_k=block_k, k_splits=k_splits)


# vmem: gqa(f16[1, 16, 64], f16[1, 1024, 4, 64], f16[1, 1024, 4, 64])
def gqa(q, k, v, block_h=16, block_k=128, k_splits=16):
    """Grouped-query attention: four query heads per k/v head."""
    return decode_attention.gqa(q, k, v, block_h=block_h, block_k=block_k, k_splits=k_splits)
