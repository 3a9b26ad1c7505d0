"""A corpus of Pallas TPU kernels to measure the layout model against the compiler.

Each Case is deterministic and has a stable id that says what it is; `make()` returns
the function to trace and `args` the (shape, dtype) of its arguments. The families
vary one thing at a time around a plain copy (rank, dtype, block, grid, index map,
buffering, memory space, scratch, prefetch, aliasing), and add jax's own TPU kernels
(flash_attention, matmul, megablox gmm) at several block sizes.

Imports jax: only the harness's compile workers load it.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

DTYPES = {
    "f32": jnp.float32, "bf16": jnp.bfloat16, "f16": jnp.float16, "s32": jnp.int32, "s8": jnp.int8,
    "u8": jnp.uint8, "f8e4m3fn": jnp.float8_e4m3fn, "f8e5m2": jnp.float8_e5m2, "pred": jnp.bool_,
    "s4": jnp.int4,
}
MiB = 1 << 20


@dataclass(frozen=True)
class Case:
    id: str
    family: str
    make: Callable[[], Callable]
    args: tuple[tuple[tuple[int, ...], str], ...]    # (shape, dtype key of DTYPES) per argument


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


def copy(block: tuple[int, ...], steps: int, in_mode: int | None = None, out_mode: int | None = None,
         constant_input: bool = False, grid_rank: int = 1, vmem_limit_bytes: int | None = None) -> Callable:
    """Copy over `steps` row blocks; the grid has `grid_rank` dims (the others of size 1, or
    none at all for grid_rank 0). pl.Buffered(n) when a mode is given."""
    grid = () if grid_rank == 0 else (steps,) + (1,) * (grid_rank - 1)

    def spec(moving: bool, mode: int | None):
        extra = {"pipeline_mode": pl.Buffered(mode)} if mode else {}
        return pl.BlockSpec(block, block_index(block, moving, grid_rank), **extra)

    def f(x):
        return pl.pallas_call(copy_kernel, out_shape=out_like(x), grid=grid,
                              in_specs=[spec(not constant_input, in_mode)], out_specs=spec(True, out_mode),
                              **params(vmem_limit_bytes))(x)
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
            cases.append(Case(f"buffering-{label}-{name}", "buffering", functools.partial(copy, block, **kw),
                              ((full, dtype),)))
    return cases


def large_cases() -> list[Case]:
    """Blocks around the scoped limits (16, 32 MiB) and the capacities (16, 64, 128 MiB)."""
    cases = []
    for dtype, rows, cols in (("f32", 512, 2048), ("f32", 1024, 2048), ("f32", 1024, 4096), ("bf16", 2048, 2048),
                              ("f32", 2048, 2048), ("f32", 2048, 4096), ("bf16", 4096, 2000), ("s8", 4096, 4096),
                              ("f32", 1000, 1000), ("bf16", 8192, 1024), ("f32", 4096, 4096)):
        for steps in (1, 2):
            cid = f"large-{dtype}-b{rows}x{cols}-g{steps}"
            cases.append(Case(cid, "large", functools.partial(copy, (rows, cols), steps),
                              (((rows * steps, cols), dtype),)))
    for limit_mib in (8, 48, 100):
        cases.append(Case(f"large-f32-b1024x2048-g2-limit{limit_mib}M", "large",
                          functools.partial(copy, (1024, 2048), 2, vmem_limit_bytes=limit_mib * MiB),
                          (((2048, 2048), "f32"),)))
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
        return pl.pallas_call(scratch_kernel, out_shape=out_like(x), grid=(steps,), in_specs=[spec],
                              out_specs=spec,
                              scratch_shapes=[pltpu.VMEM(s, DTYPES[d]) for s, d in shapes])(x)
    return f


def scratch_cases() -> list[Case]:
    cases = []
    shapes = [(8, 128), (3, 100), (16, 256), (1, 128), (24, 200), (2, 8, 128), (3, 5, 100), (1024,), (100,),
              (512, 1024), (2048, 2048)]
    for shape in shapes:
        for dtype in ("f32", "bf16", "f16", "s32", "s8", "u8", "f8e4m3fn", "pred"):
            cid = f"scratch-{dtype}-s{'x'.join(map(str, shape))}"
            cases.append(Case(cid, "scratch", functools.partial(with_scratch, ((shape, dtype),)),
                              (((32, 128), "f32"),)))
    mixed = (((8, 100), "bf16"), ((3, 128), "bf16"), ((3, 100), "s8"), ((64, 256), "f32"))
    cases.append(Case("scratch-mixed4", "scratch", functools.partial(with_scratch, mixed), (((32, 128), "f32"),)))
    return cases


def smem_scratch_kernel(x_ref, o_ref, table_ref):
    table_ref[0] = pl.program_id(0)
    o_ref[...] = x_ref[...] + table_ref[0].astype(jnp.float32)


def smem_scratch(n: int) -> Callable:
    def f(x):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(smem_scratch_kernel, out_shape=out_like(x), grid=(4,), in_specs=[spec],
                              out_specs=spec, scratch_shapes=[pltpu.SMEM((n,), jnp.int32)])(x)
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
        return pl.pallas_call(dma_kernel, out_shape=out_like(x), grid=(x.shape[0] // block[0],),
                              in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=spec,
                              scratch_shapes=[pltpu.VMEM(block, DTYPES[dtype]),
                                              pltpu.SemaphoreType.DMA((semaphores,))])(x)
    return f


def smem_operand_kernel(s_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] * s_ref[0].astype(x_ref.dtype)


def smem_operand(n: int, block: tuple[int, int]) -> Callable:
    def f(s, x):
        spec = pl.BlockSpec(block, lambda i: (i, 0))
        return pl.pallas_call(smem_operand_kernel, out_shape=out_like(x), grid=(x.shape[0] // block[0],),
                              in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), spec], out_specs=spec)(s, x)
    return f


def prefetch_kernel(idx_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...]


def prefetch(n: int, block: tuple[int, int]) -> Callable:
    """Row gather driven by a scalar-prefetched index table."""
    def f(idx, x):
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(x.shape[0] // block[0],),
            in_specs=[pl.BlockSpec(block, lambda i, idx: (idx[i], 0))],
            out_specs=pl.BlockSpec(block, lambda i, idx: (i, 0)))
        return pl.pallas_call(prefetch_kernel, out_shape=out_like(x), grid_spec=grid_spec)(idx, x)
    return f


def alias_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def aliased(block: tuple[int, int], steps: int) -> Callable:
    """o = x + y with x's buffer reused for o (input_output_aliases={0: 0})."""
    def f(x, y):
        spec = pl.BlockSpec(block, lambda i: (i, 0))
        return pl.pallas_call(alias_kernel, out_shape=out_like(x), grid=(steps,), in_specs=[spec, spec],
                              out_specs=spec, input_output_aliases={0: 0})(x, y)
    return f


