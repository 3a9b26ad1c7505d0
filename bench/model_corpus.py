"""A corpus of Pallas TPU kernels to measure the layout model against the compiler.

Each Case is deterministic and has a stable id that says what it is; `make()` returns
the function to trace and `args` the (shape, dtype) of its arguments; `family` is the
one bench/families.py gives its id. The first families vary one thing at a time around
a plain copy (rank, dtype, block, grid, index map, buffering, memory space, scratch,
prefetch, aliasing), and add tiled matmuls and jax's own TPU kernels (flash_attention,
matmul, megablox gmm) at several block sizes. The held-out families (HELD_OUT_CASES:
emit_pipeline kernels, quantized and block-sparse matmuls, paged and ragged attention,
manual DMA) were added after the layout model was written, to measure it on kernels
it never saw; they follow the patterns of public Pallas TPU kernels, written here anew.

Imports jax: only the harness's compile workers load it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from families import family_of
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

DTYPES = {
    "f32": jnp.float32,
    "bf16": jnp.bfloat16,
    "f16": jnp.float16,
    "s32": jnp.int32,
    "s8": jnp.int8,
    "u8": jnp.uint8,
    "f8e4m3fn": jnp.float8_e4m3fn,
    "f8e5m2": jnp.float8_e5m2,
    "pred": jnp.bool_,
    "s4": jnp.int4,
}
MiB = 1 << 20


@dataclass(frozen=True)
class Case:
    id: str
    family: str
    make: Callable[[], Callable]
    args: tuple[tuple[tuple[int, ...], str], ...]  # (shape, dtype key of DTYPES) per argument


def out_like(x) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(x.shape, x.dtype)


def params(vmem_limit_bytes: int | None) -> dict:
    return {"compiler_params": pltpu.CompilerParams(vmem_limit_bytes=vmem_limit_bytes)} if vmem_limit_bytes else {}


def block_index(block: tuple[int, ...], moving: bool, grid_rank: int):
    """Index map over a grid of `grid_rank` dims: the first block dim follows grid dim 0,
    or every index is 0 (a constant window)."""

    def index(*ids):
        first = ids[0] if moving and grid_rank else 0
        return (first,) + (0,) * (len(block) - 1)

    return index


# ---- copy family: rank x dtype x block x grid x index map x buffering ---------------------


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def copy(
    block: tuple[int, ...],
    steps: int,
    in_mode: int | None = None,
    out_mode: int | None = None,
    constant_input: bool = False,
    grid_rank: int = 1,
    vmem_limit_bytes: int | None = None,
) -> Callable:
    """Copy over `steps` row blocks; the grid has `grid_rank` dims (the others of size 1, or
    none at all for grid_rank 0). pl.Buffered(n) when a mode is given."""
    grid = () if grid_rank == 0 else (steps,) + (1,) * (grid_rank - 1)

    def spec(moving: bool, mode: int | None):
        extra = {"pipeline_mode": pl.Buffered(mode)} if mode else {}
        return pl.BlockSpec(block, block_index(block, moving, grid_rank), **extra)

    def f(x):
        return pl.pallas_call(
            copy_kernel,
            out_shape=out_like(x),
            grid=grid,
            in_specs=[spec(not constant_input, in_mode)],
            out_specs=spec(True, out_mode),
            **params(vmem_limit_bytes),
        )(x)

    return f


def copy_cases() -> list[Case]:
    cases = []
    blocks = {  # rank -> blocks: tile multiples, odd (non-multiple) dims, tiny ones
        1: [(128,), (1024,), (100,), (65536,)],
        2: [(8, 128), (16, 256), (3, 100), (24, 200), (256, 512), (1, 128), (32, 1000)],
        3: [(2, 8, 128), (4, 3, 100), (2, 64, 256)],
        4: [(1, 2, 8, 128), (2, 2, 16, 100), (1, 1, 256, 256)],
    }
    dtypes = ["f32", "bf16", "f16", "s32", "s8", "u8", "f8e4m3fn", "f8e5m2", "pred", "s4"]
    for rank, shapes in blocks.items():
        for block in shapes:
            for dtype in dtypes:
                for steps in (1, 4):
                    full = (block[0] * steps,) + block[1:]
                    cid = f"copy-r{rank}-{dtype}-b{'x'.join(map(str, block))}-g{steps}"
                    cases.append(Case(cid, "copy", functools.partial(copy, block, steps), ((full, dtype),)))
    return cases


def buffering_cases() -> list[Case]:
    """When does the compiler single-buffer? Grid rank, constant windows, pl.Buffered(n)."""
    cases = []
    for dtype, block in (("f32", (256, 512)), ("bf16", (24, 200)), ("s8", (64, 384))):
        full4 = (block[0] * 4,) + block[1:]
        name = f"{dtype}-b{'x'.join(map(str, block))}"
        variants = {
            "grid0": dict(steps=1, grid_rank=0),
            "grid1": dict(steps=1, grid_rank=1),
            "grid1x1": dict(steps=1, grid_rank=2),
            "grid4x1": dict(steps=4, grid_rank=2),
            "const-in": dict(steps=4, constant_input=True),
            "in-buf1": dict(steps=4, in_mode=1),
            "out-buf1": dict(steps=4, out_mode=1),
            "in-buf3": dict(steps=4, in_mode=3),
            "both-buf3": dict(steps=4, in_mode=3, out_mode=3),
            "const-in-buf1": dict(steps=4, constant_input=True, in_mode=1),
            "grid1-buf3": dict(steps=1, in_mode=3),
        }
        for label, kw in variants.items():
            full = full4 if kw["steps"] == 4 else block
            cases.append(
                Case(f"buffering-{label}-{name}", "buffering", functools.partial(copy, block, **kw), ((full, dtype),))
            )
    return cases


def large_cases() -> list[Case]:
    """Blocks around the scoped limits (16, 32 MiB) and the capacities (16, 64, 128 MiB)."""
    cases = []
    for dtype, rows, cols in (
        ("f32", 512, 2048),
        ("f32", 1024, 2048),
        ("f32", 1024, 4096),
        ("bf16", 2048, 2048),
        ("f32", 2048, 2048),
        ("f32", 2048, 4096),
        ("bf16", 4096, 2000),
        ("s8", 4096, 4096),
        ("f32", 1000, 1000),
        ("bf16", 8192, 1024),
        ("f32", 4096, 4096),
    ):
        for steps in (1, 2):
            cid = f"large-{dtype}-b{rows}x{cols}-g{steps}"
            cases.append(
                Case(cid, "large", functools.partial(copy, (rows, cols), steps), (((rows * steps, cols), dtype),))
            )
    for limit_mib in (8, 48, 100):
        cases.append(
            Case(
                f"large-f32-b1024x2048-g2-limit{limit_mib}M",
                "large",
                functools.partial(copy, (1024, 2048), 2, vmem_limit_bytes=limit_mib * MiB),
                (((2048, 2048), "f32"),),
            )
        )
    return cases


# ---- scratch family -------------------------------------------------------------------------


def corner(ref):
    """The first element of `ref`, as a (1, 1) value."""
    index = (0,) * (ref.ndim - 2) + (slice(0, 1),) * min(ref.ndim, 2)
    value = ref[index]
    return value.reshape(1, 1) if ref.ndim != 2 else value


def scratch_kernel(x_ref, o_ref, *scratch):
    """Each scratch buffer is zeroed on the first step and read on every step: the compiler can
    neither drop it nor forward its values."""
    first = pl.program_id(0) == 0

    @pl.when(first)
    def _():
        for ref in scratch:
            ref[...] = jnp.zeros(ref.shape, ref.dtype)

    total = x_ref[...]
    for ref in scratch:
        total = total + corner(ref).astype(jnp.float32)
    o_ref[...] = total


def with_scratch(shapes: tuple[tuple[tuple[int, ...], str], ...], steps: int = 4) -> Callable:
    def f(x):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(
            scratch_kernel,
            out_shape=out_like(x),
            grid=(steps,),
            in_specs=[spec],
            out_specs=spec,
            scratch_shapes=[pltpu.VMEM(s, DTYPES[d]) for s, d in shapes],
        )(x)

    return f


def scratch_cases() -> list[Case]:
    cases = []
    shapes = [
        (8, 128),
        (3, 100),
        (16, 256),
        (1, 128),
        (24, 200),
        (2, 8, 128),
        (3, 5, 100),
        (1024,),
        (100,),
        (512, 1024),
        (2048, 2048),
    ]
    for shape in shapes:
        for dtype in ("f32", "bf16", "f16", "s32", "s8", "u8", "f8e4m3fn", "pred"):
            cid = f"scratch-{dtype}-s{'x'.join(map(str, shape))}"
            cases.append(
                Case(cid, "scratch", functools.partial(with_scratch, ((shape, dtype),)), (((32, 128), "f32"),))
            )
    mixed = (((8, 100), "bf16"), ((3, 128), "bf16"), ((3, 100), "s8"), ((64, 256), "f32"))
    cases.append(Case("scratch-mixed4", "scratch", functools.partial(with_scratch, mixed), (((32, 128), "f32"),)))
    return cases


def smem_scratch_kernel(x_ref, o_ref, table_ref):
    table_ref[0] = pl.program_id(0)
    o_ref[...] = x_ref[...] + table_ref[0].astype(jnp.float32)


def smem_scratch(n: int) -> Callable:
    def f(x):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(
            smem_scratch_kernel,
            out_shape=out_like(x),
            grid=(4,),
            in_specs=[spec],
            out_specs=spec,
            scratch_shapes=[pltpu.SMEM((n,), jnp.int32)],
        )(x)

    return f


# ---- memory spaces: ANY with a manual DMA, SMEM operands, scalar prefetch, aliasing ---------


def dma_kernel(x_hbm, o_ref, buf, sem):
    i = pl.program_id(0)
    rows = buf.shape[0]
    copy_in = pltpu.make_async_copy(x_hbm.at[pl.ds(i * rows, rows)], buf, sem.at[0])
    copy_in.start()
    copy_in.wait()
    o_ref[...] = buf[...]


def any_dma(block: tuple[int, int], dtype: str, semaphores: int) -> Callable:
    """Input left in HBM (pl.ANY), copied by hand into a VMEM scratch with DMA semaphores."""

    def f(x):
        spec = pl.BlockSpec(block, lambda i: (i, 0))
        return pl.pallas_call(
            dma_kernel,
            out_shape=out_like(x),
            grid=(x.shape[0] // block[0],),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=spec,
            scratch_shapes=[pltpu.VMEM(block, DTYPES[dtype]), pltpu.SemaphoreType.DMA((semaphores,))],
        )(x)

    return f


def smem_operand_kernel(s_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] * s_ref[0].astype(x_ref.dtype)


def smem_operand(n: int, block: tuple[int, int]) -> Callable:
    def f(s, x):
        spec = pl.BlockSpec(block, lambda i: (i, 0))
        return pl.pallas_call(
            smem_operand_kernel,
            out_shape=out_like(x),
            grid=(x.shape[0] // block[0],),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), spec],
            out_specs=spec,
        )(s, x)

    return f


def prefetch_kernel(idx_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...]


def prefetch(n: int, block: tuple[int, int]) -> Callable:
    """Row gather driven by a scalar-prefetched index table."""

    def f(idx, x):
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(x.shape[0] // block[0],),
            in_specs=[pl.BlockSpec(block, lambda i, idx: (idx[i], 0))],
            out_specs=pl.BlockSpec(block, lambda i, idx: (i, 0)),
        )
        return pl.pallas_call(prefetch_kernel, out_shape=out_like(x), grid_spec=grid_spec)(idx, x)

    return f


def alias_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def aliased(block: tuple[int, int], steps: int) -> Callable:
    """o = x + y with x's buffer reused for o (input_output_aliases={0: 0})."""

    def f(x, y):
        spec = pl.BlockSpec(block, lambda i: (i, 0))
        return pl.pallas_call(
            alias_kernel,
            out_shape=out_like(x),
            grid=(steps,),
            in_specs=[spec, spec],
            out_specs=spec,
            input_output_aliases={0: 0},
        )(x, y)

    return f


