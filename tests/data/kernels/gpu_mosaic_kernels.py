"""jax's own Mosaic GPU kernels, written with plgpu.kernel, called as their main()s call them
(vmem-lsp's tests): ragged_dot_mgpu's grouped matmul and attention_mgpu's FA3, plain and with
the warp-specialized pipeline emitter; the Hopper and Blackwell matmuls. Each has an example that
fits its GPU (the H100; the B200 for Blackwell's) and one whose shared memory does not."""

from jax.experimental.pallas.ops.gpu import attention_mgpu, blackwell_matmul_mgpu, hopper_matmul_mgpu, ragged_dot_mgpu


# vmem: grouped(f16[4096, 2048], f16[16, 2048, 4096], i32[16], block_m=128, block_n=128, steps=4)
# vmem: grouped(f16[4096, 2048], f16[16, 2048, 4096], i32[16], block_m=192, block_n=192, steps=6)
def grouped(lhs, rhs, group_sizes, block_m=128, block_n=128, steps=4):
    return ragged_dot_mgpu.ragged_dot(
        lhs,
        rhs,
        group_sizes=group_sizes,
        block_m=block_m,
        block_n=block_n,
        block_k=64,
        max_concurrent_steps=steps,
        grid_block_n=1,
    )


# vmem: fa3(f16[1, 4096, 16, 128], f16[1, 4096, 16, 128], f16[1, 4096, 16, 128], block_kv=128)
# vmem: fa3(f16[1, 4096, 16, 256], f16[1, 4096, 16, 256], f16[1, 4096, 16, 256], block_kv=256)
def fa3(q, k, v, block_kv=128):
    config = attention_mgpu.TuningConfig(block_q=64, block_kv=block_kv, max_concurrent_steps=2)
    return attention_mgpu.attention(q, k, v, config)


# vmem: fa3_emitter(f16[1, 4096, 16, 128], f16[1, 4096, 16, 128], f16[1, 4096, 16, 128], block_kv=128)
# vmem: fa3_emitter(f16[1, 4096, 16, 256], f16[1, 4096, 16, 256], f16[1, 4096, 16, 256], block_kv=256, steps=4)
def fa3_emitter(q, k, v, block_kv=128, steps=2):
    config = attention_mgpu.TuningConfig(block_q=64, block_kv=block_kv, max_concurrent_steps=steps)
    return attention_mgpu.attention_with_pipeline_emitter(q, k, v, config)


# vmem: hopper(f16[4096, 4096], f16[4096, 8192], f16[4096, 8192], tile_m=128, tile_n=128, steps=4)
# vmem: hopper(f16[4096, 4096], f16[4096, 8192], f16[4096, 8192], tile_m=256, tile_n=256, steps=6)
def hopper(a, b, c, tile_m=128, tile_n=128, steps=4):
    config = hopper_matmul_mgpu.TuningConfig(tile_m=tile_m, tile_n=tile_n, tile_k=64, max_concurrent_steps=steps)
    return hopper_matmul_mgpu.matmul(a, b, c, config)


# vmem: blackwell(f16[4096, 4096], f16[4096, 8192], tile_n=128, steps=4)
# vmem: blackwell(f16[4096, 4096], f16[4096, 8192], tile_n=256, steps=8)
def blackwell(a, b, tile_n=128, steps=4):
    config = blackwell_matmul_mgpu.TuningConfig(
        tile_m=128, tile_n=tile_n, tile_k=64, max_concurrent_steps=steps, collective=False
    )
    return blackwell_matmul_mgpu.matmul_kernel(a, b, config)
