"""Two pipelines in a row, made on one line of a loop from two helpers'
specs: specs.wide's bf16[4096,4096] blocks (64.00M a window, double
buffered; three windows, 192.00M, over v6e's VMEM) and then specs.tiles'
bf16[4096,2048] ones. The pipelines run one after the other, so the first is
the peak: its windows are specs.wide's, whichever pipeline was made last."""
import functools

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import specs


def add(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def staged_kernel(x_hbm, y_hbm, o_hbm, *, bm, bk):
    for make, width in ((specs.wide, 2 * bk), (specs.tiles, bk)):
        grid = (x_hbm.shape[0] // bm, x_hbm.shape[1] // width)
        pltpu.emit_pipeline(add, grid=grid, in_specs=make(bm, bk), out_specs=make(bm, bk)[0])(x_hbm, y_hbm, o_hbm)


# vmem: staged(bf16[8192, 8192], bf16[8192, 8192], bm=4096, bk=2048)
def staged(x, y, bm: int = 512, bk: int = 512):
    hbm = pl.BlockSpec(memory_space=pl.ANY)
    with specs.profiled("staged"):
        return pl.pallas_call(
            functools.partial(staged_kernel, bm=bm, bk=bk),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[hbm, hbm],
            out_specs=hbm,
        )(x, y)
