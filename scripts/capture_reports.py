"""Regenerate the real TPU compiler texts that the report parser is tested against.

Usage: python scripts/capture_reports.py [--out OUTDIR] [CASE ...]

Each case compiles one Pallas kernel for a TPU target with no TPU attached (deviceless
compile through libtpu) and writes OUTDIR/CASE.txt: three `#` header lines (target and
device kind, versions, the kernel) then the exception text verbatim, or
"(compiled: no error)". OUTDIR is by default tests/data/reports/<libtpu version>: each
compiler's texts are kept apart, and the parser tests run on every version's. Run it with
the Python of each jax the project tests (scripts/check_range.py's environments) after a
jax or libtpu upgrade: the parser tests then show which forms changed. Large cases take
minutes (flash_attention with 8192 blocks).

Each case that reports VMEM or SMEM has a `# vmem:` directive on the line above it: the
same builder call on the same arguments, so that `vmem-lsp check` runs what the case
captures and bench/bench_explain_placement.py can compare where `explain --source`
puts the captured report with where check puts its own.
"""

from __future__ import annotations

import argparse
import functools
import os

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # another libtpu process may hold the lockfile

import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental import topologies
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import SingleDeviceSharding

TOPOLOGIES = {
    "v4": "v4:2x2x1",
    "v5e": "v5e:2x2",
    "v5p": "v5p:2x2x1",
    "v6e": "v6e:2x2",
    "v7x": "tpu7x:2x2x1",
}
NO_ERROR = "(compiled: no error)"
REPORTS = Path(__file__).resolve().parent.parent / "tests" / "data" / "reports"
MiB = 2**20


@dataclass(frozen=True)
class Case:
    name: str
    target: str  # key of TOPOLOGIES
    what: str  # the kernel, for the header
    make: Callable[[], Callable]  # builds the jitted function lazily
    args: tuple[tuple[tuple[int, ...], object], ...]  # (shape, dtype) per argument


@cache
def device(target: str):
    """The first device of a deviceless topology: compiling for it needs no TPU."""
    return topologies.get_topology_desc(platform="tpu", topology_name=TOPOLOGIES[target]).devices[0]


def compiler_params(vmem_limit_bytes: int | None) -> dict:
    return {"compiler_params": pltpu.CompilerParams(vmem_limit_bytes=vmem_limit_bytes)} if vmem_limit_bytes else {}


def whole_copy(vmem_limit_bytes: int | None = None) -> Callable:
    """One grid step, the whole array as one block in and out: single-buffered windows."""

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    def f(x):
        spec = pl.BlockSpec(x.shape, lambda: (0,) * x.ndim)
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[spec],
            out_specs=spec,
            **compiler_params(vmem_limit_bytes),
        )(x)

    return f


def rows_copy(bm: int) -> Callable:
    """A grid over row blocks: double-buffered windows."""

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def f(x):
        spec = pl.BlockSpec((bm, x.shape[1]), lambda i: (i, 0))
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(x.shape[0] // bm,),
            in_specs=[spec],
            out_specs=spec,
        )(x)

    return f


def matmul(
    bm: int, bk: int, bn: int, lhs_pipeline_mode: pl.Buffered | None = None, vmem_limit_bytes: int | None = None
) -> Callable:
    """The tiled matmul with an f32 VMEM accumulator, as in jax's ops/tpu/matmul.py."""

    def kernel(a_ref, b_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    def f(a, b):
        (m, k), (_, n) = a.shape, b.shape
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
            grid=(m // bm, n // bn, k // bk),
            in_specs=[
                pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk), pipeline_mode=lhs_pipeline_mode),
                pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
            ],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
            **compiler_params(vmem_limit_bytes),
        )(a, b)

    return f