def space_cases() -> list[Case]:
    cases = []
    for block, dtype in (((8, 128), "f32"), ((256, 512), "f32"), ((24, 200), "bf16"), ((64, 256), "s8")):
        for sems in (1, 4):
            cid = f"any-dma-{dtype}-b{block[0]}x{block[1]}-sem{sems}"
            cases.append(Case(cid, "space", functools.partial(any_dma, block, dtype, sems),
                              (((block[0] * 4, block[1]), dtype),)))
    for n in (16, 1024):
        for block in ((8, 128), (128, 256)):
            cases.append(Case(f"smem-operand-n{n}-b{block[0]}x{block[1]}", "space",
                              functools.partial(smem_operand, n, block),
                              (((n,), "s32"), ((block[0] * 4, block[1]), "f32"))))
        cases.append(Case(f"smem-scratch-n{n}", "space", functools.partial(smem_scratch, n), (((32, 128), "f32"),)))
    for n in (4, 64, 4096):
        for block in ((8, 128), (64, 512)):
            steps = 4
            cases.append(Case(f"prefetch-n{n}-b{block[0]}x{block[1]}", "space", functools.partial(prefetch, n, block),
                              (((max(n, steps),), "s32"), ((block[0] * max(n, steps), block[1]), "f32"))))
    for block, steps in (((8, 128), 4), ((256, 512), 4), ((512, 1024), 1)):
        full = (block[0] * steps, block[1])
        cases.append(Case(f"alias-f32-b{block[0]}x{block[1]}-g{steps}", "space", functools.partial(aliased, block, steps),
                          ((full, "f32"), (full, "f32"))))
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
            matmul_kernel, out_shape=jax.ShapeDtypeStruct((m, n), a.dtype), grid=(m // bm, n // bn, k // bk),
            in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk), **extra),
                      pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), DTYPES[acc])])(a, b)
    return f


