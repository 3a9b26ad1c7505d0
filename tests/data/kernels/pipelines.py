"""Kernels that allocate their VMEM inside the body, as newer kernels do:
operands left in HBM (memory_space=pl.ANY), blocks pipelined by
pltpu.emit_pipeline, buffers of pl.run_scoped. The model and the mapping must
see them (issue 15); scripts/capture_reports.py compiles them for the reports
in tests/data/reports/ (pipeline-*, run-scoped-*)."""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def in_hbm(kernel, x):
    """A pallas_call whose operands stay in HBM: the body moves the blocks."""
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
    )(x)


def row_spec(rows: int, cols: int, **kwargs):
    return pl.BlockSpec((rows, cols), lambda i: (i, 0), **kwargs)


def flat_kernel(x_hbm, o_hbm, *, bm):
    pltpu.emit_pipeline(
        double,
        grid=(x_hbm.shape[0] // bm,),
        in_specs=[pl.BlockSpec((bm, x_hbm.shape[1]), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((bm, x_hbm.shape[1]), lambda i: (i, 0)),
    )(x_hbm, o_hbm)


def flat(x, bm: int = 512):
    return in_hbm(functools.partial(flat_kernel, bm=bm), x)


def in_a_row_kernel(x_hbm, o_hbm, *, bm):
    cols = x_hbm.shape[1]
    pltpu.emit_pipeline(double, grid=(x_hbm.shape[0] // bm,), in_specs=[row_spec(bm, cols)],
                        out_specs=row_spec(bm, cols))(x_hbm, o_hbm)
    pltpu.emit_pipeline(double, grid=(x_hbm.shape[0] // bm,), in_specs=[row_spec(bm, cols)],
                        out_specs=row_spec(bm, cols))(o_hbm, o_hbm)


def in_a_row(x, bm: int = 512):
    return in_hbm(functools.partial(in_a_row_kernel, bm=bm), x)


def buffered_kernel(x_hbm, o_hbm, *, bm):
    cols = x_hbm.shape[1]
    pltpu.emit_pipeline(
        double,
        grid=(x_hbm.shape[0] // bm,),
        in_specs=[pl.BlockSpec((bm, cols), lambda i: (i, 0), pipeline_mode=pl.Buffered(1))],
        out_specs=pl.BlockSpec((bm, cols), lambda i: (i, 0)),
    )(x_hbm, o_hbm)


def buffered(x, bm: int = 512):
    return in_hbm(functools.partial(buffered_kernel, bm=bm), x)


def scoped_kernel(x_hbm, o_hbm):
    def body(a_ref, b_ref, sem):
        pltpu.make_async_copy(x_hbm, a_ref, sem.at[0]).start()
        pltpu.make_async_copy(x_hbm, a_ref, sem.at[0]).wait()
        b_ref[...] = a_ref[...] + 1
        pltpu.make_async_copy(b_ref, o_hbm, sem.at[1]).start()
        pltpu.make_async_copy(b_ref, o_hbm, sem.at[1]).wait()
    pl.run_scoped(body, pltpu.VMEM(x_hbm.shape, x_hbm.dtype), pltpu.VMEM(x_hbm.shape, x_hbm.dtype),
                  pltpu.SemaphoreType.DMA((2,)))


def scoped(x):
    return in_hbm(scoped_kernel, x)


def dot_kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)


def dot(a, b, bm: int = 512, bn: int = 512):
    """No scratch accumulator: the f32 dot result is the compiler's to place."""
    return pl.pallas_call(
        dot_kernel,
        out_shape=jax.ShapeDtypeStruct((a.shape[0], b.shape[1]), a.dtype),
        grid=(a.shape[0] // bm, b.shape[1] // bn),
        in_specs=[pl.BlockSpec((bm, a.shape[1]), lambda i, j: (i, 0)),
                  pl.BlockSpec((b.shape[0], bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
    )(a, b)


# vmem: flat(f32[8192,8192], bm=1024)
# vmem: in_a_row(f32[8192,8192], bm=1024)
# vmem: buffered(f32[8192,8192], bm=2048)
# vmem: scoped(f32[4096,4104])
# vmem: dot(bf16[4096,1280], bf16[1280,4096], bm=1024, bn=1024)