def scratch_copy(scratch: list[tuple[tuple[int, int], object]], vmem_limit_bytes: int | None = None) -> Callable:
    """A row-block copy through the last VMEM scratch buffer. Every buffer is filled whole and read:
    the compiler drops a scratch buffer whose values it can forward or that nothing reads."""

    def kernel(x_ref, o_ref, *scratch_refs):
        for ref in scratch_refs:
            ref[...] = jnp.ones(ref.shape, ref.dtype)
        *small, big = scratch_refs
        rows, cols = pl.ds(pl.program_id(0) * 8, 8), slice(0, x_ref.shape[1])
        total = big[rows, cols] + x_ref[...]
        for ref in small:
            total += ref[...].astype(jnp.float32).sum()
        o_ref[...] = total

    def f(x):
        spec = pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0))
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(x.shape[0] // 8,),
            in_specs=[spec],
            out_specs=spec,
            scratch_shapes=[pltpu.VMEM(shape, dtype) for shape, dtype in scratch],
            **compiler_params(vmem_limit_bytes),
        )(x)

    return f


def twin_scratch(shape: tuple[int, int], vmem_limit_bytes: int) -> Callable:
    """A row-block copy through two f32 VMEM scratch buffers of one shape, each
    written from the input and read back a step later (a value in the same
    step would be forwarded and the buffer dropped): two allocations alike."""

    def kernel(x_ref, o_ref, a_ref, b_ref):
        step = pl.program_id(0)
        rows, earlier = pl.ds(step * 8, 8), pl.ds((step // 2) * 8, 8)
        a_ref[rows, :] = x_ref[...] * 2
        b_ref[rows, :] = x_ref[...] + 1
        o_ref[...] = a_ref[earlier, :] + b_ref[earlier, :]

    def f(x):
        spec = pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0))
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(x.shape[0] // 8,),
            in_specs=[spec],
            out_specs=spec,
            scratch_shapes=[pltpu.VMEM(shape, jnp.float32), pltpu.VMEM(shape, jnp.float32)],
            **compiler_params(vmem_limit_bytes),
        )(x)

    return f


@cache
def test_kernels(name: str):
    """tests/data/kernels/NAME.py, imported by path: pipelines (kernels whose body allocates,
    emit_pipeline and run_scoped), compile_errors (one small kernel per kind of compile error)."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "tests" / "data" / "kernels" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sharded(target: str, name: str, shape: tuple[int, ...], dtype) -> Callable:
    """compile_errors.py's `name` compiled with its argument sharded over every device of the target's
    topology (rows split over a 1-D mesh): what XLA's SPMD partitioner makes of a pallas_call. That
    compile runs here, inside compile_text's try (it calls make() there), so its exception is the
    case's text; if it compiled, the plain function is returned and compiles on one device."""
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    fn = getattr(test_kernels("compile_errors"), name)
    devices = topologies.get_topology_desc(platform="tpu", topology_name=TOPOLOGIES[target]).devices
    rows = NamedSharding(Mesh(np.array(devices), ("x",)), PartitionSpec("x"))
    with jax.default_device(devices[0]):
        jax.jit(fn).lower(jax.ShapeDtypeStruct(shape, dtype, sharding=rows)).compile()
    return fn


def constant_output(rows: int, cols: int, steps: int) -> Callable:
    """grid=(steps,): the input walks its rows; the output's index map is (0, 0) whatever the step."""

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def f(x):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((2 * rows, cols), x.dtype),
            grid=(steps,),
            in_specs=[pl.BlockSpec((rows, cols), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((rows, cols), lambda i: (0, 0)),
        )(x)

    return f


def smem_prefetch() -> Callable:
    """Row gather driven by a scalar-prefetched index table too big for SMEM."""

    def kernel(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def f(idx, x):
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(x.shape[0] // 8,),
            in_specs=[pl.BlockSpec((8, x.shape[1]), lambda i, idx: (idx[i], 0))],
            out_specs=pl.BlockSpec((8, x.shape[1]), lambda i, idx: (i, 0)),
        )
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid_spec=grid_spec)(idx, x)

    return f


def smem_scratch(n: int) -> Callable:
    """A row copy with an int32 SMEM scratch table too big for SMEM."""

    def kernel(x_ref, o_ref, table_ref):
        table_ref[0] = 1
        o_ref[...] = x_ref[...] * table_ref[0]

    def f(x):
        spec = pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0))
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(x.shape[0] // 8,),
            in_specs=[spec],
            out_specs=spec,
            scratch_shapes=[pltpu.SMEM((n,), jnp.int32)],
        )(x)

    return f


