"""One small kernel per kind of Pallas TPU compile error (issue 17).

Each function has a `# vmem:` example; compiled deviceless it fails with the
compiler's own text, which vmem-lsp shows today as VMEM011.
scripts/capture_reports.py builds its err-* cases from these functions and
tests/data/reports/ERRORS.md maps each text to the line it should land on.
"""
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


# block-jax: jax's lowering check, a (100, 100) block is neither (8, 128)-aligned nor the whole array
# vmem: add_blocks(f32[1000, 1000], f32[1000, 1000])
def add_blocks(x, y):
    spec = pl.BlockSpec((100, 100), lambda i, j: (i, j))
    return pl.pallas_call(
        add_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(10, 10),
        in_specs=[spec, spec],
        out_specs=spec,
    )(x, y)


# block-rank1: jax's lowering check on a rank-1 block that is not a multiple of 128 lanes
# vmem: add_rank1(f32[1000], f32[1000])
def add_rank1(x, y):
    spec = pl.BlockSpec((100,), lambda i: (i,))
    return pl.pallas_call(
        add_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(10,),
        in_specs=[spec, spec],
        out_specs=spec,
    )(x, y)


# block-mosaic: int8 blocks of 8 rows pass jax's (8, 128) check but not Mosaic's (32, 128) int8 tiling
# (bf16 blocks of 8 rows compile with this jax/libtpu: Mosaic tiles them (8, 128))
# vmem: copy_int8_rows(s8[64, 256])
def copy_int8_rows(x):
    spec = pl.BlockSpec((8, 256), lambda i: (i, 0))
    return pl.pallas_call(
        copy_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(8,),
        in_specs=[spec],
        out_specs=spec,
    )(x)


def shifted_kernel(x_ref, o_ref):
    start = pl.program_id(0) * 3 + 1
    o_ref[...] = x_ref[:, pl.ds(start, 128)]


# align: a dynamic lane offset the compiler cannot prove is a multiple of 128
# vmem: shifted_window(f32[8, 1024])
def shifted_window(x):
    return pl.pallas_call(
        shifted_kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype),
        grid=(4,),
        in_specs=[pl.BlockSpec(x.shape, lambda i: (0, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
    )(x)


def sort_kernel(x_ref, o_ref):
    o_ref[...] = jnp.sort(x_ref[...], axis=-1)


# prim-sort: jnp.sort has no Pallas TPU lowering
# vmem: sort_rows(f32[8, 128])
def sort_rows(x):
    return pl.pallas_call(sort_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def reshape_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...].reshape(o_ref.shape)


# prim-mosaic: a shape cast Mosaic cannot lay out (lanes of 100 folded into rows)
# vmem: fold_rows(f32[8, 100])
def fold_rows(x):
    return pl.pallas_call(reshape_kernel, out_shape=jax.ShapeDtypeStruct((4, 200), x.dtype))(x)


def int8_matmul_kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.int32)


# dtype-int8: an int8 x int8 matmul, the MXU's int8 support varies by chip (E2001)
# vmem: int8_matmul(s8[256, 256], s8[256, 256])
def int8_matmul(a, b):
    return pl.pallas_call(
        int8_matmul_kernel, out_shape=jax.ShapeDtypeStruct((a.shape[0], b.shape[1]), jnp.int32))(a, b)


def fp8_matmul_kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)


# dtype-fp8: a float8_e4m3fn matmul, the MXU's fp8 support varies by chip (E2001)
# vmem: fp8_matmul(f8e4m3fn[256, 256], f8e4m3fn[256, 256])
def fp8_matmul(a, b):
    return pl.pallas_call(
        fp8_matmul_kernel, out_shape=jax.ShapeDtypeStruct((a.shape[0], b.shape[1]), jnp.float32))(a, b)


def less_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.where(x_ref[...] < y_ref[...], x_ref[...], y_ref[...])


# dtype-cmp: an int8 vector comparison, no TPU compares packed 8-bit lanes
# vmem: int8_min(s8[32, 128], s8[32, 128])
def int8_min(x, y):
    return pl.pallas_call(less_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)


def bf16_mask_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.where(x_ref[...] < y_ref[...], 1.0, 0.0).astype(o_ref.dtype)


# dtype-bf16cmp: a bf16 comparison selecting f32 constants; v6e and v7x (bf16 VPU) fail to relayout its mask
# vmem: bf16_mask(bf16[16, 128], bf16[16, 128])
def bf16_mask(x, y):
    return pl.pallas_call(bf16_mask_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32))(x, y)


def bf16_scalar_kernel(x_ref, o_ref):
    o_ref[...] = jnp.full(o_ref.shape, x_ref[...][3, 5], o_ref.dtype)


# dtype-scalar: a bf16 element taken out of a vector as a scalar, only 32-bit scalars exist
# vmem: bf16_broadcast_element(bf16[16, 128])
def bf16_broadcast_element(x):
    return pl.pallas_call(bf16_scalar_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def smem_vector_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


# smem-load: a whole f32[8, 128] block placed in SMEM and read as a vector
# vmem: smem_vector(f32[8, 128])
def smem_vector(x):
    return pl.pallas_call(
        smem_vector_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
    )(x)


def double_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


# partition: a pallas_call whose operand is sharded over several devices under jit. The example
# below compiles for one device and passes; scripts/capture_reports.py (err-partition-*) compiles
# it with its argument sharded over a 4-device topology, where XLA's SPMD partitioner refuses it.
# vmem: double(f32[32, 128])
def double(x):
    return pl.pallas_call(double_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def int8_add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


# dtype-int8-add: an int8 vector add; the VPU's integer ops take 16- and 32-bit lanes only ("Please cast your input")
# vmem: int8_add(s8[32, 128], s8[32, 128])
def int8_add(x, y):
    return pl.pallas_call(int8_add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