def reduce_kernel(x_ref, o_ref):
    o_ref[...] = jnp.sum(x_ref[...].astype(jnp.float32), axis=-1, keepdims=True) * jnp.ones(o_ref.shape, o_ref.dtype)


def row_sum(block: tuple[int, int]) -> Callable:
    def f(x):
        return pl.pallas_call(reduce_kernel, out_shape=jax.ShapeDtypeStruct((x.shape[0], 128), jnp.float32),
                              grid=(x.shape[0] // block[0],),
                              in_specs=[pl.BlockSpec(block, lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((block[0], 128), lambda i: (i, 0)))(x)
    return f


def compute_cases() -> list[Case]:
    cases = []
    for dtype, acc in (("bf16", "f32"), ("f32", "f32"), ("s8", "s32")):
        for bm, bk, bn in ((128, 128, 128), (256, 512, 256), (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048)):
            m = k = n = max(2 * bm, 1024)
            cases.append(Case(f"matmul-{dtype}-{bm}x{bk}x{bn}", "compute",
                              functools.partial(tiled_matmul, bm, bk, bn, acc), (((m, k), dtype), ((k, n), dtype))))
    cases.append(Case("matmul-bf16-1024x1024x1024-lhsbuf1", "compute",
                      functools.partial(tiled_matmul, 1024, 1024, 1024, "f32", 1),
                      (((2048, 2048), "bf16"), ((2048, 2048), "bf16"))))
    for dtype in ("f32", "bf16"):
        for block in ((8, 128), (256, 1024), (1024, 2048)):
            cases.append(Case(f"rowsum-{dtype}-b{block[0]}x{block[1]}", "compute", functools.partial(row_sum, block),
                              (((block[0] * 4, block[1]), dtype),)))
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
                cases.append(Case(f"flash-{dtype}-b{block}{'-causal' if causal else ''}", "library",
                                  functools.partial(flash, block, causal), qkv))
    for dtype in ("bf16", "f32", "s8"):
        for bm, bn, bk in ((128, 128, 128), (256, 256, 512), (512, 512, 512), (1024, 1024, 1024), (2048, 1024, 512)):
            size = max(2 * bm, 2 * bn, 2 * bk, 1024)
            cases.append(Case(f"jaxmatmul-{dtype}-{bm}x{bn}x{bk}", "library", functools.partial(jax_matmul, bm, bn, bk),
                              (((size, size), dtype), ((size, size), dtype))))
    for dtype in ("bf16", "f32"):
        for tiling in ((128, 128, 128), (256, 512, 256), (512, 1024, 1024), (1024, 2048, 1024)):
            m, k, n, groups = 4096, 2048, 2048, 4
            cases.append(Case(f"gmm-{dtype}-{'x'.join(map(str, tiling))}", "library", functools.partial(gmm, tiling),
                              (((m, k), dtype), ((groups, k, n), dtype), ((groups,), "s32"))))
    return cases


def all_cases() -> list[Case]:
    """Every case, in a fixed order, ids unique."""
    cases = (copy_cases() + buffering_cases() + large_cases() + scratch_cases() + space_cases() + compute_cases()
             + library_cases())
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "case ids must be unique"
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
