"""A MoE router's grouped top-k (DeepSeek-style), as a Pallas TPU kernel: its blocks
fit v5e's 16 MiB, but the body's [tokens, experts] temporaries (scores, masks, an
iota, per-group maxima, the top-k loop) are spilled to VMEM beyond them."""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

TOKENS = 1024
NEG = -1e30


def router_kernel(x_ref, w_ref, bias_ref, weights_ref, ids_ref, *, groups, topk_groups, k):
    logits = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)
    scores = jax.nn.sigmoid(logits)
    choice = scores + bias_ref[...]
    rows, experts = choice.shape
    expert = jax.lax.broadcasted_iota(jnp.int32, (rows, experts), 1)
    group_of = expert // (experts // groups)
    lane = jax.lax.broadcasted_iota(jnp.int32, (rows, 128), 1)
    group_scores = jnp.full((rows, 128), NEG, jnp.float32)
    for g in range(groups):
        masked = jnp.where(group_of == g, choice, NEG)
        first = jnp.max(masked, axis=-1, keepdims=True)
        first_at = jnp.min(jnp.where(masked == first, expert, experts), axis=-1, keepdims=True)
        second = jnp.max(jnp.where(expert == first_at, NEG, masked), axis=-1, keepdims=True)
        group_scores = jnp.where(lane == g, first + second, group_scores)
    keep = jnp.zeros((rows, experts), jnp.bool_)
    for _ in range(topk_groups):
        best = jnp.max(group_scores, axis=-1, keepdims=True)
        best_at = jnp.min(jnp.where(group_scores == best, lane, 128), axis=-1, keepdims=True)
        keep = keep | (group_of == best_at)
        group_scores = jnp.where(lane == best_at, NEG, group_scores)
    candidates = jnp.where(keep, choice, NEG)
    slot = jax.lax.broadcasted_iota(jnp.int32, (rows, k), 1)
    weights = jnp.zeros((rows, k), jnp.float32)
    ids = jnp.zeros((rows, k), jnp.int32)
    for j in range(k):
        best = jnp.max(candidates, axis=-1, keepdims=True)
        best_at = jnp.min(jnp.where(candidates == best, expert, experts), axis=-1, keepdims=True)
        weight = jnp.sum(jnp.where(expert == best_at, scores, 0.0), axis=-1, keepdims=True)
        weights = jnp.where(slot == j, weight, weights)
        ids = jnp.where(slot == j, best_at, ids)
        candidates = jnp.where(expert == best_at, NEG, candidates)
    weights_ref[...] = weights / (jnp.sum(weights, axis=-1, keepdims=True) + 1e-20) * 2.5
    ids_ref[...] = ids


# vmem: route(bf16[4096, 2048], bf16[2048, 256], f32[1, 256])
def route(x, w, bias, groups=8, topk_groups=4, k=8):
    tokens, hidden = x.shape
    experts = w.shape[1]
    out = pl.BlockSpec((TOKENS, k), lambda i: (i, 0))
    return pl.pallas_call(
        functools.partial(router_kernel, groups=groups, topk_groups=topk_groups, k=k),
        out_shape=(
            jax.ShapeDtypeStruct((tokens, k), jnp.float32),
            jax.ShapeDtypeStruct((tokens, k), jnp.int32),
        ),
        grid=(tokens // TOKENS,),
        in_specs=[
            pl.BlockSpec((TOKENS, hidden), lambda i: (i, 0)),
            pl.BlockSpec((hidden, experts), lambda i: (0, 0)),
            pl.BlockSpec((1, experts), lambda i: (0, 0)),
        ],
        out_specs=(out, out),
    )(x, w, bias)
