"""The inner pipeline's BlockSpecs, made by helpers as kernel libraries make
them: a tuple per operand group, shapes given by the caller."""
import contextlib

from jax.experimental import pallas as pl


def tiles(bm, bk):
    """Two operands' tiles of one (i, k) step."""
    return (
        pl.BlockSpec((bm, bk), lambda i, k: (i, k)),
        pl.BlockSpec((bm, bk), lambda i, k: (i, k)),
    )


def half_tile(bm, bk):
    return pl.BlockSpec((bm, bk // 2), lambda i, k: (i, k))


@contextlib.contextmanager
def profiled(name: str):
    """A user's context manager around a pallas_call, as a profiler's is."""
    yield name


def wide(bm, bk):
    """Two operands' tiles twice as wide as tiles'."""
    return (
        pl.BlockSpec((bm, 2 * bk), lambda i, k: (i, k)),
        pl.BlockSpec((bm, 2 * bk), lambda i, k: (i, k)),
    )