def copy_all() -> Callable:
    """Copies every argument whole to an output of its own: one single-buffered window per array."""

    def kernel(*refs):
        ins, outs = refs[: len(refs) // 2], refs[len(refs) // 2 :]
        for i, o in zip(ins, outs):
            o[...] = i[...]

    def f(*xs):
        specs = [pl.BlockSpec(x.shape, (lambda n: lambda: (0,) * n)(x.ndim)) for x in xs]
        return pl.pallas_call(
            kernel, out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs], in_specs=specs, out_specs=specs
        )(*xs)

    return f


def blocked_copy(in_block: tuple[int, ...], out_block: tuple[int, ...], steps: int) -> Callable:
    """A copy over `steps` grid steps with the given (possibly invalid) block shapes."""

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def f(x):
        def spec(block):
            return pl.BlockSpec(block, lambda i: (i,) + (0,) * (len(block) - 1))

        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(steps,),
            in_specs=[spec(in_block)],
            out_specs=spec(out_block),
        )(x)

    return f


def extent_one_copy(bm: int, bn: int, steps: int) -> Callable:
    """grid=(1, steps): the input's index map reads only the axis of extent 1, the output's both.
    The input array is larger than its block, so Pallas does not force one buffer itself (a block
    that is the whole array at literal zero indices is "trivial": pipeline_mode Buffered(1))."""

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    def f(x):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((bm, bn * steps), x.dtype),
            grid=(1, steps),
            in_specs=[pl.BlockSpec((bm, bn), lambda i, j: (i, 0))],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        )(x)

    return f


def flash(block: int) -> Callable:
    """jax's own flash_attention with every block size set to `block`."""
    from jax.experimental.pallas.ops.tpu.flash_attention import BlockSizes, flash_attention

    sizes = BlockSizes(block_q=block, block_k_major=block, block_k=block, block_b=1)
    return lambda q, k, v: flash_attention(q, k, v, block_sizes=sizes)


F32, BF16, I8, I32 = jnp.float32, jnp.bfloat16, jnp.int8, jnp.int32
F8 = jnp.float8_e4m3fn
F32_4K = (((4096, 4096), F32),)
MATMUL_8K = (((8192, 8192), BF16),) * 2
QKV_8K = (((1, 8, 8192, 128), BF16),) * 3
SMALL_ODD = (((8, 100), BF16), ((3, 128), BF16), ((3, 100), I8))
GATHER = (((1 << 20,), I32), ((64, 128), F32))

