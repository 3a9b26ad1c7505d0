"""Attention scores of a whole block (issue 42): small windows (q and k blocks of bf16[*,128],
512.0K each), a body whose f32[2048,4096] scores and their exponentials (32.00M each) are what
overflow v5e's 16 MiB. Its errors belong on the body's lines, not on the BlockSpecs."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def scores_kernel(q_ref, k_ref, o_ref):
    s = jax.lax.dot_general(q_ref[...], k_ref[...], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)  # 𝑠
    p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))  # the scores' exponentials, « p »
    weights = (p / jnp.sum(p, axis=-1, keepdims=True)).astype(k_ref.dtype)
    o_ref[...] = jnp.dot(weights, k_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)


# vmem: scores(bf16[4096, 128], bf16[4096, 128], block=2048)
def scores(q, k, block=2048):
    return pl.pallas_call(
        scores_kernel,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(q.shape[0] // block,),
        in_specs=[pl.BlockSpec((block, 128), lambda i: (i, 0)), pl.BlockSpec((k.shape[0], 128), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((block, 128), lambda i: (i, 0)),
    )(q, k)
