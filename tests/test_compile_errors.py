"""Compile errors other than VMEM overflows on the line that causes them,
through the CLI as a user runs it, with the real compiler."""

from __future__ import annotations

import shutil

import pytest
from support import KERNELS, line_of
from support.cli import run_cli, run_json

UNTILEABLE = KERNELS / "untileable.py"


def test_an_untileable_block_is_marked_on_its_blockspec_and_fixed_by_a_verified_legal_size(tmp_path):
    path = tmp_path / "untileable.py"
    shutil.copy(UNTILEABLE, path)
    done, report = run_json("check", str(path), "--target", "v5e,v6e", "--cache-dir", str(tmp_path / "c"))
    assert done.returncode == 1
    [at_spec] = [
        d
        for d in report["diagnostics"]
        if d["code"] == "VMEM030" and d["range"]["start_line"] == line_of(path, "pl.BlockSpec((b, b)")
    ]
    text = path.read_text().splitlines()[at_spec["range"]["start_line"] - 1]
    assert text[at_spec["range"]["start_col"] :].startswith("(b, b)")
    assert "(8, 128) for f32" in at_spec["message"] and at_spec["message"].endswith("fails on TPU v5e, TPU v6e")
    assert len([d for d in report["diagnostics"] if d["code"] == "VMEM030"]) == 2  # the spec and the directive
    fixed = run_cli("check", str(path), "--target", "v5e,v6e", "--fix", "--cache-dir", str(tmp_path / "c"))
    assert "fixed: Make the block tile: b=1000 (the whole dimension for f32)" in fixed.stderr, fixed.stderr
    assert fixed.returncode == 0, fixed.stdout
    assert path.read_text().rstrip().endswith("# vmem: add(f32[1000, 1000], f32[1000, 1000], b=1000)")


ERRORS = KERNELS / "compile_errors.py"
# (the code's line: text that starts it, its code, what the message says) per kind; see tests/data/reports/ERRORS.md
LANDS = [
    ("spec = pl.BlockSpec((100, 100)", "VMEM030", "(8, 128) for f32"),  # block-jax
    ("spec = pl.BlockSpec((100,)", "VMEM030", "a rank-1 block must be"),  # block-rank1
    ("spec = pl.BlockSpec((8, 256)", "VMEM030", "(32, 128) for s8"),  # block-mosaic
    ("x_ref[:, pl.ds(start", "VMEM030", "cannot statically prove"),  # align (E2003)
    ("jnp.sort(", "VMEM031", "Unimplemented primitive in Pallas TPU lowering for tc: sort"),
    (".reshape(", "VMEM031", "unsupported shape cast"),  # prim-mosaic
]


def test_each_kind_of_compile_error_lands_on_its_line_with_the_chips_it_fails_and_compiles_on(tmp_path):
    done, report = run_json("check", str(ERRORS), "--target", "v4,v6e", "--cache-dir", str(tmp_path / "c"))
    assert done.returncode == 1
    diagnostics = [
        d
        for d in report["diagnostics"]
        if d["code"] in ("VMEM011", "VMEM030", "VMEM031", "VMEM032", "VMEM033", "VMEM034")
    ]
    lines = ERRORS.read_text().splitlines()
    text_at = lambda d: lines[d["range"]["start_line"] - 1]
    directives = {i + 1 for i, l in enumerate(lines) if l.startswith("# vmem:")}
    calls = {i + 1 for i, l in enumerate(lines) if "pl.pallas_call(" in l}
    placed = [d for d in diagnostics if d["range"]["start_line"] not in directives]
    on_cause = [d for d in placed if d["range"]["start_line"] not in calls]
    assert len(on_cause) / len(placed) >= 0.95, [(d["range"]["start_line"], d["message"][:80]) for d in placed]
    for needle, code, says in LANDS:
        assert any(needle in text_at(d) and d["code"] == code and says in d["message"] for d in placed), needle
    [int8] = [d for d in placed if "Unsupported matmul RHS type" in d["message"] and "i8" in d["message"]]
    assert "fails on TPU v4; compiles on TPU v6e" in int8["message"]
    [mask] = [d for d in placed if "Invalid relayout" in d["message"]]
    assert mask["message"].endswith("fails on TPU v6e; compiles on TPU v4")
    # dtype-int8-add: Mosaic's "Not implemented: Only vector<i16> and vector<i32> are supported, but got
    # 'i8'" is a dtype no chip's VPU takes (VMEM032, not an unsupported op), on the add's body line
    [add] = [d for d in placed if "Only vector<i16> and vector<i32> are supported, but got 'i8'" in d["message"]]
    assert add["code"] == "VMEM032" and add["range"]["start_line"] == line_of(ERRORS, "def int8_add_kernel") + 1, add
    assert "x_ref[...] + y_ref[...]" in text_at(add) and add["message"].endswith("fails on TPU v4, TPU v6e"), add
    assert all("\n" not in d["message"] for d in placed if d["code"] != "VMEM011")  # the key line; whole below
    kinds = {d["code"] for d in placed}
    assert {"VMEM030", "VMEM031", "VMEM032", "VMEM033"} <= kinds, kinds
    [smem] = [d for d in placed if d["code"] == "VMEM033" and d["range"]["start_line"] not in directives]
    assert "Can only load scalars from SMEM" in smem["message"]
    # The compiler's whole text, per chip, is in the related information and the facts.
    assert all(
        any(r["message"].startswith("TPU v") for r in d["related"])
        for d in placed
        if d["code"] in ("VMEM031", "VMEM032", "VMEM033", "VMEM034")
    )


