"""jax's own Pallas TPU kernels (jax/experimental/pallas/ops/tpu) as test
subjects: an overflowing `# vmem:` example for each file whose kernels can be
made to overflow here, and a copy of the file with its example appended.
Shared by tests/test_edits_on_jax_ops.py and scripts/capture_golden.py."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

OPS = Path(importlib.util.find_spec("jax").submodule_search_locations[0]) / "experimental/pallas/ops/tpu"
TARGET = "v5e"  # 16 MiB of scoped VMEM by default: the cheapest chip to overflow

# The example appended to a copy of each file: every one overflows v5e's
# scoped VMEM, and each compiles in seconds here (2 cores).
EXAMPLES = {
    "example_kernel.py": "double(f32[2048, 2048])",
    "matmul.py": "matmul(bf16[4096, 4096], bf16[4096, 4096], block_shape=(1024, 1024), block_k=1024)",
    "flash_attention.py": (
        "flash_attention(bf16[1, 1, 2048, 128], bf16[1, 1, 2048, 128], bf16[1, 1, 2048, 128], "
        "block_sizes=BlockSizes(block_q=2048, block_k_major=2048, block_k=2048, block_b=1))"
    ),
    "megablox/gmm.py": "gmm(bf16[4096, 2048], bf16[8, 2048, 2048], s32[8], tiling=(1024, 1024, 1024))",
    "paged_attention/paged_attention_kernel.py": (
        "paged_attention(bf16[1, 8, 128], bf16[1, 256, 128, 128], bf16[1, 256, 128, 128], s32[1], s32[1, 256], "
        "pages_per_compute_block=256)"
    ),
    "ragged_paged_attention/kernel.py": (
        "ragged_paged_attention(bf16[256, 8, 128], bf16[512, 128, 2, 128], s32[8], s32[8, 128], s32[9], s32[1], "
        "num_kv_pages_per_block=128, num_queries_per_block=8)"
    ),
    "splash_attention/splash_attention_kernel.py": (
        "make_splash_mha_single_device(mask_lib.MultiHeadMask([mask_lib.FullMask((4096, 4096))] * 8), "
        "block_sizes=BlockSizes(block_q=2048, block_kv=2048))(bf16[8, 4096, 128], bf16[8, 4096, 128], "
        "bf16[8, 4096, 128])"
    ),
}


def copy_with_example(name: str, example: str, folder: Path) -> Path:
    """A copy of the jax file with the example appended. A copy imports like
    the original only because these files use absolute imports."""
    source = (OPS / name).read_text()
    assert not re.search(r"^\s*from\s+\.", source, re.M), f"{name} has relative imports"
    path = folder / ("jax_" + name.replace("/", "_"))
    path.write_text(source + f"\n# vmem: {example}\n")
    return path
