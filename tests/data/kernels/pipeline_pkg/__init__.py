"""A kernel package shaped as public kernels are (issue 31, part 6): the
inner pltpu.emit_pipeline's BlockSpecs are made by helpers in specs.py, the
kernel and its pallas_call live in kernel.py, and the pallas_call runs inside
a context manager (jax.named_scope, or contextlib's own kind)."""