# jax names an operand in its block check by its path in the call's arguments ("Block spec for
# args[1]"), and a pytree argument before it (here a tuple of scalar-prefetch arrays, as megablox's
# gmm passes its group metadata) makes that other than the operand's number: args[1] is x, the
# third operand. bench/bench_error_lines.py found gmm's illegal blocks on its pallas_call.
PREFETCH_TUPLE = """
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def scaled_kernel(meta, x_ref, o_ref):
    offsets, ids = meta
    o_ref[:, pl.ds(0, 100)] = x_ref[...] * (offsets[0] + ids[0]).astype(jnp.float32)


# vmem: scaled(f32[1000, 1000])
def scaled(x):
    meta = (jnp.zeros((8,), jnp.int32), jnp.ones((8,), jnp.int32))
    return pl.pallas_call(
        scaled_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(10, 10),
            in_specs=[pl.BlockSpec((100, 100), lambda i, j, meta: (i, j))],
            out_specs=pl.BlockSpec((100, 1000), lambda i, j, meta: (i, 0)),
        ),
    )(meta, x)
"""


def assert_block_error_on_spec(tmp_path, name: str, kernel: str, says: str, spec: str, message: str) -> None:
    """The VMEM030 of `kernel` (checked on v5e) quotes `says`, and lands on the
    directive and on the BlockSpec line holding `spec`, whose message starts with `message`."""
    path = tmp_path / name
    path.write_text(kernel)
    done, report = run_json("check", str(path), "--target", "v5e", "--cache-dir", str(tmp_path / "c"))
    assert done.returncode == 1
    errors = [d for d in report["diagnostics"] if d["code"] == "VMEM030"]
    assert says in errors[0]["facts"]["text"], errors[0]["facts"]["text"]
    spec_line = line_of(path, spec)
    assert sorted(d["range"]["start_line"] for d in errors) == [line_of(path, "# vmem:"), spec_line], errors
    [at_spec] = [d for d in errors if d["range"]["start_line"] == spec_line]
    assert at_spec["message"].startswith(message), at_spec


def test_a_block_named_by_its_path_after_a_tuple_of_prefetch_arrays_lands_on_its_blockspec(tmp_path):
    assert_block_error_on_spec(
        tmp_path,
        "prefetch_tuple.py",
        PREFETCH_TUPLE,
        "Block spec for args[1]",
        "in_specs=[pl.BlockSpec((100, 100)",
        "input 0 block (100, 100) of f32[1000,1000] does not tile",
    )


