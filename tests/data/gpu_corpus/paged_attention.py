"""jax's paged attention for GPUs (jax.experimental.pallas.ops.gpu.paged_attention), Triton, as
jax's tests/pallas/gpu_paged_attention_test.py calls it: 5 sequences of up to 2048 tokens, q [5,
num_heads, head_dim], k and v pages [num_kv_heads, total_pages, page_size, head_dim] in f16, a
page table s32[5, pages per sequence] and the lengths s32[5]. The kernel gathers
pages_per_compute_block pages a step by the table."""

from jax.experimental.pallas.ops.gpu import paged_attention as paged


# vmem: paged_attention(f16[5, 32, 64], f16[2, 640, 16, 64], f16[2, 640, 16, 64], s32[5, 128], s32[5], block_h=16, pages_per_compute_block=8, k_splits=16)
# vmem: paged_attention(f16[5, 32, 32], f16[2, 320, 32, 32], f16[2, 320, 32, 32], s32[5, 64], s32[5], block_h=32, pages_per_compute_block=4, k_splits=4)
# vmem: paged_attention(f16[5, 32, 128], f16[2, 320, 32, 128], f16[2, 320, 32, 128], s32[5, 64], s32[5], block_h=16, pages_per_compute_block=8, k_splits=4)
# vmem: paged_attention(f16[5, 32, 128], f16[2, 320, 32, 128], f16[2, 320, 32, 128], s32[5, 64], s32[5], block_h=16, pages_per_compute_block=16, k_splits=4)
def paged_attention(q, k_pages, v_pages, block_tables, lengths, block_h=16, pages_per_compute_block=8, k_splits=16):
    """The third example (head_dim 128, 8 pages of 32 a step) overflows the L4 only, the fourth
    (16 pages a step) every GPU."""
    return paged.paged_attention(
        q,
        k_pages,
        v_pages,
        block_tables,
        lengths,
        block_h=block_h,
        pages_per_compute_block=pages_per_compute_block,
        k_splits=k_splits,
    )
