"""Three inputs and two outputs in HBM, streamed by an emit_pipeline whose
specs come from specs.py; the pallas_call runs inside a context manager
(jax.named_scope in fused, a contextlib one in fused_profiled). With bm=4096,
bk=2048 the pipeline's windows are four bf16[4096,2048] blocks (16 MiB each,
double buffered: 32.00M) and a bf16[4096,1024] one (16.00M): 144.00M, over
v5e's and v6e's 128M of VMEM. specs.tiles makes in_specs[0] and out_specs[0]
on one line, in_specs[1] and out_specs[1] on the next."""
import functools

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import specs


def inner(x_ref, y_ref, g_ref, s_ref, p_ref):
    s_ref[...] = x_ref[...] + y_ref[...]
    p_ref[...] = x_ref[...] * y_ref[...]
    s_ref[:, : g_ref.shape[1]] += g_ref[...]


def fused_kernel(x_hbm, y_hbm, g_hbm, s_hbm, p_hbm, *, bm, bk):
    pltpu.emit_pipeline(
        inner,
        grid=(x_hbm.shape[0] // bm, x_hbm.shape[1] // bk),
        in_specs=(*specs.tiles(bm, bk), specs.half_tile(bm, bk)),
        out_specs=specs.tiles(bm, bk),
    )(x_hbm, y_hbm, g_hbm, s_hbm, p_hbm)


def fused_call(x, bm, bk):
    hbm = pl.BlockSpec(memory_space=pl.ANY)
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return pl.pallas_call(
        functools.partial(fused_kernel, bm=bm, bk=bk),
        out_shape=(out, out),
        in_specs=[hbm, hbm, hbm],
        out_specs=(hbm, hbm),
    )


# vmem: fused(bf16[8192, 8192], bf16[8192, 8192], bf16[8192, 4096], bm=4096, bk=2048)
def fused(x, y, g, bm: int = 512, bk: int = 512):
    with jax.named_scope("fused"):
        return fused_call(x, bm, bk)(x, y, g)


# vmem: fused_profiled(bf16[8192, 8192], bf16[8192, 8192], bf16[8192, 4096], bm=4096, bk=2048)
def fused_profiled(x, y, g, bm: int = 512, bk: int = 512):
    with specs.profiled("fused"):
        return fused_call(x, bm, bk)(x, y, g)
