"""Specs passed through pytree constructors, and windows over grid axes of extent 1,
end to end: the real CLI, the real compiler (deviceless v6e), the layout model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from support import KERNELS, line_of, reports
from support.cli import run_json

from vmem_lsp.tpu.parse import parse_report

KERNEL = KERNELS / "pytree_specs.py"
RELATIVE = "tests/data/kernels/pytree_specs.py"
REPORTS = reports.folder()


@pytest.fixture(scope="module")
def compiled(cache_dir):
    done, report = run_json("check", RELATIVE, "--target", "v6e", "--cache-dir", str(cache_dir))
    assert done.returncode == 1, done.stderr
    return report["diagnostics"]


@pytest.fixture(scope="module")
def modelled():
    done, report = run_json("check", RELATIVE, "--target", "v6e", "--no-compile", "--no-cache")
    assert done.returncode == 1 and "traced (layout model only)" in report["summary"], done.stderr
    return report["diagnostics"]


def windows(diagnostics, example_needle: str) -> dict[str, dict]:
    """VMEM001 of one example, by the message's head ("output 0", "input 0")."""
    example = f"{KERNEL}:{line_of(KERNEL, example_needle)}"
    return {
        " ".join(d["message"].split()[:2]): d
        for d in diagnostics
        if d["code"] == "VMEM001" and d["facts"]["example"] == example
    }


def at_block_shape(d: dict, needle: str, block: str = "(BM, n)") -> None:
    """The diagnostic covers the block shape of the spec written on the line holding `needle`."""
    line = line_of(KERNEL, needle)
    text = KERNEL.read_text().splitlines()[line - 1]
    assert (d["range"]["start_line"], d["range"]["start_col"], d["range"]["end_col"]) == (
        line,
        text.index(block),
        text.index(block) + len(block),
    ), d


def test_namedtuple_out_specs_land_on_their_own_specs(compiled):
    """Written b first, after a line of French: output 0 is field a, output 1 is b, each on its own spec."""
    found = windows(compiled, "# vmem: named_outputs")
    assert set(found) == {"input 0", "output 0", "output 1"}
    at_block_shape(found["output 0"], "a=pl.BlockSpec(")
    at_block_shape(found["output 1"], "b=pl.BlockSpec(")
    at_block_shape(
        found["input 0"],
        "in_specs=[pl.BlockSpec((BM, n)",
    )
    assert found["output 0"]["message"].startswith("output 0 window f32[4096,4096] = 128.00M, double buffered;")


def test_registered_dataclass_out_specs_land_where_each_spec_is_made(compiled):
    found = windows(compiled, "# vmem: dataclass_outputs")
    at_block_shape(found["output 0"], "top_spec = pl.BlockSpec(")
    at_block_shape(found["output 1"], "bottom_spec = pl.BlockSpec(")


def test_the_model_single_buffers_a_window_read_only_through_extent_one_axes(modelled, compiled):
    """grid=(1, 8): the input's index map (i, 0) reads only the axis of extent 1. The model, without
    compiling, gives it one buffer and the output (i, j) two, as the compiler did: in this run and in
    extent1-grid-v6e, captured by scripts/capture_reports.py from the same kernel."""
    model = windows(modelled, "# vmem: extent_one")
    real = windows(compiled, "# vmem: extent_one")
    assert {k: d["facts"]["buffers"] for k, d in model.items()} == {"input 0": 1, "output 0": 2}
    assert {k: (d["facts"]["buffers"], d["facts"]["size"]) for k, d in model.items()} == {
        k: (d["facts"]["buffers"], d["facts"]["size"]) for k, d in real.items()
    }
    captured = parse_report((REPORTS / "extent1-grid-v6e.txt").read_text())
    by_kind = {(a.kind, a.operand_index): (a.buffers, a.size) for a in captured.allocations}
    assert by_kind == {("input_window", 0): (1, 64 << 20), ("output_window", 0): (2, 128 << 20)}
    assert model["input 0"]["facts"]["used"] == captured.used


# --- which index maps the worker calls constant (fast: a trace, no compile) -------------------------


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _prefetch_copy(idx_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _constant(grid, index_map, prefetch: bool = False) -> bool:
    from vmem_lsp.compile import capture, tracing

    block = (8, 128)
    x = jax.ShapeDtypeStruct((64, 1024), jnp.float32)
    if prefetch:
        spec = pl.BlockSpec(block, index_map)
        gs = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=grid, in_specs=[spec], out_specs=pl.BlockSpec(block, lambda *a: (0, 0))
        )
        f = lambda idx, x: pl.pallas_call(_prefetch_copy, out_shape=x, grid_spec=gs)(idx, x)
        args = (jax.ShapeDtypeStruct((8,), jnp.int32), x)
    else:
        f = lambda x: pl.pallas_call(
            _copy,
            out_shape=x,
            grid=grid,
            in_specs=[pl.BlockSpec(block, index_map)],
            out_specs=pl.BlockSpec(block, lambda *a: (0, 0)),
        )(x)
        args = (x,)
    (eqn,) = tracing.pallas_equations(jax.make_jaxpr(f)(*args).jaxpr)
    op = next(o for o in capture.describe(eqn, None)["operands"] if o.role == "in")
    return op.constant_index


@pytest.mark.parametrize(
    "grid, index_map, prefetch, constant",
    [
        ((8,), lambda i: (0, 0), False, True),
        ((8,), lambda i: (i, 0), False, False),
        ((1, 8), lambda i, j: (i, 0), False, True),  # extent1-grid-v6e: single buffered
        ((1, 8), lambda i, j: (i * 2, 0), False, True),  # measured single buffered on v6e
        ((1, 8), lambda i, j: (i, j), False, False),  # extent1-grid-v6e: 2 buffering levels
        ((8, 1), lambda i, j: (j, i), False, False),
        ((2, 8), lambda i, j: (i, 0), False, False),
        ((1, 8), lambda i, j, idx: (idx[i], 0), True, True),  # measured single buffered on v6e
        ((1, 8), lambda i, j, idx: (idx[j], 0), True, False),
    ],
    ids=[
        "literal",
        "axis-8",
        "axis-1",
        "axis-1-times-2",
        "both",
        "transposed",
        "axis-2",
        "prefetch-axis-1",
        "prefetch-axis-8",
    ],
)
def test_an_index_map_is_constant_when_it_reads_only_axes_of_extent_one(grid, index_map, prefetch, constant):
    assert _constant(grid, index_map, prefetch) is constant
