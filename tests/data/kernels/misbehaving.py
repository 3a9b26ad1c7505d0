"""Examples that go wrong in every way the worker must survive, then one
that works, to show the check goes on after each failure."""
import ctypes
import os
import time

import jax
from jax.experimental import pallas as pl

# vmem: copy_rows(f32[4096, 4096)
# vmem: 42
# vmem: raises(f32[8, 128])
# vmem: hangs(f32[8, 128])
# vmem: exits(f32[8, 128])
# vmem: segfaults(f32[8, 128])
# vmem: allocates(f32[8, 128])
# vmem: floods(f32[8, 128])
# vmem: copy_rows(f32[8192, 4096], rows=1024)


def raises(x):
    raise ValueError("this example raises on purpose")


def hangs(x):
    while True:
        time.sleep(0.1)


def exits(x):
    print("some noise on stdout that must not break the protocol")
    os._exit(3)


def segfaults(x):
    ctypes.string_at(0)


def allocates(x):
    import numpy as np
    hoard = []
    while True:                     # until the worker's memory cap says no
        hoard.append(np.zeros((1 << 15, 1 << 12)))    # 1 GiB each, as a careless host-side buffer would


def floods(x):
    import sys
    chunk = "x" * 1023 + "\n"
    sys.stdout.write(chunk * 4096)  # 4 MiB on stdout, where the protocol would be
    sys.stderr.write(chunk * 4096)  # and 4 MiB on stderr
    raise ValueError("raised after the flood")


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def copy_rows(x, rows=512):
    n, m = x.shape
    return pl.pallas_call(
        copy_kernel,
        out_shape=jax.ShapeDtypeStruct((n, m), x.dtype),
        grid=(n // rows,),
        in_specs=[pl.BlockSpec((rows, m), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((rows, m), lambda i: (i, 0)),
    )(x)
