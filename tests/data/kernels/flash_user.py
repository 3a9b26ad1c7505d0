from jax.experimental.pallas.ops.tpu.flash_attention import flash_attention, BlockSizes

# vmem: flash_attention(bf16[1, 8, 8192, 128], bf16[1, 8, 8192, 128], bf16[1, 8, 8192, 128], block_sizes=BlockSizes(block_q=4096, block_k_major=4096, block_k=4096, block_b=1))
