"""Out specs passed through pytree constructors (a NamedTuple, a dataclass
registered with jax.tree_util.register_dataclass), and a grid axis of extent 1.

Each copy moves f32 blocks of (4096, 4096) = 64 MiB over a grid of 4 steps:
double buffered, one input and two outputs need 384 MiB, three times v6e's
128 MiB of VMEM, so the compiler lists every window on its spec."""
import dataclasses
from typing import Any, NamedTuple

import jax
from jax.experimental import pallas as pl

BM = 4096


class Outputs(NamedTuple):
    a: Any
    b: Any


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Halves:
    top: Any
    bottom: Any


def copy_twice(x_ref, first_ref, second_ref):
    first_ref[...] = x_ref[...]
    second_ref[...] = x_ref[...] * 2


# vmem: named_outputs(f32[16384, 4096])
def named_outputs(x):
    n = x.shape[1]
    shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return pl.pallas_call(
        copy_twice,
        out_shape=Outputs(a=shape, b=shape),
        grid=(x.shape[0] // BM,),
        in_specs=[pl.BlockSpec((BM, n), lambda i: (i, 0))],
        out_specs=Outputs(
            # les blocs écrits à l'envers : b d'abord — jax aplatit dans l'ordre des champs
            b=pl.BlockSpec((BM, n), lambda i: (i, 0)),
            a=pl.BlockSpec((BM, n), lambda i: (i, 0)),
        ),
    )(x)


def copy_halves(x_ref, out: Halves):
    """A dataclass output reaches the kernel as one argument, a Halves of refs."""
    out.top[...] = x_ref[...]
    out.bottom[...] = x_ref[...] * 2


# vmem: dataclass_outputs(f32[16384, 4096])
def dataclass_outputs(x):
    n = x.shape[1]
    shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
    top_spec = pl.BlockSpec((BM, n), lambda i: (i, 0))     # « haut »
    bottom_spec = pl.BlockSpec((BM, n), lambda i: (i, 0))  # « bas »
    return pl.pallas_call(
        copy_halves,
        out_shape=Halves(top=shape, bottom=shape),
        grid=(x.shape[0] // BM,),
        in_specs=[pl.BlockSpec((BM, n), lambda i: (i, 0))],
        out_specs=Halves(bottom=bottom_spec, top=top_spec),
    )(x)


def double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


# vmem: extent_one(f32[8192, 4096])
def extent_one(x):
    """The kernel of extent1-grid-v6e (scripts/capture_reports.py): grid=(1, 8); the input's index map
    reads only the axis of extent 1, so its block never changes (single buffered), the output's
    reads both (double buffered)."""
    return pl.pallas_call(
        double,
        out_shape=jax.ShapeDtypeStruct((BM, BM * 8), x.dtype),
        grid=(1, 8),
        in_specs=[pl.BlockSpec((BM, BM), lambda i, j: (i, 0))],
        out_specs=pl.BlockSpec((BM, BM), lambda i, j: (i, j)),
    )(x)