CASES = (
    # Over physical VMEM: "Ran out of memory ... Largest program allocations".
    # vmem: whole_copy()(f32[4096, 4096])
    Case(
        "physical-breakdown-v6e",
        "v6e",
        "single-step copy kernel, f32[4096,4096] in and out as one block",
        whole_copy,
        F32_4K,
    ),
    # vmem: whole_copy()(f32[4096, 4096])
    Case("physical-breakdown-v5p", "v5p", "the same single-step copy kernel on v5p (64 MiB VMEM)", whole_copy, F32_4K),
    # vmem: whole_copy()(f32[4096, 4096])
    Case("physical-breakdown-v7x", "v7x", "the same single-step copy kernel on v7x (64 MiB VMEM)", whole_copy, F32_4K),
    # vmem: matmul(2048, 2048, 2048)(bf16[8192, 8192], bf16[8192, 8192])
    Case(
        "matmul-breakdown-v5p",
        "v5p",
        "bf16 matmul 8192^3, blocks 2048/2048/2048, f32 VMEM accumulator",
        lambda: matmul(2048, 2048, 2048),
        MATMUL_8K,
    ),
    # vmem: matmul(2048, 2048, 2048)(bf16[8192, 8192], bf16[8192, 8192])
    Case(
        "matmul-breakdown-v7x",
        "v7x",
        "bf16 matmul 8192^3, blocks 2048/2048/2048, f32 VMEM accumulator",
        lambda: matmul(2048, 2048, 2048),
        MATMUL_8K,
    ),
    # vmem: matmul(2048, 2048, 2048, pl.Buffered(1))(bf16[8192, 8192], bf16[8192, 8192])
    Case(
        "matmul-buffered1-v5p",
        "v5p",
        "the same matmul with pipeline_mode=pl.Buffered(1) on the lhs BlockSpec",
        lambda: matmul(2048, 2048, 2048, pl.Buffered(1)),
        MATMUL_8K,
    ),
    # vmem: flash(8192)(bf16[1, 8, 8192, 128], bf16[1, 8, 8192, 128], bf16[1, 8, 8192, 128])
    Case(
        "spills-breakdown-v5e",
        "v5e",
        "jax's flash_attention, bf16[1,8,8192,128], all block sizes 8192",
        lambda: flash(8192),
        QKV_8K,
    ),
    # vmem: copy_all()(bf16[8, 100], bf16[3, 128], s8[3, 100], f32[4096, 4096])
    Case(
        "padded-windows-v6e",
        "v6e",
        "copy of whole arrays bf16[8,100], bf16[3,128], s8[3,100], f32[4096,4096], each to its own output",
        copy_all,
        SMALL_ODD + F32_4K,
    ),
    # vmem: copy_all()(bf16[8, 100], bf16[3, 128], s8[3, 100], f32[4096, 4096])
    Case("padded-windows-v7x", "v7x", "the same whole-array copies on v7x", copy_all, SMALL_ODD + F32_4K),
    # vmem: rows_copy(131072)(bf16[262144, 100])
    Case(
        "padded-rows-v5p",
        "v5p",
        "bf16 row copy, block (131072, 100) of bf16[262144,100] (100 is not a lane multiple)",
        lambda: rows_copy(131072),
        (((262144, 100), BF16),),
    ),
    # vmem: scratch_copy([((8, 100), BF16), ((3, 128), BF16), ((3, 100), I8), ((8192, 4096), F32)], 120 * MiB)(f32[64, 1024])
    Case(
        "padded-scratch-v6e",
        "v6e",
        "f32 row copy, block (8, 1024), scratch_shapes VMEM bf16(8,100), bf16(3,128), "
        "s8(3,100), f32(8192,4096), vmem_limit_bytes=120 MiB",
        lambda: scratch_copy([((8, 100), BF16), ((3, 128), BF16), ((3, 100), I8), ((8192, 4096), F32)], 120 * MiB),
        (((64, 1024), F32),),
    ),
    # vmem: extent_one_copy(4096, 4096, 8)(f32[8192, 4096])
    Case(
        "extent1-grid-v6e",
        "v6e",
        "f32 copy, grid=(1, 8), blocks (4096, 4096): input f32[8192,4096] with index map "
        "(i, 0), reading only the axis of extent 1; output (i, j)",
        lambda: extent_one_copy(4096, 4096, 8),
        (((8192, 4096), F32),),
    ),
    # vmem: twin_scratch((4096, 4096), 120 * MiB)(f32[4096, 4096])
    Case(
        "twin-scratch-v6e",
        "v6e",
        "f32 row copy, block (8, 4096), two scratch_shapes VMEM f32(4096,4096) written "
        "and read: two allocations alike, 64 MiB each, vmem_limit_bytes=120 MiB",
        lambda: twin_scratch((4096, 4096), 120 * MiB),
        (((4096, 4096), F32),),
    ),
    # vmem: constant_output(3072, 4096, 8)(f32[24576, 4096])
    Case(
        "const-out-v6e",
        "v6e",
        "f32 copy, grid=(8,), blocks (3072, 4096): input index map (i, 0), output (0, 0) "
        "of f32[6144,4096]: a constant output",
        lambda: constant_output(3072, 4096, 8),
        (((24576, 4096), F32),),
    ),
    # VMEM the kernel body allocates: "scoped memory for <function>", sizes only.
    # vmem: test_kernels("pipelines").flat(f32[8192, 8192], bm=1024)
    Case(
        "pipeline-flat-v6e",
        "v6e",
        "tests/data/kernels/pipelines.py flat: emit_pipeline of a copy, f32[8192,8192] "
        "in HBM, inner blocks (1024, 8192)",
        lambda: functools.partial(test_kernels("pipelines").flat, bm=1024),
        (((8192, 8192), F32),),
    ),
    # vmem: test_kernels("pipelines").in_a_row(f32[8192, 8192], bm=1024)
    Case(
        "pipeline-in-a-row-v6e",
        "v6e",
        "pipelines.py in_a_row: two such emit_pipelines one after the other",
        lambda: functools.partial(test_kernels("pipelines").in_a_row, bm=1024),
        (((8192, 8192), F32),),
    ),
    # vmem: test_kernels("pipelines").buffered(f32[8192, 8192], bm=2048)
    Case(
        "pipeline-buffered1-v6e",
        "v6e",
        "pipelines.py buffered: inner input Buffered(1), blocks (2048, 8192)",
        lambda: functools.partial(test_kernels("pipelines").buffered, bm=2048),
        (((8192, 8192), F32),),
    ),
    # vmem: test_kernels("pipelines").scoped(f32[4096, 4104])
    Case(
        "run-scoped-v6e",
        "v6e",
        "pipelines.py scoped: pl.run_scoped of two VMEM f32[4096,4104] (lanes padded)",
        lambda: test_kernels("pipelines").scoped,
        (((4096, 4104), F32),),
    ),
    # Over the scoped limit: E1001, totals only.
    # vmem: matmul(1024, 1024, 1024)(bf16[8192, 8192], bf16[8192, 8192])
    Case(
        "scoped-e1001-v5e",
        "v5e",
        "bf16 matmul 8192^3, blocks 1024/1024/1024, f32 VMEM accumulator",
        lambda: matmul(1024, 1024, 1024),
        MATMUL_8K,
    ),
    # vmem: rows_copy(1024)(f32[8192, 4096])
    Case(
        "scoped-e1001-v6e",
        "v6e",
        "f32 copy kernel, grid over rows, block (1024, 4096) of f32[8192,4096]",
        lambda: rows_copy(1024),
        (((8192, 4096), F32),),
    ),
    # vmem: flash(4096)(bf16[1, 8, 8192, 128], bf16[1, 8, 8192, 128], bf16[1, 8, 8192, 128])
    Case(
        "scoped-e1001-library-v5e",
        "v5e",
        "jax's flash_attention, bf16[1,8,8192,128], all block sizes 4096",
        lambda: flash(4096),
        QKV_8K,
    ),
    # One allocation bigger than the memory: "Allocation (size=...) would exceed memory".
    # vmem: whole_copy(200 * MiB)(f32[6144, 6144])
    Case(
        "single-allocation-v5e",
        "v5e",
        "single-step copy kernel, f32[6144,6144], vmem_limit_bytes=200 MiB",
        lambda: whole_copy(200 * MiB),
        (((6144, 6144), F32),),
    ),
    # vmem: whole_copy()(f32[4096, 4096])
    Case(
        "single-allocation-v4", "v4", "single-step copy kernel, f32[4096,4096] on v4 (16 MiB VMEM)", whole_copy, F32_4K
    ),
    # vmem: scratch_copy([((16384, 4096), F32)])(f32[64, 1024])
    Case(
        "scratch-single-allocation-v6e",
        "v6e",
        "f32 row copy, block (8, 1024), scratch_shapes=[pltpu.VMEM((16384, 4096), f32)] (256 MiB)",
        lambda: scratch_copy([((16384, 4096), F32)]),
        (((64, 1024), F32),),
    ),
    # vmem: smem_prefetch()(s32[1048576], f32[64, 128])
    Case(
        "smem-prefetch-v5e",
        "v5e",
        "row gather, PrefetchScalarGridSpec with an int32[1048576] index table",
        smem_prefetch,
        GATHER,
    ),
    # vmem: smem_prefetch()(s32[1048576], f32[64, 128])
    Case("smem-prefetch-v7x", "v7x", "the same row gather on v7x", smem_prefetch, GATHER),
    # vmem: smem_scratch(1 << 20)(f32[64, 128])
    Case(
        "smem-scratch-v6e",
        "v6e",
        "f32 row copy with scratch_shapes=[pltpu.SMEM((1048576,), int32)]",
        lambda: smem_scratch(1 << 20),
        (((64, 128), F32),),
    ),
    # Block shapes the lowering refuses.
    Case(
        "block-shape-v6e",
        "v6e",
        "f32[64,256] copy with block (7, 100): neither (8, 128)-aligned nor full",
        lambda: blocked_copy((7, 100), (7, 100), 8),
        (((64, 256), F32),),
    ),
    Case(
        "block-shape-rank-v6e",
        "v6e",
        "f32[64,256] copy with out block (8,): rank differs from the array's",
        lambda: blocked_copy((8, 256), (8,), 8),
        (((64, 256), F32),),
    ),
    Case(
        "block-shape-mosaic-v6e",
        "v6e",
        "s8[64,128] copy with block (8, 128): passes JAX, not int8's (32, 128) tile",
        lambda: blocked_copy((8, 128), (8, 128), 8),
        (((64, 128), I8),),
    ),
    Case(
        "compiles-v6e",
        "v6e",
        "f32 copy kernel, grid over rows, block (256, 1024) of f32[1024,1024]",
        lambda: rows_copy(256),
        (((1024, 1024), F32),),
    ),
    # Kernels the compiler refuses for a reason other than memory (issue 17): the kernels are
    # tests/data/kernels/compile_errors.py, tests/data/reports/ERRORS.md maps each text to its line.
    Case(
        "err-block-jax-v6e",
        "v6e",
        "compile_errors.py add_blocks: f32[1000,1000] add, blocks (100, 100)",
        lambda: test_kernels("compile_errors").add_blocks,
        (((1000, 1000), F32),) * 2,
    ),
    Case(
        "err-block-rank1-v6e",
        "v6e",
        "compile_errors.py add_rank1: f32[1000] add, rank-1 blocks (100,)",
        lambda: test_kernels("compile_errors").add_rank1,
        (((1000,), F32),) * 2,
    ),
    Case(
        "err-block-mosaic-v6e",
        "v6e",
        "compile_errors.py copy_int8_rows: s8[64,256] copy, blocks (8, 256): "
        "passes JAX's (8, 128) check, not int8's (32, 128) tiling",
        lambda: test_kernels("compile_errors").copy_int8_rows,
        (((64, 256), I8),),
    ),
    Case(
        "err-align-v6e",
        "v6e",
        "compile_errors.py shifted_window: f32[8,1024], x_ref[:, pl.ds(program_id*3+1, 128)]",
        lambda: test_kernels("compile_errors").shifted_window,
        (((8, 1024), F32),),
    ),
    Case(
        "err-prim-sort-v6e",
        "v6e",
        "compile_errors.py sort_rows: jnp.sort of f32[8,128] in the body",
        lambda: test_kernels("compile_errors").sort_rows,
        (((8, 128), F32),),
    ),
    Case(
        "err-prim-mosaic-v6e",
        "v6e",
        "compile_errors.py fold_rows: f32[8,100] reshaped to (4, 200) in the body",
        lambda: test_kernels("compile_errors").fold_rows,
        (((8, 100), F32),),
    ),
    Case(
        "err-dtype-int8-v4",
        "v4",
        "compile_errors.py int8_matmul: s8[256,256] @ s8[256,256] -> s32, on v4",
        lambda: test_kernels("compile_errors").int8_matmul,
        (((256, 256), I8),) * 2,
    ),
    Case(
        "err-dtype-int8-v5e",
        "v5e",
        "compile_errors.py int8_matmul: the same int8 matmul on v5e",
        lambda: test_kernels("compile_errors").int8_matmul,
        (((256, 256), I8),) * 2,
    ),
    Case(
        "err-dtype-fp8-v4",
        "v4",
        "compile_errors.py fp8_matmul: f8e4m3fn[256,256] @ f8e4m3fn[256,256] -> f32, on v4",
        lambda: test_kernels("compile_errors").fp8_matmul,
        (((256, 256), F8),) * 2,
    ),
    Case(
        "err-dtype-fp8-v6e",
        "v6e",
        "compile_errors.py fp8_matmul: the same fp8 matmul on v6e",
        lambda: test_kernels("compile_errors").fp8_matmul,
        (((256, 256), F8),) * 2,
    ),
    Case(
        "err-dtype-cmp-v4",
        "v4",
        "compile_errors.py int8_min: where(x < y, x, y) of s8[32,128], on v4",
        lambda: test_kernels("compile_errors").int8_min,
        (((32, 128), I8),) * 2,
    ),
    Case(
        "err-dtype-cmp-v6e",
        "v6e",
        "compile_errors.py int8_min: the same int8 comparison on v6e",
        lambda: test_kernels("compile_errors").int8_min,
        (((32, 128), I8),) * 2,
    ),
    Case(
        "err-dtype-bf16cmp-v5e",
        "v5e",
        "compile_errors.py bf16_mask: where(x < y, 1.0, 0.0) of bf16[16,128] -> f32, on v5e",
        lambda: test_kernels("compile_errors").bf16_mask,
        (((16, 128), BF16),) * 2,
    ),
    Case(
        "err-dtype-bf16cmp-v6e",
        "v6e",
        "compile_errors.py bf16_mask: the same bf16 comparison on v6e",
        lambda: test_kernels("compile_errors").bf16_mask,
        (((16, 128), BF16),) * 2,
    ),
    Case(
        "err-dtype-bf16cmp-v7x",
        "v7x",
        "compile_errors.py bf16_mask: the same bf16 comparison on v7x",
        lambda: test_kernels("compile_errors").bf16_mask,
        (((16, 128), BF16),) * 2,
    ),
    Case(
        "err-dtype-scalar-v6e",
        "v6e",
        "compile_errors.py bf16_broadcast_element: x_ref[...][3, 5] of bf16[16,128] as a scalar",
        lambda: test_kernels("compile_errors").bf16_broadcast_element,
        (((16, 128), BF16),),
    ),
    Case(
        "err-smem-load-v6e",
        "v6e",
        "compile_errors.py smem_vector: f32[8,128] in SMEM read whole as a vector",
        lambda: test_kernels("compile_errors").smem_vector,
        (((8, 128), F32),),
    ),
    Case(
        "err-partition-v6e",
        "v6e",
        "compile_errors.py double: f32[32,128] sharded by rows over the 4 devices of v6e:2x2 under jit",
        lambda: sharded("v6e", "double", (32, 128), F32),
        (((32, 128), F32),),
    ),
    Case(
        "err-dtype-int8-add-v6e",
        "v6e",
        "compile_errors.py int8_add: x + y of s8[32,128] (arith.addi on i8); the same text on v4, v5e, v5p and v7x",
        lambda: test_kernels("compile_errors").int8_add,
        (((32, 128), I8),) * 2,
    ),
)


