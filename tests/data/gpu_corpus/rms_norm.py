"""jax's RMS norm for GPUs (jax.experimental.pallas.ops.gpu.rms_norm), Triton, as jax's
tests/pallas/gpu_ops_test.py calls it: x [batch, seq_len, embed_dim] in f32 with weight and bias
[embed_dim]. It picks its own block size and never overflows."""

import jax
from jax.experimental.pallas.ops.gpu import rms_norm as rms


# vmem: rms_norm(f32[2, 384, 192], f32[192], f32[192])
def rms_norm(x, weight, bias):
    return rms.rms_norm(x, weight, bias)


# vmem: rms_norm_backward(f32[2, 384, 192], f32[192], f32[192])
def rms_norm_backward(x, weight, bias):
    """jax.grad through rms_norm, as test_rms_norm_bwd."""
    return jax.grad(lambda x, w, b: rms.rms_norm(x, w, b).sum(), argnums=(0, 1, 2))(x, weight, bias)
