"""Pallas GPU kernels whose shared memory the model (vmem_lsp/gpu/layout.py) is measured
on: bench/bench_gpu_smem_model.py compiles a grid of their configs for each GPU target,
tests/test_gpu_layout.py a few examples below through the worker. Triton kernels take
(stages, warps); Mosaic GPU ones (steps, sequential): max_concurrent_steps and whether
their grid axis is "sequential" (None: no compiler params, jax's default backend)."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.experimental.pallas import triton as pltriton


def _triton(stages, warps):
    return pltriton.CompilerParams(num_warps=warps, num_stages=stages)


def _mosaic(steps, sequential, axes=1):
    if steps is None:
        return None
    semantics = ["parallel"] * (axes - 1) + ["sequential" if sequential else "parallel"]
    return plgpu.CompilerParams(max_concurrent_steps=steps, dimension_semantics=semantics)


# ---- Triton -----------------------------------------------------------------------------------


def tri_matmul(x, y, bm=64, bn=64, stages=3, warps=4):
    """The whole K in one block: the dot's operands are the blocks."""
    (m, k), (_, n) = x.shape, y.shape

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // bm, n // bn),
        in_specs=[pl.BlockSpec((bm, k), lambda i, j: (i, 0)), pl.BlockSpec((k, bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        compiler_params=_triton(stages, warps),
    )(x, y)


def tri_matmul_nt(x, y, bm=64, bn=64, stages=3, warps=4):
    """x @ y.T, both blocks (rows, K)."""
    (m, k), (n, _) = x.shape, y.shape

    def kernel(x_ref, y_ref, o_ref):
        dims = (((1,), (1,)), ((), ()))
        o_ref[...] = jax.lax.dot_general(x_ref[...], y_ref[...], dims, preferred_element_type=jnp.float32).astype(
            o_ref.dtype
        )

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // bm, n // bn),
        in_specs=[pl.BlockSpec((bm, k), lambda i, j: (i, 0)), pl.BlockSpec((bn, k), lambda i, j: (j, 0))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        compiler_params=_triton(stages, warps),
    )(x, y)


def tri_matmul_bias(x, y, z, bm=64, bn=64, stages=3, warps=4):
    """A whole-K matmul plus a bias block added to the dot's result."""
    (m, k), (_, n) = x.shape, y.shape

    def kernel(x_ref, y_ref, z_ref, o_ref):
        acc = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)
        o_ref[...] = (acc + z_ref[...].astype(jnp.float32)).astype(o_ref.dtype)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // bm, n // bn),
        in_specs=[
            pl.BlockSpec((bm, k), lambda i, j: (i, 0)),
            pl.BlockSpec((k, bn), lambda i, j: (0, j)),
            pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        compiler_params=_triton(stages, warps),
    )(x, y, z)


# vmem: tri_kloop(bf16[512, 1024], bf16[1024, 512], bm=128, bn=128, bk=128, stages=4)
# vmem: tri_kloop(f32[512, 1024], f32[1024, 512], bm=128, bn=128, bk=64, stages=4)
def tri_kloop(x, y, bm=64, bn=64, bk=32, stages=3, warps=4):
    """Blocks of the whole K; the body loops over K in bk slices (fori_loop), which
    Triton's software pipelining copies over its stages."""
    (m, k), (_, n) = x.shape, y.shape

    def kernel(x_ref, y_ref, o_ref):
        def body(i, acc):
            a = x_ref[:, pl.ds(i * bk, bk)]
            b = y_ref[pl.ds(i * bk, bk), :]
            return acc + jnp.dot(a, b, preferred_element_type=jnp.float32)

        acc = jax.lax.fori_loop(0, k // bk, body, jnp.zeros((bm, bn), jnp.float32))
        o_ref[...] = acc.astype(o_ref.dtype)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // bm, n // bn),
        in_specs=[pl.BlockSpec((bm, k), lambda i, j: (i, 0)), pl.BlockSpec((k, bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        compiler_params=_triton(stages, warps),
    )(x, y)


def tri_kloop_load(x, y, bm=64, bn=64, bk=32, stages=3, warps=4):
    """tri_kloop with pltriton.load of the slices."""
    (m, k), (_, n) = x.shape, y.shape

    def kernel(x_ref, y_ref, o_ref):
        def body(i, acc):
            a = pltriton.load(x_ref.at[:, pl.ds(i * bk, bk)])
            b = pltriton.load(y_ref.at[pl.ds(i * bk, bk), :])
            return acc + jnp.dot(a, b, preferred_element_type=jnp.float32)

        acc = jax.lax.fori_loop(0, k // bk, body, jnp.zeros((bm, bn), jnp.float32))
        o_ref[...] = acc.astype(o_ref.dtype)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // bm, n // bn),
        in_specs=[pl.BlockSpec((bm, k), lambda i, j: (i, 0)), pl.BlockSpec((k, bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        compiler_params=_triton(stages, warps),
    )(x, y)


def tri_kloop_bias(x, y, z, bm=64, bn=64, bk=32, stages=3, warps=4):
    """tri_kloop plus a bias block added to the accumulator."""
    (m, k), (_, n) = x.shape, y.shape

    def kernel(x_ref, y_ref, z_ref, o_ref):
        def body(i, acc):
            a = x_ref[:, pl.ds(i * bk, bk)]
            b = y_ref[pl.ds(i * bk, bk), :]
            return acc + jnp.dot(a, b, preferred_element_type=jnp.float32)

        acc = jax.lax.fori_loop(0, k // bk, body, jnp.zeros((bm, bn), jnp.float32))
        o_ref[...] = (acc + z_ref[...].astype(jnp.float32)).astype(o_ref.dtype)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // bm, n // bn),
        in_specs=[
            pl.BlockSpec((bm, k), lambda i, j: (i, 0)),
            pl.BlockSpec((k, bn), lambda i, j: (0, j)),
            pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        compiler_params=_triton(stages, warps),
    )(x, y, z)


# vmem: tri_attention(bf16[2048, 128], bf16[2048, 128], bf16[2048, 128], bq=128, bkv=128, stages=4, warps=8)
def tri_attention(q, k, v, bq=64, bkv=64, stages=3, warps=4):
    """Flash attention's forward, one head: q's block read once, k and v sliced in the loop."""
    s, d = q.shape
    t = k.shape[0]

    def kernel(q_ref, k_ref, v_ref, o_ref):
        qv = q_ref[...]

        def body(i, carry):
            acc, m_i, l_i = carry
            kb = k_ref[pl.ds(i * bkv, bkv), :]
            vb = v_ref[pl.ds(i * bkv, bkv), :]
            scores = jax.lax.dot_general(qv, kb, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
            m_new = jnp.maximum(m_i, jnp.max(scores, axis=1))
            p = jnp.exp(scores - m_new[:, None])
            alpha = jnp.exp(m_i - m_new)
            l_new = alpha * l_i + jnp.sum(p, axis=1)
            acc = acc * alpha[:, None] + jnp.dot(p.astype(vb.dtype), vb, preferred_element_type=jnp.float32)
            return acc, m_new, l_new

        start = (jnp.zeros((bq, d), jnp.float32), jnp.full((bq,), -1e30, jnp.float32), jnp.zeros((bq,), jnp.float32))
        acc, _, l_i = jax.lax.fori_loop(0, t // bkv, body, start)
        o_ref[...] = (acc / l_i[:, None]).astype(o_ref.dtype)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((s, d), q.dtype),
        grid=(s // bq,),
        in_specs=[
            pl.BlockSpec((bq, d), lambda i: (i, 0)),
            pl.BlockSpec((t, d), lambda i: (0, 0)),
            pl.BlockSpec((t, d), lambda i: (0, 0)),
        ],
        out_specs=pl.BlockSpec((bq, d), lambda i: (i, 0)),
        compiler_params=_triton(stages, warps),
    )(q, k, v)


def tri_add(x, y, bm=64, bn=64, stages=3, warps=4):
    m, n = x.shape

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    spec = pl.BlockSpec((bm, bn), lambda i, j: (i, j))
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // bm, n // bn),
        in_specs=[spec, spec],
        out_specs=spec,
        compiler_params=_triton(stages, warps),
    )(x, y)


def tri_rowsum(x, bm=64, stages=3, warps=4):
    m, n = x.shape

    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.sum(x_ref[...].astype(jnp.float32), axis=1)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m,), jnp.float32),
        grid=(m // bm,),
        in_specs=[pl.BlockSpec((bm, n), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((bm,), lambda i: (i,)),
        compiler_params=_triton(stages, warps),
    )(x)


def tri_colsum(x, bn=64, stages=3, warps=4):
    m, n = x.shape

    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.sum(x_ref[...].astype(jnp.float32), axis=0)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n,), jnp.float32),
        grid=(n // bn,),
        in_specs=[pl.BlockSpec((m, bn), lambda i: (0, i))],
        out_specs=pl.BlockSpec((bn,), lambda i: (i,)),
        compiler_params=_triton(stages, warps),
    )(x)


def tri_softmax(x, bm=16, stages=3, warps=4):
    m, n = x.shape

    def kernel(x_ref, o_ref):
        v = x_ref[...].astype(jnp.float32)
        e = jnp.exp(v - jnp.max(v, axis=1, keepdims=True))
        o_ref[...] = (e / jnp.sum(e, axis=1, keepdims=True)).astype(o_ref.dtype)

    spec = pl.BlockSpec((bm, n), lambda i: (i, 0))
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // bm,),
        in_specs=[spec],
        out_specs=spec,
        compiler_params=_triton(stages, warps),
    )(x)


# ---- Mosaic GPU -------------------------------------------------------------------------------


# vmem: mgpu_add(f32[8192, 256], f32[8192, 256], rows=64, steps=2, sequential=True)
def mgpu_add(x, y, rows=64, steps=None, sequential=False):
    n, m = x.shape

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    spec = pl.BlockSpec((rows, m), lambda i: (i, 0))
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n, m), x.dtype),
        grid=(n // rows,),
        in_specs=[spec, spec],
        out_specs=spec,
        compiler_params=_mosaic(steps, sequential),
    )(x, y)


def mgpu_copy(x, rows=64, steps=None, sequential=False):
    n, m = x.shape

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    spec = pl.BlockSpec((rows, m), lambda i: (i, 0))
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n, m), x.dtype),
        grid=(n // rows,),
        in_specs=[spec],
        out_specs=spec,
        compiler_params=_mosaic(steps, sequential),
    )(x)


def mgpu_add2d(x, y, rows=64, cols=128, steps=None, sequential=False):
    """Two grid axes, the second one sequential when asked; y may be another dtype."""
    n, m = x.shape

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...].astype(x_ref.dtype)

    spec = pl.BlockSpec((rows, cols), lambda i, j: (i, j))
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n, m), x.dtype),
        grid=(n // rows, m // cols),
        in_specs=[spec, spec],
        out_specs=spec,
        compiler_params=_mosaic(steps, sequential, axes=2),
    )(x, y)


def mgpu_scratch(x, rows=64, steps=None, sequential=False):
    """A block-sized SMEM scratch beside the pipeline."""
    n, m = x.shape

    def kernel(x_ref, o_ref, s_ref):
        s_ref[...] = x_ref[...] * 2
        o_ref[...] = s_ref[...] + 1

    spec = pl.BlockSpec((rows, m), lambda i: (i, 0))
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n, m), x.dtype),
        grid=(n // rows,),
        in_specs=[spec],
        out_specs=spec,
        scratch_shapes=[plgpu.SMEM((rows, m), x.dtype)],
        compiler_params=_mosaic(steps, sequential),
    )(x)


def mgpu_rowsum(x, rows=64, steps=None, sequential=False):
    n, m = x.shape

    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.sum(x_ref[...], axis=1)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n,), x.dtype),
        grid=(n // rows,),
        in_specs=[pl.BlockSpec((rows, m), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((rows,), lambda i: (i,)),
        compiler_params=_mosaic(steps, sequential),
    )(x)
