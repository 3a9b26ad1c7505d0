"""Examples for bench/bench_check_overhead.py: jax's own Pallas TPU kernels,
the overflowing examples tests/support/jax_ops.py appends to copies of them
(each overflows v5e's scoped VMEM) and fitting ones beside them."""

from jax.experimental.pallas.ops.tpu.flash_attention import BlockSizes, flash_attention
from jax.experimental.pallas.ops.tpu.matmul import matmul
from jax.experimental.pallas.ops.tpu.megablox.gmm import gmm
from jax.experimental.pallas.ops.tpu.paged_attention.paged_attention_kernel import paged_attention
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as mask_lib

__all__ = ["flash_attention", "gmm", "matmul", "paged_attention"]  # the examples' callees


def splash_mha(q, k, v, block):
    mask = mask_lib.MultiHeadMask([mask_lib.CausalMask((q.shape[1], k.shape[1]))] * q.shape[0])
    sizes = splash.BlockSizes(block_q=block, block_kv=block)
    return splash.make_splash_mha_single_device(mask, block_sizes=sizes)(q, k, v)


FLASH_OVER = BlockSizes(block_q=2048, block_k_major=2048, block_k=2048, block_b=1)
FLASH_FITS = BlockSizes(block_q=512, block_k_major=512, block_k=512, block_b=1)


# vmem: matmul(bf16[4096, 4096], bf16[4096, 4096], block_shape=(1024, 1024), block_k=1024)
# vmem: matmul(bf16[4096, 4096], bf16[4096, 4096], block_shape=(512, 512), block_k=512)
# vmem: flash_attention(bf16[1, 1, 2048, 128], bf16[1, 1, 2048, 128], bf16[1, 1, 2048, 128], block_sizes=FLASH_OVER)
# vmem: flash_attention(bf16[2, 8, 2048, 128], bf16[2, 8, 2048, 128], bf16[2, 8, 2048, 128], block_sizes=FLASH_FITS)
# vmem: gmm(bf16[4096, 2048], bf16[8, 2048, 2048], s32[8], tiling=(1024, 1024, 1024))
# vmem: gmm(bf16[4096, 2048], bf16[8, 2048, 2048], s32[8], tiling=(512, 512, 512))
# vmem: paged_attention(bf16[1, 8, 128], bf16[1, 256, 128, 128], bf16[1, 256, 128, 128], s32[1], s32[1, 256], pages_per_compute_block=256)
# vmem: paged_attention(bf16[1, 8, 128], bf16[1, 256, 128, 128], bf16[1, 256, 128, 128], s32[1], s32[1, 256], pages_per_compute_block=16)
# vmem: splash_mha(bf16[8, 4096, 128], bf16[8, 4096, 128], bf16[8, 4096, 128], 2048)
# vmem: splash_mha(bf16[8, 4096, 128], bf16[8, 4096, 128], bf16[8, 4096, 128], 512)
def examples():
    """The examples above, on the kernels this module imports."""