# Mosaic's "Failed to set window params for input N" counts the windows, the blocked inputs:
# input 1 is in_specs[1] (x), not the call's operand 1 (y, after the scalar-prefetch operand).
PREFETCH_MOSAIC = """
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def copy_kernel(starts, y_ref, x_ref, o_ref, p_ref):
    o_ref[pl.ds(0, 8), :] = x_ref[...]
    p_ref[...] = y_ref[...]


# vmem: copy_rows(f32[64, 256], s8[64, 256])
def copy_rows(y, x):
    starts = jnp.zeros((8,), jnp.int32)
    y_spec = pl.BlockSpec((8, 256), lambda i, s: (i + s[0], 0))
    x_spec = pl.BlockSpec((8, 256), lambda i, s: (i, 0))
    return pl.pallas_call(
        copy_kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(y.shape, y.dtype)),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(8,),
            in_specs=[y_spec, x_spec],
            out_specs=[pl.BlockSpec((32, 256), lambda i, s: (i // 4, 0)), y_spec],
        ),
    )(starts, y, x)
"""


def test_a_window_mosaic_numbers_after_a_prefetch_operand_lands_on_its_blockspec(tmp_path):
    assert_block_error_on_spec(
        tmp_path,
        "prefetch_mosaic.py",
        PREFETCH_MOSAIC,
        "Failed to set window params for input 1",
        "x_spec = pl.BlockSpec(",
        "input 1 block (8, 256) of s8[64,256] does not tile",
    )


@pytest.mark.asyncio
async def test_the_editor_marks_the_blockspec_and_offers_the_verified_legal_size(tmp_path):
    from lsprotocol import types
    from support.lsp_client import Editor, running_server, wait_for

    path = tmp_path / "untileable.py"
    shutil.copy(UNTILEABLE, path)
    (tmp_path / "pyproject.toml").write_text('[tool.vmem-lsp]\ntargets = ["v5e"]\n')
    async with running_server(tmp_path) as client:
        editor = Editor(client, path)
        editor.open()
        [at_spec] = await wait_for(
            lambda: [
                d
                for d in editor.diagnostics()
                if d.code == "VMEM030" and d.range.start.line + 1 == line_of(path, "pl.BlockSpec((b, b)")
            ],
            what="VMEM030 on the BlockSpec",
        )
        actions = await client.text_document_code_action_async(
            types.CodeActionParams(
                types.TextDocumentIdentifier(editor.uri), at_spec.range, types.CodeActionContext(diagnostics=[at_spec])
            )
        )
        best = next(a for a in actions if a.is_preferred)
        assert best.title.startswith("Make the block tile: b=1000") and "compiler-verified" in best.title
        [edit] = best.edit.changes[editor.uri]
        assert edit.new_text == ", b=1000"


# The same path names the block the fix must resize: megablox's gmm with tm=4 (its lhs block
# (4, 1024) of bf16, named "args[2]" after the tuple of group metadata) gets the nearest legal
# tiling, verified by the compiler, written where the number is: the example's `tiling=`.
def test_gmm_with_an_illegal_tiling_is_fixed_by_a_verified_legal_tiling(tmp_path):
    from support.jax_ops import EXAMPLES, copy_with_example

    example = EXAMPLES["megablox/gmm.py"].replace("tiling=(1024, 1024, 1024)", "tiling=(4, 1024, 1024)")
    assert example != EXAMPLES["megablox/gmm.py"]
    path = copy_with_example("megablox/gmm.py", example, tmp_path)
    cache = str(tmp_path / "c")
    done, report = run_json("check", str(path), "--target", "v5e", "--cache-dir", cache)
    assert done.returncode == 1
    [at_spec] = [
        d
        for d in report["diagnostics"]
        if d["code"] == "VMEM030"
        and d["range"]["start_line"] == line_of(path, "lhs_block_spec = pl.BlockSpec((tm, tk)")
    ]
    assert "Block spec for args[2]" in at_spec["facts"]["text"], at_spec["facts"]["text"]
    assert at_spec["message"].startswith("input 0 block (4, 1024) of bf16[4096,2048] does not tile"), at_spec
    fixed = run_cli("check", str(path), "--target", "v5e", "--fix", "--cache-dir", cache)
    [said] = [line for line in fixed.stderr.splitlines() if "fixed: " in line]
    assert "fixed: Make the block tile: tiling[0]=16 (a multiple of 16 for bf16)" in said, fixed.stderr
    assert "compiler-verified" in said, said
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert path.read_text().rstrip().endswith(example.replace("tiling=(4, ", "tiling=(16, "))