def space_cases() -> list[Case]:
    cases = []
    for block, dtype in (((8, 128), "f32"), ((256, 512), "f32"), ((24, 200), "bf16"), ((64, 256), "s8")):
        for sems in (1, 4):
            cid = f"any-dma-{dtype}-b{block[0]}x{block[1]}-sem{sems}"
            cases.append(
                Case(cid, "space", functools.partial(any_dma, block, dtype, sems), (((block[0] * 4, block[1]), dtype),))
            )
    for n in (16, 1024):
        for block in ((8, 128), (128, 256)):
            cases.append(
                Case(
                    f"smem-operand-n{n}-b{block[0]}x{block[1]}",
                    "space",
                    functools.partial(smem_operand, n, block),
                    (((n,), "s32"), ((block[0] * 4, block[1]), "f32")),
                )
            )
        cases.append(Case(f"smem-scratch-n{n}", "space", functools.partial(smem_scratch, n), (((32, 128), "f32"),)))
    for n in (4, 64, 4096):
        for block in ((8, 128), (64, 512)):
            steps = 4
            cases.append(
                Case(
                    f"prefetch-n{n}-b{block[0]}x{block[1]}",
                    "space",
                    functools.partial(prefetch, n, block),
                    (((max(n, steps),), "s32"), ((block[0] * max(n, steps), block[1]), "f32")),
                )
            )
    for block, steps in (((8, 128), 4), ((256, 512), 4), ((512, 1024), 1)):
        full = (block[0] * steps, block[1])
        cases.append(
            Case(
                f"alias-f32-b{block[0]}x{block[1]}-g{steps}",
                "space",
                functools.partial(aliased, block, steps),
                ((full, "f32"), (full, "f32")),
            )
        )
    return cases


# ---- compute: dots and reductions (the compiler's own scratch) ------------------------------


def matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=acc_ref.dtype)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def tiled_matmul(bm: int, bk: int, bn: int, acc: str, lhs_mode: int | None = None) -> Callable:
    def f(a, b):
        (m, k), (_, n) = a.shape, b.shape
        extra = {"pipeline_mode": pl.Buffered(lhs_mode)} if lhs_mode else {}
        return pl.pallas_call(
            matmul_kernel,
            out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
            grid=(m // bm, n // bn, k // bk),
            in_specs=[
                pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk), **extra),
                pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
            ],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), DTYPES[acc])],
        )(a, b)

    return f


def reduce_kernel(x_ref, o_ref):
    o_ref[...] = jnp.sum(x_ref[...].astype(jnp.float32), axis=-1, keepdims=True) * jnp.ones(o_ref.shape, o_ref.dtype)


