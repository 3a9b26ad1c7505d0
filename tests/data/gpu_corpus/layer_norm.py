"""jax's fused layer norm for GPUs (jax.experimental.pallas.ops.gpu.layer_norm), Triton, as jax's
tests/pallas/gpu_ops_test.py calls it: x [batch, seq_len, embed_dim] in f32 with weight and bias
[embed_dim]. It picks its own block size (at most 4096 columns) and never overflows."""

import jax
from jax.experimental.pallas.ops.gpu import layer_norm as ln


# vmem: layer_norm(f32[2, 384, 192], f32[192], f32[192])
def layer_norm(x, weight, bias):
    return ln.layer_norm(x, weight, bias)


# vmem: layer_norm_backward(f32[2, 384, 192], f32[192], f32[192])
def layer_norm_backward(x, weight, bias):
    """jax.grad through layer_norm, as test_fused_layernorm_bwd: forward, dx and dw/db kernels."""
    return jax.grad(lambda x, w, b: ln.layer_norm(x, w, b).sum(), argnums=(0, 1, 2))(x, weight, bias)
