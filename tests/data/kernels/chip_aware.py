"""Kernels that choose their blocks by asking jax which chip they run on, as
production kernels do: a tuning table keyed by device_kind with a small CPU
entry for tests, a backend check, the chip's VMEM from get_tpu_info. Traced as
a CPU they would all be checked with blocks that never run on a TPU.

Each overflows v5e (f32[4096,4096] windows, in and out, double buffered:
256.00M) and fits every other chip (8-row blocks: 128.0K windows)."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

ROWS = {"TPU v5 lite": 4096}  # tuned per chip; 8 rows elsewhere (and on the CPU in tests)


def add_one_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1


# vmem: add_one(f32[8192, 4096])
@jax.jit
def add_one(x):
    rows = ROWS.get(jax.devices()[0].device_kind, 8)
    return pl.pallas_call(
        add_one_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // rows,),
        in_specs=[pl.BlockSpec((rows, 4096), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((rows, 4096), lambda i: (i, 0)),
    )(x)


@functools.cache
def block_rows() -> int:
    """Asked once and kept, as a module of helpers does: the first chip's answer
    would stay for every chip if the module were not imported again."""
    if jax.default_backend() != "tpu":
        return 8
    return ROWS.get(jax.local_devices(backend="tpu")[0].device_kind, 8)


def scale_kernel(x_ref, o_ref, *, factor):
    o_ref[...] = x_ref[...] * factor


# vmem: scale(f32[8192, 4096], factor=2)
def scale(x, factor=2):
    rows = block_rows()
    return pl.pallas_call(
        functools.partial(scale_kernel, factor=factor),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // rows,),
        in_specs=[pl.BlockSpec((rows, 4096), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((rows, 4096), lambda i: (i, 0)),
    )(x)


# vmem: add_one_anywhere(f32[8192, 4096])
def add_one_anywhere(x):
    """Interpreted where there is no TPU, as tests run it: the backend check sees the
    target chip, so the TPU path is what is compiled."""
    rows = ROWS.get(jax.devices()[0].device_kind, 8)
    return pl.pallas_call(
        add_one_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // rows,),
        in_specs=[pl.BlockSpec((rows, 4096), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((rows, 4096), lambda i: (i, 0)),
        interpret=jax.default_backend() != "tpu",
    )(x)


# vmem: add_one_interpreted(f32[64, 128])
def add_one_interpreted(x):
    """Always interpreted: only a CPU runs it, and no TPU verdict can be given."""
    return pl.pallas_call(
        add_one_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=True,
    )(x)