def row_sum(block: tuple[int, int]) -> Callable:
    def f(x):
        return pl.pallas_call(
            reduce_kernel,
            out_shape=jax.ShapeDtypeStruct((x.shape[0], 128), jnp.float32),
            grid=(x.shape[0] // block[0],),
            in_specs=[pl.BlockSpec(block, lambda i: (i, 0))],
            out_specs=pl.BlockSpec((block[0], 128), lambda i: (i, 0)),
        )(x)

    return f


def compute_cases() -> list[Case]:
    cases = []
    for dtype, acc in (("bf16", "f32"), ("f32", "f32"), ("s8", "s32")):
        for bm, bk, bn in ((128, 128, 128), (256, 512, 256), (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048)):
            m = k = n = max(2 * bm, 1024)
            cases.append(
                Case(
                    f"matmul-{dtype}-{bm}x{bk}x{bn}",
                    "matmul",
                    functools.partial(tiled_matmul, bm, bk, bn, acc),
                    (((m, k), dtype), ((k, n), dtype)),
                )
            )
    cases.append(
        Case(
            "matmul-bf16-1024x1024x1024-lhsbuf1",
            "matmul",
            functools.partial(tiled_matmul, 1024, 1024, 1024, "f32", 1),
            (((2048, 2048), "bf16"), ((2048, 2048), "bf16")),
        )
    )
    for dtype in ("f32", "bf16"):
        for block in ((8, 128), (256, 1024), (1024, 2048)):
            cases.append(
                Case(
                    f"rowsum-{dtype}-b{block[0]}x{block[1]}",
                    "rowsum",
                    functools.partial(row_sum, block),
                    (((block[0] * 4, block[1]), dtype),),
                )
            )
    return cases


# ---- jax's own TPU kernels ---------------------------------------------------------------------


def flash(block: int, causal: bool) -> Callable:
    from jax.experimental.pallas.ops.tpu.flash_attention import BlockSizes, flash_attention

    sizes = BlockSizes(block_q=block, block_k_major=block, block_k=block, block_b=1)
    return lambda q, k, v: flash_attention(q, k, v, causal=causal, block_sizes=sizes)


def jax_matmul(bm: int, bn: int, bk: int) -> Callable:
    from jax.experimental.pallas.ops.tpu.matmul import matmul

    return lambda x, y: matmul(x, y, block_shape=(bm, bn), block_k=bk)


def gmm(tiling: tuple[int, int, int]) -> Callable:
    from jax.experimental.pallas.ops.tpu.megablox.gmm import gmm as megablox_gmm

    return lambda lhs, rhs, sizes: megablox_gmm(lhs, rhs, sizes, tiling=tiling)


def library_cases() -> list[Case]:
    cases = []
    for dtype in ("bf16", "f32"):
        for block in (128, 256, 512, 1024, 2048):
            for causal in (False, True):
                seq = max(2 * block, 1024)
                qkv = (((1, 2, seq, 128), dtype),) * 3
                cases.append(
                    Case(
                        f"flash-{dtype}-b{block}{'-causal' if causal else ''}",
                        "flash",
                        functools.partial(flash, block, causal),
                        qkv,
                    )
                )
    for dtype in ("bf16", "f32", "s8"):
        for bm, bn, bk in ((128, 128, 128), (256, 256, 512), (512, 512, 512), (1024, 1024, 1024), (2048, 1024, 512)):
            size = max(2 * bm, 2 * bn, 2 * bk, 1024)
            cases.append(
                Case(
                    f"jaxmatmul-{dtype}-{bm}x{bn}x{bk}",
                    "jaxmatmul",
                    functools.partial(jax_matmul, bm, bn, bk),
                    (((size, size), dtype), ((size, size), dtype)),
                )
            )
    for dtype in ("bf16", "f32"):
        for tiling in ((128, 128, 128), (256, 512, 256), (512, 1024, 1024), (1024, 2048, 1024)):
            m, k, n, groups = 4096, 2048, 2048, 4
            cases.append(
                Case(
                    f"gmm-{dtype}-{'x'.join(map(str, tiling))}",
                    "gmm",
                    functools.partial(gmm, tiling),
                    (((m, k), dtype), ((groups, k, n), dtype), ((groups,), "s32")),
                )
            )
    return cases


# ---- held-out families (issue 15 item 7): kernels the model was not written against --------
# Built after the patterns of public Pallas TPU kernels (emit_pipeline, quantized and
# block-sparse matmuls, paged attention, manual DMA), written here from scratch.


def scale_rows(o_ref, x_ref):
    o_ref[...] = x_ref[...] * 2


def hbm_call(kernel, x, scratch_shapes=(), grid=()) -> jax.Array:
    """A pallas_call whose input and output stay in HBM (pl.ANY): the body moves the blocks."""
    return pl.pallas_call(
        kernel,
        out_shape=out_like(x),
        grid=grid,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=list(scratch_shapes),
    )(x)


def pipeline_flat(bm: int, in_mode: int | None = None, out_mode: int | None = None) -> Callable:
    """One emit_pipeline over row blocks of an HBM array; inner specs optionally pl.Buffered(n)."""

    def kernel(x_hbm, o_hbm):
        cols = x_hbm.shape[1]
        extra = lambda mode: {"pipeline_mode": pl.Buffered(mode)} if mode else {}
        pltpu.emit_pipeline(
            lambda x_ref, o_ref: scale_rows(o_ref, x_ref),
            grid=(x_hbm.shape[0] // bm,),
            in_specs=[pl.BlockSpec((bm, cols), lambda i: (i, 0), **extra(in_mode))],
            out_specs=pl.BlockSpec((bm, cols), lambda i: (i, 0), **extra(out_mode)),
        )(x_hbm, o_hbm)

    return lambda x: hbm_call(kernel, x)


def pipeline_nested(bm: int, sub: int) -> Callable:
    """An emit_pipeline over row blocks of x whose body runs a second emit_pipeline over HBM y in
    `sub`-row blocks: a pipeline inside a pipeline, each with its own windows."""

    def kernel(x_hbm, y_hbm, o_hbm):
        cols = x_hbm.shape[1]

        def outer_body(x_blk, o_blk):
            o_blk[...] = x_blk[...]

            def inner_body(y_ref):
                o_blk[pl.ds(0, sub), :] += y_ref[...]

            pltpu.emit_pipeline(
                inner_body, grid=(y_hbm.shape[0] // sub,), in_specs=[pl.BlockSpec((sub, cols), lambda j: (j, 0))]
            )(y_hbm)

        pltpu.emit_pipeline(
            outer_body,
            grid=(x_hbm.shape[0] // bm,),
            in_specs=[pl.BlockSpec((bm, cols), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((bm, cols), lambda i: (i, 0)),
        )(x_hbm, o_hbm)

    def f(x, y):
        any_spec = pl.BlockSpec(memory_space=pl.ANY)
        return pl.pallas_call(kernel, out_shape=out_like(x), in_specs=[any_spec, any_spec], out_specs=any_spec)(x, y)

    return f


def pipeline_sub_blocks(bm: int, sub: int) -> Callable:
    """An emit_pipeline whose body pipelines each VMEM block again in `sub`-row slices: the
    inner pipeline's operands are already in VMEM."""

    def kernel(x_hbm, o_hbm):
        cols = x_hbm.shape[1]

        def outer_body(x_blk, o_blk):
            pltpu.emit_pipeline(
                lambda x_ref, o_ref: scale_rows(o_ref, x_ref),
                grid=(bm // sub,),
                in_specs=[pl.BlockSpec((sub, cols), lambda j: (j, 0))],
                out_specs=pl.BlockSpec((sub, cols), lambda j: (j, 0)),
            )(x_blk, o_blk)

        pltpu.emit_pipeline(
            outer_body,
            grid=(x_hbm.shape[0] // bm,),
            in_specs=[pl.BlockSpec((bm, cols), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((bm, cols), lambda i: (i, 0)),
        )(x_hbm, o_hbm)

    return lambda x: hbm_call(kernel, x)


def pipeline_in_scope(bm: int, scratch_rows: int) -> Callable:
    """pl.run_scoped holds a VMEM buffer while an emit_pipeline runs inside it."""

    def kernel(x_hbm, o_hbm):
        cols = x_hbm.shape[1]

        def scoped(buf):
            buf[...] = jnp.zeros(buf.shape, buf.dtype)

            def body(x_ref, o_ref):
                o_ref[...] = x_ref[...] + buf[pl.ds(0, bm), :]

            pltpu.emit_pipeline(
                body,
                grid=(x_hbm.shape[0] // bm,),
                in_specs=[pl.BlockSpec((bm, cols), lambda i: (i, 0))],
                out_specs=pl.BlockSpec((bm, cols), lambda i: (i, 0)),
            )(x_hbm, o_hbm)

        pl.run_scoped(scoped, pltpu.VMEM((scratch_rows, cols), x_hbm.dtype))

    return lambda x: hbm_call(kernel, x)


def pipeline_matmul(bm: int, bk: int, bn: int) -> Callable:
    """A tiled matmul written as an emit_pipeline over HBM operands, accumulating in an f32
    VMEM scratch of the outer call."""

    def kernel(a_hbm, b_hbm, o_hbm, acc_ref):
        (m, k), n = a_hbm.shape, b_hbm.shape[1]

        def body(a_ref, b_ref, o_ref):  # the VMEM shape of a matmul, not a correct one: acc never resets
            acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

        acc_ref[...] = jnp.zeros_like(acc_ref)
        pltpu.emit_pipeline(
            body,
            grid=(m // bm, n // bn, k // bk),
            in_specs=[
                pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
            ],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        )(a_hbm, b_hbm, o_hbm)

    def f(a, b):
        any_spec = pl.BlockSpec(memory_space=pl.ANY)
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((a.shape[0], b.shape[1]), a.dtype),
            in_specs=[any_spec, any_spec],
            out_specs=any_spec,
            scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        )(a, b)

    return f


def pipeline_cases() -> list[Case]:
    cases = []
    for dtype, rows, cols, bm in (
        ("f32", 4096, 1024, 256),
        ("bf16", 4096, 2048, 512),
        ("f32", 8192, 4096, 1024),
        ("f32", 8192, 8192, 1024),
        ("s8", 4096, 1000, 512),
    ):
        args = (((rows, cols), dtype),)
        tag = f"{dtype}-{rows}x{cols}-b{bm}"
        cases.append(Case(f"pipeline-flat-{tag}", "pipeline", functools.partial(pipeline_flat, bm), args))
        cases.append(Case(f"pipeline-in-buf1-{tag}", "pipeline", functools.partial(pipeline_flat, bm, 1), args))
        cases.append(Case(f"pipeline-in-buf3-{tag}", "pipeline", functools.partial(pipeline_flat, bm, 3), args))
        cases.append(Case(f"pipeline-out-buf1-{tag}", "pipeline", functools.partial(pipeline_flat, bm, None, 1), args))
        cases.append(
            Case(
                f"pipeline-nested-{tag}-s{bm // 2}",
                "pipeline",
                functools.partial(pipeline_nested, bm, bm // 2),
                args + (((rows // 2, cols), dtype),),
            )
        )
        cases.append(
            Case(
                f"pipeline-subblocks-{tag}-s{bm // 4}",
                "pipeline",
                functools.partial(pipeline_sub_blocks, bm, bm // 4),
                args,
            )
        )
        cases.append(
            Case(f"pipeline-scoped-{tag}-r{2 * bm}", "pipeline", functools.partial(pipeline_in_scope, bm, 2 * bm), args)
        )
    for dtype, (bm, bk, bn) in (("bf16", (256, 512, 256)), ("bf16", (1024, 1024, 1024)), ("f32", (512, 512, 512))):
        size = max(2 * bm, 2 * bk, 2 * bn, 1024)
        cases.append(
            Case(
                f"pipeline-matmul-{dtype}-{bm}x{bk}x{bn}",
                "pipeline",
                functools.partial(pipeline_matmul, bm, bk, bn),
                (((size, size), dtype), ((size, size), dtype)),
            )
        )
    return cases


def quant_matmul_kernel(a_ref, b_ref, sa_ref, sb_ref, o_ref, acc_ref):
    """a (bm, bk) and b (bk, bn) quantized, one scale per row of a and per column of b."""

    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=acc_ref.dtype)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = (acc_ref[...].astype(jnp.float32) * sa_ref[...] * sb_ref[...]).astype(o_ref.dtype)


def quant_matmul(bm: int, bk: int, bn: int, acc: str, out: str) -> Callable:
    def f(a, b, sa, sb):
        (m, k), n = a.shape, b.shape[1]
        return pl.pallas_call(
            quant_matmul_kernel,
            out_shape=jax.ShapeDtypeStruct((m, n), DTYPES[out]),
            grid=(m // bm, n // bn, k // bk),
            in_specs=[
                pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
                pl.BlockSpec((bm, 1), lambda i, j, kk: (i, 0)),
                pl.BlockSpec((1, bn), lambda i, j, kk: (0, j)),
            ],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), DTYPES[acc])],
        )(a, b, sa, sb)

    return f


def quant_w_kernel(x_ref, w_ref, s_ref, o_ref, acc_ref):
    """bf16 activations times int8/fp8 weights dequantized in the kernel (weight-only quantization)."""

    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    w = w_ref[...].astype(x_ref.dtype)
    acc_ref[...] += jnp.dot(x_ref[...], w, preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = (acc_ref[...] * s_ref[...]).astype(o_ref.dtype)


def quant_weights(bm: int, bk: int, bn: int) -> Callable:
    def f(x, w, s):
        (m, k), n = x.shape, w.shape[1]
        return pl.pallas_call(
            quant_w_kernel,
            out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
            grid=(m // bm, n // bn, k // bk),
            in_specs=[
                pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
                pl.BlockSpec((1, bn), lambda i, j, kk: (0, j)),
            ],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        )(x, w, s)

    return f


def quant_matmul_cases() -> list[Case]:
    cases = []
    for qdtype, acc, out in (("s8", "s32", "bf16"), ("f8e4m3fn", "f32", "bf16"), ("f8e5m2", "f32", "f32")):
        for bm, bk, bn in ((128, 256, 128), (256, 512, 256), (512, 1024, 512), (1024, 1024, 1024), (2048, 1024, 2048)):
            m = n = max(2 * bm, 1024)
            k = max(2 * bk, 1024)
            args = (((m, k), qdtype), ((k, n), qdtype), ((m, 1), "f32"), ((1, n), "f32"))
            cases.append(
                Case(
                    f"qmatmul-{qdtype}-{bm}x{bk}x{bn}",
                    "quant_matmul",
                    functools.partial(quant_matmul, bm, bk, bn, acc, out),
                    args,
                )
            )
    for wdtype in ("s8", "f8e4m3fn"):
        for bm, bk, bn in ((256, 512, 256), (512, 2048, 512), (1024, 1024, 2048)):
            m, k, n = max(2 * bm, 1024), max(2 * bk, 1024), max(2 * bn, 1024)
            args = (((m, k), "bf16"), ((k, n), wdtype), ((1, n), "f32"))
            cases.append(
                Case(
                    f"qmatmul-w{wdtype}-{bm}x{bk}x{bn}",
                    "quant_matmul",
                    functools.partial(quant_weights, bm, bk, bn),
                    args,
                )
            )
    return cases


def paged_attention_kernel(lens_ref, table_ref, q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref, *, page: int):
    """One sequence's query heads against its KV pages, one page per step (online softmax)."""
    b, p = pl.program_id(0), pl.program_id(1)

    @pl.when(p == 0)
    def _():
        m_ref[...] = jnp.full(m_ref.shape, -jnp.inf, m_ref.dtype)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(p * page < lens_ref[b])
    def _():
        q = q_ref[0].astype(jnp.float32)
        k = k_ref[0].astype(jnp.float32)
        s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        pos = p * page + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
        s = jnp.where(pos < lens_ref[b], s, -jnp.inf)
        m_prev = m_ref[:, :1]
        m_new = jnp.maximum(m_prev, s.max(axis=-1, keepdims=True))
        probs = jnp.exp(s - m_new)
        alpha = jnp.exp(m_prev - m_new)
        l_ref[...] = jnp.broadcast_to(alpha * l_ref[:, :1] + probs.sum(axis=-1, keepdims=True), l_ref.shape)
        m_ref[...] = jnp.broadcast_to(m_new, m_ref.shape)
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(
            probs, v_ref[0].astype(jnp.float32), preferred_element_type=jnp.float32
        )

    @pl.when(p == pl.num_programs(1) - 1)
    def _():
        o_ref[0] = (acc_ref[...] / l_ref[:, :1]).astype(o_ref.dtype)


def paged_attention(page: int, pages_per_seq: int) -> Callable:
    """q (batch, heads, d); k, v pages (num_pages, page, d); lengths and page table scalar-prefetched."""

    def f(lens, table, q, k, v):
        batch, heads, d = q.shape
        kernel = functools.partial(paged_attention_kernel, page=page)
        kv_spec = pl.BlockSpec((1, page, d), lambda b, p, lens, table: (table[b, p], 0, 0))
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            grid=(batch, pages_per_seq),
            in_specs=[pl.BlockSpec((1, heads, d), lambda b, p, lens, table: (b, 0, 0)), kv_spec, kv_spec],
            out_specs=pl.BlockSpec((1, heads, d), lambda b, p, lens, table: (b, 0, 0)),
            scratch_shapes=[
                pltpu.VMEM((heads, 128), jnp.float32),
                pltpu.VMEM((heads, 128), jnp.float32),
                pltpu.VMEM((heads, d), jnp.float32),
            ],
        )
        return pl.pallas_call(kernel, out_shape=out_like(q), grid_spec=grid_spec)(lens, table, q, k, v)

    return f


def ragged_attention_kernel(lens_ref, q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref, *, bq: int, bk: int):
    """Blocks of queries against blocks of keys of one ragged sequence; blocks past its length skipped."""
    b, kb = pl.program_id(0), pl.program_id(2)

    @pl.when(kb == 0)
    def _():
        m_ref[...] = jnp.full(m_ref.shape, -jnp.inf, m_ref.dtype)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(kb * bk < lens_ref[b])
    def _():
        s = jax.lax.dot_general(q_ref[0], k_ref[0], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        pos = kb * bk + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
        s = jnp.where(pos < lens_ref[b], s, -jnp.inf)
        m_prev = m_ref[:, :1]
        m_new = jnp.maximum(m_prev, s.max(axis=-1, keepdims=True))
        probs = jnp.exp(s - m_new)
        alpha = jnp.exp(m_prev - m_new)
        l_ref[...] = jnp.broadcast_to(alpha * l_ref[:, :1] + probs.sum(axis=-1, keepdims=True), l_ref.shape)
        m_ref[...] = jnp.broadcast_to(m_new, m_ref.shape)
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(
            probs.astype(v_ref.dtype), v_ref[0], preferred_element_type=jnp.float32
        )

    @pl.when(kb == pl.num_programs(2) - 1)
    def _():
        o_ref[0] = (acc_ref[...] / l_ref[:, :1]).astype(o_ref.dtype)


def ragged_attention(bq: int, bk: int) -> Callable:
    """q, k, v (batch, seq, d) padded to the longest sequence; lengths scalar-prefetched, the key
    block index clamped to the sequence's last block so that skipped steps fetch nothing new."""

    def f(lens, q, k, v):
        batch, seq, d = q.shape
        kernel = functools.partial(ragged_attention_kernel, bq=bq, bk=bk)

        def kv_index(b, i, kb, lens):
            last = jnp.maximum((lens[b] + bk - 1) // bk - 1, 0)
            return (b, jnp.minimum(kb, last), 0)

        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(batch, seq // bq, seq // bk),
            in_specs=[
                pl.BlockSpec((1, bq, d), lambda b, i, kb, lens: (b, i, 0)),
                pl.BlockSpec((1, bk, d), kv_index),
                pl.BlockSpec((1, bk, d), kv_index),
            ],
            out_specs=pl.BlockSpec((1, bq, d), lambda b, i, kb, lens: (b, i, 0)),
            scratch_shapes=[
                pltpu.VMEM((bq, 128), jnp.float32),
                pltpu.VMEM((bq, 128), jnp.float32),
                pltpu.VMEM((bq, d), jnp.float32),
            ],
        )
        return pl.pallas_call(kernel, out_shape=out_like(q), grid_spec=grid_spec)(lens, q, k, v)

    return f


def paged_attention_cases() -> list[Case]:
    cases = []
    for dtype in ("bf16", "f32"):
        for heads, d, page, pages in (
            (8, 128, 16, 8),
            (8, 128, 128, 4),
            (32, 128, 256, 4),
            (16, 256, 512, 2),
            (64, 128, 1024, 2),
        ):
            batch, total_pages = 4, 4 * pages
            args = (
                ((batch,), "s32"),
                ((batch, pages), "s32"),
                ((batch, heads, d), dtype),
                ((total_pages, page, d), dtype),
                ((total_pages, page, d), dtype),
            )
            cases.append(
                Case(
                    f"paged-{dtype}-h{heads}-d{d}-p{page}x{pages}",
                    "paged_attention",
                    functools.partial(paged_attention, page, pages),
                    args,
                )
            )
        for bq, bk, d in ((128, 128, 128), (256, 512, 128), (512, 512, 256), (1024, 1024, 128), (2048, 1024, 128)):
            seq = max(2 * bq, 2 * bk, 1024)
            qkv = (((2, seq, d), dtype),) * 3
            cases.append(
                Case(
                    f"ragged-{dtype}-q{bq}-k{bk}-d{d}",
                    "paged_attention",
                    functools.partial(ragged_attention, bq, bk),
                    (((2,), "s32"),) + qkv,
                )
            )
    return cases


def bsmm_kernel(cols_ref, counts_ref, a_ref, b_ref, o_ref, acc_ref):
    """Block-sparse (BSR) lhs times dense rhs: step t of row block i multiplies the t-th stored
    block of that row (column block cols[i, t]) by the matching rhs rows."""
    i, t = pl.program_id(0), pl.program_id(2)

    @pl.when(t == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(t < counts_ref[i])
    def _():
        acc_ref[...] += jnp.dot(a_ref[0], b_ref[...], preferred_element_type=acc_ref.dtype)

    @pl.when(t == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def block_sparse_matmul(bm: int, bk: int, bn: int, nnz: int, acc: str) -> Callable:
    """a_blocks (row_blocks * nnz, bm, bk): the stored blocks; cols (row_blocks, nnz), counts (row_blocks,)."""

    def f(cols, counts, a_blocks, b):
        row_blocks, n = cols.shape[0], b.shape[1]
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            grid=(row_blocks, n // bn, nnz),
            in_specs=[
                pl.BlockSpec((1, bm, bk), lambda i, j, t, cols, counts: (i * nnz + t, 0, 0)),
                pl.BlockSpec((bk, bn), lambda i, j, t, cols, counts: (cols[i, t], j)),
            ],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, t, cols, counts: (i, j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), DTYPES[acc])],
        )
        return pl.pallas_call(
            bsmm_kernel, out_shape=jax.ShapeDtypeStruct((row_blocks * bm, n), b.dtype), grid_spec=grid_spec
        )(cols, counts, a_blocks, b)

    return f


def masked_output_kernel(mask_ref, a_ref, b_ref, o_ref, acc_ref):
    """Dense times dense where a block mask says which output blocks to compute (block-sparse output)."""
    i, j, kk = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    live = mask_ref[i, j] != 0

    @pl.when(kk == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(live)
    def _():
        acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(kk == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def masked_output_matmul(bm: int, bk: int, bn: int) -> Callable:
    def f(mask, a, b):
        (m, k), n = a.shape, b.shape[1]
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(m // bm, n // bn, k // bk),
            in_specs=[
                pl.BlockSpec((bm, bk), lambda i, j, kk, mask: (i, kk)),
                pl.BlockSpec((bk, bn), lambda i, j, kk, mask: (kk, j)),
            ],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk, mask: (i, j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        )
        return pl.pallas_call(
            masked_output_kernel, out_shape=jax.ShapeDtypeStruct((m, n), a.dtype), grid_spec=grid_spec
        )(mask, a, b)

    return f


def sparse_matmul_cases() -> list[Case]:
    cases = []
    for dtype, acc in (("bf16", "f32"), ("f32", "f32"), ("s8", "s32")):
        for bm, bk, bn, nnz in (
            (128, 128, 128, 2),
            (256, 512, 256, 4),
            (512, 512, 512, 2),
            (1024, 1024, 1024, 2),
            (2048, 512, 1024, 2),
        ):
            row_blocks, k_blocks, n = 4, 8, max(2 * bn, 1024)
            args = (
                ((row_blocks, nnz), "s32"),
                ((row_blocks,), "s32"),
                ((row_blocks * nnz, bm, bk), dtype),
                ((k_blocks * bk, n), dtype),
            )
            cases.append(
                Case(
                    f"bsmm-{dtype}-{bm}x{bk}x{bn}-nnz{nnz}",
                    "sparse_matmul",
                    functools.partial(block_sparse_matmul, bm, bk, bn, nnz, acc),
                    args,
                )
            )
    for dtype in ("bf16", "f32"):
        for bm, bk, bn in ((256, 256, 256), (512, 1024, 512), (1024, 1024, 1024)):
            m = k = n = max(2 * bm, 2 * bk, 1024)
            args = (((m // bm, n // bn), "s32"), ((m, k), dtype), ((k, n), dtype))
            cases.append(
                Case(
                    f"bsmm-mask-{dtype}-{bm}x{bk}x{bn}",
                    "sparse_matmul",
                    functools.partial(masked_output_matmul, bm, bk, bn),
                    args,
                )
            )
    return cases


def manual_dma_double(bm: int, chunks: int, out_any: bool) -> Callable:
    """One kernel invocation walks `chunks` row chunks of an HBM input, double-buffering them in a
    (2, bm, cols) VMEM scratch by hand (start the next copy, wait for this one, compute). The result
    goes to a VMEM output window, or (out_any) through a (2, bm, cols) staging scratch back to HBM."""

    def kernel(x_hbm, o_ref, buf, sems, *staging):
        def copy_in(c, slot):
            return pltpu.make_async_copy(x_hbm.at[pl.ds(c * bm, bm)], buf.at[slot], sems.at[0, slot])

        def copy_out(c, slot):
            return pltpu.make_async_copy(staging[0].at[slot], o_ref.at[pl.ds(c * bm, bm)], sems.at[1, slot])

        copy_in(0, 0).start()

        def step(c, carry):
            slot = c % 2

            @pl.when(c + 1 < chunks)
            def _():
                copy_in(c + 1, 1 - slot).start()

            copy_in(c, slot).wait()
            if out_any:

                @pl.when(c >= 2)
                def _():
                    copy_out(c - 2, slot).wait()

                staging[0][slot] = buf[slot] * 2
                copy_out(c, slot).start()
            else:
                o_ref[pl.ds(c * bm, bm), :] = buf[slot] * 2
            return carry

        jax.lax.fori_loop(0, chunks, step, 0)
        if out_any:
            for c in range(max(0, chunks - 2), chunks):
                copy_out(c, c % 2).wait()

    def f(x):
        cols = x.shape[1]
        scratch = [pltpu.VMEM((2, bm, cols), x.dtype), pltpu.SemaphoreType.DMA((2, 2))]
        if out_any:
            scratch.append(pltpu.VMEM((2, bm, cols), x.dtype))
        out_spec = pl.BlockSpec(memory_space=pl.ANY) if out_any else pl.BlockSpec(x.shape, lambda: (0, 0))
        return pl.pallas_call(
            kernel,
            out_shape=out_like(x),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=out_spec,
            scratch_shapes=scratch,
        )(x)

    return f


def manual_dma_gather(group: int, cols: int, n: int) -> Callable:
    """Groups of `group` rows (one tile: 8 rows, 16 for a 16-bit type) of an HBM table gathered by
    a scalar-prefetched index list, one DMA per group into a VMEM scratch, written out as one block."""

    def kernel(idx_ref, table_hbm, o_ref, buf, sem):
        def start(r, carry):
            src = table_hbm.at[pl.ds(pl.multiple_of(idx_ref[r] * group, group), group)]
            pltpu.make_async_copy(src, buf.at[pl.ds(pl.multiple_of(r * group, group), group)], sem.at[0]).start()
            return carry

        def wait(r, carry):
            dst = buf.at[pl.ds(pl.multiple_of(r * group, group), group)]
            pltpu.make_async_copy(table_hbm.at[pl.ds(0, group)], dst, sem.at[0]).wait()
            return carry

        jax.lax.fori_loop(0, n, start, 0)
        jax.lax.fori_loop(0, n, wait, 0)
        o_ref[...] = buf[...]

    def f(idx, table):
        rows = n * group
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(1,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((rows, cols), lambda i, idx: (0, 0)),
            scratch_shapes=[pltpu.VMEM((rows, cols), table.dtype), pltpu.SemaphoreType.DMA((1,))],
        )
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((rows, cols), table.dtype), grid_spec=grid_spec)(
            idx, table
        )

    return f


def manual_dma_cases() -> list[Case]:
    cases = []
    for dtype, bm, cols, chunks in (
        ("f32", 256, 1024, 8),
        ("bf16", 512, 2048, 4),
        ("f32", 1024, 4096, 4),
        ("s8", 512, 1000, 4),
        ("f32", 2048, 4096, 2),
        ("bf16", 4096, 4096, 2),
    ):
        for out_any in (False, True):
            cid = f"manualdma-{dtype}-b{bm}x{cols}-c{chunks}{'-outany' if out_any else ''}"
            cases.append(
                Case(
                    cid,
                    "manual_dma",
                    functools.partial(manual_dma_double, bm, chunks, out_any),
                    (((bm * chunks, cols), dtype),),
                )
            )
    for dtype, cols, n in (("f32", 128, 64), ("bf16", 1024, 32), ("f32", 4096, 64), ("f32", 8192, 128)):
        group = 16 if dtype == "bf16" else 8
        cases.append(
            Case(
                f"manualdma-gather-{dtype}-{n}x{group}x{cols}",
                "manual_dma",
                functools.partial(manual_dma_gather, group, cols, n),
                (((n,), "s32"), ((4 * n * group, cols), dtype)),
            )
        )
    return cases


# ---- body temporaries (issue 31): kernels whose body makes large values -------------------------
# What no BlockSpec or scratch entry names: a router's per-group top-k over a [tokens, experts] tile,
# softmax and layernorm with f32 intermediates, iota masks, cumulative sums, reductions over big
# blocks, elementwise chains, a sort network. Written here anew in the shape of public kernels
# (MoE routers' grouped top-k, fused softmax/norm kernels); jnp.sort, lax.top_k and jnp.cumsum have
# no Mosaic lowering, so they are spelled as TPU kernels spell them: iterated max/argmax, a
# triangular matmul or shifted adds, a bitonic network of rolls.

NEG = -1e30  # a masked score: finite, so max/compare chains stay well defined


def top_slots(candidates, values, k: int):
    """The k largest of `candidates` per row, by iterated max and lowest-index argmax (the way a
    router picks its experts without lax.top_k): (values at those experts, their indices), [rows, k]."""
    rows, experts = candidates.shape
    expert = jax.lax.broadcasted_iota(jnp.int32, (rows, experts), 1)
    slot = jax.lax.broadcasted_iota(jnp.int32, (rows, k), 1)
    picked = jnp.zeros((rows, k), jnp.float32)
    ids = jnp.zeros((rows, k), jnp.int32)
    for j in range(k):
        best = jnp.max(candidates, axis=-1, keepdims=True)
        best_at = jnp.min(jnp.where(candidates == best, expert, experts), axis=-1, keepdims=True)
        value = jnp.sum(jnp.where(expert == best_at, values, 0.0), axis=-1, keepdims=True)
        picked = jnp.where(slot == j, value, picked)
        ids = jnp.where(slot == j, best_at, ids)
        candidates = jnp.where(expert == best_at, NEG, candidates)
    return picked, ids


def grouped_topk_kernel(x_ref, w_ref, bias_ref, weights_ref, ids_ref, *, groups: int, topk_groups: int, k: int):
    """A DeepSeek-style router: sigmoid scores plus a bias choose; each group of experts is scored
    by its two best; the best `topk_groups` groups keep their experts; the top k of those win, and
    their unbiased scores, normalized and scaled, are the weights."""
    logits = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)
    scores = jax.nn.sigmoid(logits)
    choice = scores + bias_ref[...].astype(jnp.float32)
    rows, experts = choice.shape
    expert = jax.lax.broadcasted_iota(jnp.int32, (rows, experts), 1)
    group_of = expert // (experts // groups)
    lane = jax.lax.broadcasted_iota(jnp.int32, (rows, 128), 1)
    group_scores = jnp.full((rows, 128), NEG, jnp.float32)
    for g in range(groups):
        masked = jnp.where(group_of == g, choice, NEG)
        first = jnp.max(masked, axis=-1, keepdims=True)
        first_at = jnp.min(jnp.where(masked == first, expert, experts), axis=-1, keepdims=True)
        second = jnp.max(jnp.where(expert == first_at, NEG, masked), axis=-1, keepdims=True)
        group_scores = jnp.where(lane == g, first + second, group_scores)
    keep = jnp.zeros((rows, experts), jnp.bool_)
    for _ in range(topk_groups):
        best = jnp.max(group_scores, axis=-1, keepdims=True)
        best_at = jnp.min(jnp.where(group_scores == best, lane, 128), axis=-1, keepdims=True)
        keep = keep | (group_of == best_at)
        group_scores = jnp.where(lane == best_at, NEG, group_scores)
    weights, ids = top_slots(jnp.where(keep, choice, NEG), scores, k)
    weights_ref[...] = weights / (jnp.sum(weights, axis=-1, keepdims=True) + 1e-20) * 2.5
    ids_ref[...] = ids


def softmax_topk_kernel(x_ref, w_ref, weights_ref, ids_ref, *, k: int):
    """A Mixtral-style router: softmax over the experts, the top k, renormalized."""
    logits = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)
    probs = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))
    probs = probs / jnp.sum(probs, axis=-1, keepdims=True)
    weights, ids = top_slots(probs, probs, k)
    weights_ref[...] = weights / jnp.sum(weights, axis=-1, keepdims=True)
    ids_ref[...] = ids


def router(tokens: int, kind: str, groups: int = 8, topk_groups: int = 4, k: int = 8) -> Callable:
    """A router over `tokens`-row blocks of x [T, hidden] and the whole gate w [hidden, experts]."""

    def f(x, w, *bias):
        total, hidden = x.shape
        experts = w.shape[1]
        if kind == "grouped":
            kernel = functools.partial(grouped_topk_kernel, groups=groups, topk_groups=topk_groups, k=k)
        else:
            kernel = functools.partial(softmax_topk_kernel, k=k)
        whole = lambda shape: pl.BlockSpec(shape, lambda i: (0, 0))
        out_spec = pl.BlockSpec((tokens, k), lambda i: (i, 0))
        return pl.pallas_call(
            kernel,
            out_shape=(jax.ShapeDtypeStruct((total, k), jnp.float32), jax.ShapeDtypeStruct((total, k), jnp.int32)),
            grid=(total // tokens,),
            in_specs=[pl.BlockSpec((tokens, hidden), lambda i: (i, 0)), whole((hidden, experts))]
            + [whole((1, experts))] * len(bias),
            out_specs=(out_spec, out_spec),
        )(x, w, *bias)

    return f


def row_blocks(kernel, rows: int, out_dtype=None, extra_rows: tuple[int, ...] = ()) -> Callable:
    """`kernel(x_ref, *rows_refs, o_ref)` over `rows`-row blocks of x; each extra operand is a
    whole [1, cols] row (a norm's scale and shift)."""

    def f(x, *extra):
        total, cols = x.shape
        dtype = out_dtype or x.dtype
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((total, cols), dtype),
            grid=(total // rows,),
            in_specs=[pl.BlockSpec((rows, cols), lambda i: (i, 0))]
            + [pl.BlockSpec(e.shape, lambda i: (0, 0)) for e in extra],
            out_specs=pl.BlockSpec((rows, cols), lambda i: (i, 0)),
        )(x, *extra)

    return f


def softmax_kernel(x_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    o_ref[...] = (e / jnp.sum(e, axis=-1, keepdims=True)).astype(o_ref.dtype)


def layernorm_kernel(x_ref, g_ref, b_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    centered = x - jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(centered * centered, axis=-1, keepdims=True)
    y = centered * jax.lax.rsqrt(var + 1e-6) * g_ref[...].astype(jnp.float32) + b_ref[...].astype(jnp.float32)
    o_ref[...] = y.astype(o_ref.dtype)


def rmsnorm_kernel(x_ref, g_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    y = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g_ref[...].astype(jnp.float32)
    o_ref[...] = y.astype(o_ref.dtype)


def causal_mask_kernel(x_ref, o_ref):
    """An attention-style mask from two iotas, the block's row offset, and a compare."""
    rows, cols = x_ref.shape
    row = jax.lax.broadcasted_iota(jnp.int32, (rows, cols), 0) + pl.program_id(0) * rows
    col = jax.lax.broadcasted_iota(jnp.int32, (rows, cols), 1)
    o_ref[...] = jnp.where(col <= row, x_ref[...], jnp.zeros_like(x_ref[...]))


def masked_max_kernel(x_ref, o_ref):
    """A band mask, then each row less its masked max (a masked softmax's first half)."""
    rows, cols = x_ref.shape
    row = jax.lax.broadcasted_iota(jnp.int32, (rows, cols), 0) + pl.program_id(0) * rows
    col = jax.lax.broadcasted_iota(jnp.int32, (rows, cols), 1)
    x = jnp.where(jnp.abs(col - row) < 256, x_ref[...].astype(jnp.float32), NEG)
    o_ref[...] = (x - jnp.max(x, axis=-1, keepdims=True)).astype(o_ref.dtype)


def cumsum_lanes_kernel(x_ref, o_ref):
    """A cumulative sum along the lanes as a matmul with an upper-triangular ones matrix."""
    cols = x_ref.shape[1]
    tri = jax.lax.broadcasted_iota(jnp.int32, (cols, cols), 0) <= jax.lax.broadcasted_iota(jnp.int32, (cols, cols), 1)
    o_ref[...] = jnp.dot(x_ref[...], tri.astype(x_ref.dtype), preferred_element_type=jnp.float32).astype(o_ref.dtype)


def cumsum_rows_kernel(x_ref, o_ref):
    """A cumulative sum down the rows by log-step shifted adds (Hillis-Steele): a token's position
    among those routed to the same expert, as MoE dispatch computes it."""
    x = x_ref[...].astype(jnp.float32)
    row = jax.lax.broadcasted_iota(jnp.int32, x.shape, 0)
    shift = 1
    while shift < x.shape[0]:
        x = x + jnp.where(row >= shift, pltpu.roll(x, shift, 0), 0.0)
        shift *= 2
    o_ref[...] = x.astype(o_ref.dtype)


def center_columns_kernel(x_ref, o_ref):
    """Each column less its mean over the block's rows: the block is read again after a
    reduction over all of it."""
    x = x_ref[...].astype(jnp.float32)
    o_ref[...] = (x - jnp.mean(x, axis=0, keepdims=True)).astype(o_ref.dtype)


def scale_by_max_kernel(x_ref, o_ref):
    """The block over its largest magnitude (a quantizer's absmax)."""
    x = x_ref[...].astype(jnp.float32)
    o_ref[...] = (x / jnp.max(jnp.abs(x))).astype(o_ref.dtype)


def column_sum_kernel(x_ref, o_ref):
    """Sums down the rows, written to an 8-row block: nothing of x is needed again."""
    total = jnp.sum(x_ref[...].astype(jnp.float32), axis=0, keepdims=True)
    o_ref[...] = jnp.broadcast_to(total, o_ref.shape).astype(o_ref.dtype)


def chain_kernel(x_ref, o_ref, *, ops: int):
    """An elementwise chain of `ops` steps in f32 (a GELU-like activation, repeated)."""
    x = x_ref[...].astype(jnp.float32)
    for _ in range(ops):
        x = 0.5 * x * (1.0 + jnp.tanh(0.79788456 * (x + 0.044715 * x * x * x)))
    o_ref[...] = x.astype(o_ref.dtype)


def chain_two_uses_kernel(x_ref, o_ref):
    """x used at both ends of a chain: sigmoid(x) * x * exp(-x) + x (the first value is live
    across the chain)."""
    x = x_ref[...].astype(jnp.float32)
    o_ref[...] = (jax.nn.sigmoid(x) * x * jnp.exp(-x) + x).astype(o_ref.dtype)


def bitonic_sort_kernel(x_ref, o_ref):
    """Each row sorted ascending by a bitonic network along the lanes: pltpu.roll brings each
    value's partner, an iota's bits say which end of the pair keeps the minimum."""
    x = x_ref[...].astype(jnp.float32)
    n = x.shape[1]
    lane = jax.lax.broadcasted_iota(jnp.int32, x.shape, 1)
    size = 2
    while size <= n:
        stride = size // 2
        while stride >= 1:
            lower = (lane & stride) == 0
            partner = jnp.where(lower, pltpu.roll(x, n - stride, 1), pltpu.roll(x, stride, 1))
            keep_min = lower == ((lane & size) == 0)
            x = jnp.where(keep_min, jnp.minimum(x, partner), jnp.maximum(x, partner))
            stride //= 2
        size *= 2
    o_ref[...] = x.astype(o_ref.dtype)


def body_temporary_cases() -> list[Case]:
    """The router family at the sizes of public MoE layers (64-256 experts, blocks of 256-2048
    tokens), the others over blocks from one vreg file (256 KiB of f32) to tens of MiB."""
    cases = []
    for kind, experts, tokens, hidden, dtype in (
        ("grouped", 256, 256, 2048, "bf16"),
        ("grouped", 256, 512, 2048, "bf16"),
        ("grouped", 256, 1024, 2048, "bf16"),
        ("grouped", 256, 2048, 1024, "bf16"),
        ("grouped", 64, 1024, 2048, "bf16"),
        ("grouped", 128, 2048, 512, "f32"),
        ("softmax", 64, 1024, 2048, "bf16"),
        ("softmax", 128, 2048, 1024, "bf16"),
        ("softmax", 256, 512, 4096, "bf16"),
    ):
        args = (((tokens * 2, hidden), dtype), ((hidden, experts), dtype))
        args += (((1, experts), "f32"),) if kind == "grouped" else ()
        cases.append(
            Case(
                f"router-{kind}-{dtype}-e{experts}-t{tokens}-h{hidden}",
                "router",
                functools.partial(router, tokens, kind),
                args,
            )
        )
    blocks = ((256, 256), (512, 1024), (1024, 1024), (1024, 2048))
    norms = {
        "softmax": (softmax_kernel, 0),
        "layernorm": (layernorm_kernel, 2),
        "rmsnorm": (rmsnorm_kernel, 1),
    }
    for name, (kernel, rows_args) in norms.items():
        for dtype in ("f32", "bf16"):
            for rows, cols in blocks:
                args = (((rows * 2, cols), dtype),) + (((1, cols), dtype),) * rows_args
                cases.append(
                    Case(
                        f"{name}-{dtype}-b{rows}x{cols}", "normalize", functools.partial(row_blocks, kernel, rows), args
                    )
                )
    shaped = {
        "mask-causal": (causal_mask_kernel, "mask"),
        "mask-bandmax": (masked_max_kernel, "mask"),
        "reduce-center": (center_columns_kernel, "reduce"),
        "reduce-absmax": (scale_by_max_kernel, "reduce"),
        "reduce-colsum": (column_sum_kernel, "reduce"),
        "chain-gelu4": (functools.partial(chain_kernel, ops=4), "elementwise"),
        "chain-twouse": (chain_two_uses_kernel, "elementwise"),
        "scan-lanes": (cumsum_lanes_kernel, "scan"),
        "scan-rows": (cumsum_rows_kernel, "scan"),
    }
    for name, (kernel, family) in shaped.items():
        for dtype in ("f32", "bf16"):
            for rows, cols in blocks:
                if name == "scan-lanes" and cols > 1024:
                    rows, cols = 2048, 1024  # the triangle is [cols, cols]
                if name == "reduce-colsum":
                    f = functools.partial(column_sum_rows, kernel, rows)
                else:
                    f = functools.partial(row_blocks, kernel, rows)
                cases.append(Case(f"{name}-{dtype}-b{rows}x{cols}", family, f, (((rows * 2, cols), dtype),)))
    for dtype in ("f32", "bf16"):
        for rows, cols in ((256, 128), (1024, 128), (2048, 256), (4096, 256)):
            cases.append(
                Case(
                    f"sort-bitonic-{dtype}-b{rows}x{cols}",
                    "sort",
                    functools.partial(row_blocks, bitonic_sort_kernel, rows),
                    (((rows * 2, cols), dtype),),
                )
            )
    return cases


def column_sum_rows(kernel, rows: int) -> Callable:
    """column_sum_kernel over `rows`-row blocks, each summed into an 8-row output block."""

    def f(x):
        total, cols = x.shape
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((total // rows * 8, cols), x.dtype),
            grid=(total // rows,),
            in_specs=[pl.BlockSpec((rows, cols), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((8, cols), lambda i: (i, 0)),
        )(x)

    return f


HELD_OUT_CASES = (pipeline_cases, quant_matmul_cases, paged_attention_cases, sparse_matmul_cases, manual_dma_cases)


def all_cases() -> list[Case]:
    """Every case, in a fixed order, ids unique."""
    cases = (
        copy_cases()
        + buffering_cases()
        + large_cases()
        + scratch_cases()
        + space_cases()
        + compute_cases()
        + library_cases()
    )
    cases += [case for make in HELD_OUT_CASES for case in make()]
    cases += body_temporary_cases()
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    assert all(c.family == family_of(c.id) for c in cases), "a case's family is its id's (bench/families.py)"
    return cases


def sample(cases: list[Case], n: int) -> list[Case]:
    """A deterministic spread of n cases: every family represented, evenly strided within it."""
    if n >= len(cases):
        return cases
    families: dict[str, list[Case]] = {}
    for case in cases:
        families.setdefault(case.family, []).append(case)
    per_family = max(1, n // len(families))
    picked = []
    for members in families.values():
        stride = max(1, math.ceil(len(members) / per_family))
        picked += members[::stride][:per_family]
    return picked[:n]
