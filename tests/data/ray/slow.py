"""Examples that sleep before a small kernel: long enough for a test to kill
a Ray node or press Ctrl-C while they run. Each touches
$VMEM_RAY_MARKS/<tag>.<pid>.started when it begins and .done when its sleep
ends, so a test knows where the tasks are and whether a cancelled one went on."""
import os
import time

import jax
from jax.experimental import pallas as pl


def double_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def mark(tag: int, what: str) -> None:
    folder = os.environ.get("VMEM_RAY_MARKS")
    if folder:
        open(os.path.join(folder, f"{tag}.{os.getpid()}.{what}"), "w").close()


# vmem: slow_double(f32[8, 128], seconds=SECONDS, tag=1)
# vmem: slow_double(f32[16, 128], seconds=SECONDS, tag=2)
# vmem: slow_double(f32[24, 128], seconds=SECONDS, tag=3)
def slow_double(x, seconds, tag):
    mark(tag, "started")
    time.sleep(seconds)
    mark(tag, "done")
    n, m = x.shape
    return pl.pallas_call(
        double_kernel,
        out_shape=jax.ShapeDtypeStruct((n, m), x.dtype),
        in_specs=[pl.BlockSpec((n, m), lambda: (0, 0))],
        out_specs=pl.BlockSpec((n, m), lambda: (0, 0)),
    )(x)