def compile_text(case: Case) -> str:
    """The compiler's exception text for the case, or NO_ERROR."""
    dev = device(case.target)
    args = [jax.ShapeDtypeStruct(shape, dtype, sharding=SingleDeviceSharding(dev)) for shape, dtype in case.args]
    try:
        with jax.default_device(dev):  # Pallas asks the default device's kind while lowering
            jax.jit(case.make()).lower(*args).compile()
    except Exception as e:  # every failure, from JAX or from libtpu, is a text to keep
        return str(e) or repr(e)  # jax 0.8's emit_pipeline raises a bare NotImplementedError()
    return NO_ERROR


def header(case: Case) -> str:
    return (
        f"# target: {case.target} ({device(case.target).device_kind}), topology {TOPOLOGIES[case.target]}\n"
        f"# versions: jax {jax.__version__}, libtpu {version('libtpu')}\n"
        f"# kernel: {case.what}\n"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPORTS / version("libtpu"), help="default: %(default)s")
    parser.add_argument("cases", nargs="*", metavar="CASE", help="the cases to capture (default: all)")
    args = parser.parse_args(argv)
    out, wanted = args.out, set(args.cases)
    unknown = wanted - {c.name for c in CASES}
    if unknown:
        print(f"unknown cases: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        if wanted and case.name not in wanted:
            continue
        text = compile_text(case)
        (out / f"{case.name}.txt").write_text(header(case) + text + "\n")
        print(f"{case.name}: {text.splitlines()[0][:110] if text else '(empty)'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
