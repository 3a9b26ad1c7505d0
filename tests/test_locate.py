"""The locator against jax's own TPU kernels, against small handwritten kernels, and against garbage."""

from __future__ import annotations

import ast
import gc
import pickle
import random
import textwrap
from pathlib import Path

import jax.experimental.pallas.ops.tpu as jax_tpu_ops
import pytest
from support.fuzz_properties import ast_site_count, name_of

from vmem_lsp.source.locate import LocateResult, clear_cache, locate
from vmem_lsp.source.model import BlockSpecSite, Expr, KernelSite, Span

JAX_TPU_OPS = Path(jax_tpu_ops.__path__[0])
JAX_FILES = sorted(JAX_TPU_OPS.rglob("*.py"))


def source_at(source: str, span: Span) -> str:
    """The text a span covers, sliced from the source independently of the locator."""
    lines = source.split("\n")[span.start_line - 1 : span.end_line]
    lines[-1] = lines[-1][: span.end_col]
    lines[0] = lines[0][span.start_col :]
    return "\n".join(lines)


def exprs_of(site: KernelSite) -> list[Expr]:
    specs = [
        e for b in site.in_specs + site.out_specs for e in (b.block_shape, b.index_map, b.memory_space, b.pipeline_mode)
    ]
    scratch = [e for s in site.scratch for e in (s.shape, s.dtype)]
    own = [site.grid, site.grid_spec, site.num_scalar_prefetch, site.compiler_params, site.vmem_limit_bytes]
    return [e for e in specs + scratch + own if e is not None]


# --- independent answers, with ast (the site count is in fuzz_properties.py) -------------------------


def ast_calls_named(tree: ast.Module, name: str, source: str) -> list[tuple[int, int]]:
    """(line, character column) of every call whose callee is spelled `name` or `x.name`."""
    lines = source.split("\n")
    return [
        (n.lineno, len(lines[n.lineno - 1].encode()[: n.col_offset].decode()))
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and name_of(n.func) == name
    ]


# --- 1. every site and every BlockSpec of jax's TPU kernels ------------------------------------------


def _corpus_rows() -> list[tuple[str, int, int, int, int, list]]:
    rows = []
    for path in JAX_FILES:
        source = path.read_text()
        tree = ast.parse(source)
        result = locate(source, str(path))
        attached = {(b.span.start_line, b.span.start_col) for s in result.sites for b in s.in_specs + s.out_specs}
        specs = ast_calls_named(tree, "BlockSpec", source)
        missing = [at for at in specs if at not in attached]
        rows.append(
            (
                str(path.relative_to(JAX_TPU_OPS)),
                ast_site_count(tree),
                len(result.sites),
                len(specs),
                len(specs) - len(missing),
                missing,
            )
        )
    return rows


def _summary(rows) -> str:
    lines = [f"{'file':58} {'sites ast/located':>18} {'BlockSpecs ast/attached':>24}  missing (line, col)"]
    for name, expected, found, specs, attached, missing in rows:
        lines.append(f"{name:58} {expected:>8}/{found:<9} {specs:>12}/{attached:<11}  {missing or ''}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def corpus_rows():
    return _corpus_rows()


def test_the_corpus_has_kernels(corpus_rows):
    assert sum(row[1] for row in corpus_rows) >= 10, _summary(corpus_rows)


def test_every_pallas_call_of_jax_tpu_ops_is_found(corpus_rows):
    assert all(row[1] == row[2] for row in corpus_rows), _summary(corpus_rows)


def test_every_blockspec_of_jax_tpu_ops_is_attached_to_a_site(corpus_rows):
    assert all(not row[5] for row in corpus_rows), _summary(corpus_rows)


def test_every_vmem_scratch_of_jax_tpu_ops_is_attached():
    gaps = []
    for path in JAX_FILES:
        source = path.read_text()
        result = locate(source, str(path))
        attached = {(s.span.start_line, s.span.start_col) for k in result.sites for s in k.scratch}
        gaps += [(path.name, at) for at in ast_calls_named(ast.parse(source), "VMEM", source) if at not in attached]
    assert not gaps


@pytest.mark.parametrize("path", [p for p in JAX_FILES if "pallas_call" in p.read_text()], ids=lambda p: p.name)
def test_spans_and_texts_match_the_source(path):
    source = path.read_text()
    result = locate(source, str(path))
    assert result.error is None and result.sites
    for site in result.sites:
        assert source_at(source, site.name_span) == "pallas_call"
        assert source_at(source, site.span).startswith("pl.pallas_call(")
        for spec in site.in_specs + site.out_specs:
            assert source_at(source, spec.span).startswith("pl.BlockSpec(")
        for expr in exprs_of(site):
            assert source_at(source, expr.span) == expr.text


def test_splash_forward_indices_follow_appends_and_branches():
    path = JAX_TPU_OPS / "splash_attention" / "splash_attention_kernel.py"
    forward = next(s for s in locate(path.read_text(), str(path)).sites if s.function == "_splash_attention_forward")
    assert [b.index for b in forward.in_specs] == list(range(8))
    assert [b.index for b in forward.out_specs] == list(range(5))
    assert forward.num_scalar_prefetch.text == "3"
    assert forward.grid.text == "(num_q_heads, q_seq_len // bq, grid_width)"


def test_ragged_paged_attention_scratch_and_vmem_limit():
    path = JAX_TPU_OPS / "ragged_paged_attention" / "kernel.py"
    (site,) = locate(path.read_text(), str(path)).sites
    assert [(s.index, s.kind) for s in site.scratch] == [
        (0, "VMEM"),
        (1, "SemaphoreType.DMA"),
        (2, "VMEM"),
        (3, "VMEM"),
        (4, "VMEM"),
    ]
    assert site.scratch[1].shape.text == "(2,)"
    assert site.vmem_limit_bytes.text == "vmem_limit_bytes"
    assert site.num_scalar_prefetch.text == "len(scalar_prefetches)"


# --- 2. handwritten kernels ------------------------------------------------------------------------


def only_site(source: str) -> KernelSite:
    result = locate(textwrap.dedent(source), "k.py")
    assert result.error is None
    assert len(result.sites) == 1, result.sites
    return result.sites[0]


def shapes(specs: tuple[BlockSpecSite, ...]) -> list[tuple[int | None, str]]:
    return [(b.index, b.block_shape.text if b.block_shape else None) for b in specs]


MATMUL = """\
    import jax
    from jax.experimental import pallas as pl

    def matmul(x, y):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((1024, 1024), x.dtype),
            grid=(8, 8),
            in_specs=[
                pl.BlockSpec((128, 1024), lambda i, j: (i, 0)),
                pl.BlockSpec(
                    (1024, 128),  # a comment inside
                    lambda i, j: (0, j),
                ),
            ],
            out_specs=pl.BlockSpec((128, 128), lambda i, j: (i, j)),
        )(x, y)
"""


def test_from_import_pallas_as_pl_with_exact_spans():
    source = textwrap.dedent(MATMUL)
    site = only_site(source)
    assert site.function == "matmul"
    assert site.span.start_line == 5 and source_at(source, site.name_span) == "pallas_call"
    assert site.grid.text == "(8, 8)"
    assert shapes(site.in_specs) == [(0, "(128, 1024)"), (1, "(1024, 128)")]
    assert shapes(site.out_specs) == [(0, "(128, 128)")]
    second = site.in_specs[1]
    assert second.span == Span(11, 12, 14, 13)
    assert second.block_shape.span == Span(12, 16, 12, 27)
    assert source_at(source, second.block_shape.span) == second.block_shape.text == "(1024, 128)"
    assert second.index_map.text == "lambda i, j: (0, j)"
    assert source_at(source, second.span).startswith("pl.BlockSpec(\n")
    assert all(b.role == "in" for b in site.in_specs) and site.out_specs[0].role == "out"


def test_import_module_as_pl():
    site = only_site("""\
        import jax.experimental.pallas as pl
        def f(x):
            return pl.pallas_call(k, out_shape=x, in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))])(x)
    """)
    assert shapes(site.in_specs) == [(0, "(8, 128)")]


def test_from_pallas_import_names_and_aliases():
    site = only_site("""\
        from jax.experimental.pallas import pallas_call, BlockSpec
        def f(x):
            return pallas_call(k, out_shape=x, out_specs=BlockSpec(block_shape=(16, 256)))(x)
    """)
    assert shapes(site.out_specs) == [(0, "(16, 256)")]
    site = only_site("""\
        from jax.experimental.pallas import pallas_call as pc, BlockSpec as BS
        def f(x):
            return pc(k, out_shape=x, in_specs=(BS((8, 128), None), BS((8, 256), None)))(x)
    """)
    assert shapes(site.in_specs) == [(0, "(8, 128)"), (1, "(8, 256)")]
    site = only_site("""\
        from jax.experimental import pallas as pl
        call = pl.pallas_call
        def f(x):
            return call(k, out_shape=x, in_specs=[pl.BlockSpec((8, 128), None)])(x)
    """)
    assert site.function == "f" and shapes(site.in_specs) == [(0, "(8, 128)")]


def test_partial_decorator_is_the_site():
    source = textwrap.dedent("""\
        import functools
        from jax.experimental import pallas as pl

        @functools.partial(
            pl.pallas_call,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            grid=(2,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        )
        def add_one(x_ref, o_ref):
            o_ref[...] = x_ref[...] + 1
    """)
    (site,) = locate(source, "k.py").sites
    assert site.function is None
    assert source_at(source, site.span).startswith("functools.partial(")
    assert site.name_span.start_line == 5 and source_at(source, site.name_span) == "pallas_call"
    assert site.grid.text == "(2,)"
    assert shapes(site.in_specs) == [(0, "(8, 128)")] and shapes(site.out_specs) == [(0, "(8, 128)")]


def test_partial_whose_result_is_called_merges_into_the_call():
    source = textwrap.dedent("""\
        from functools import partial
        from jax.experimental import pallas as pl

        def f(x):
            call = partial(pl.pallas_call, out_shape=x, in_specs=[pl.BlockSpec((8, 128), None)])
            return call(kernel, out_specs=pl.BlockSpec((8, 256), None), grid=(4,))(x)
    """)
    (site,) = locate(source, "k.py").sites
    assert source_at(source, site.span).startswith("call(kernel")
    assert source_at(source, site.name_span) == "call"
    assert shapes(site.in_specs) == [(0, "(8, 128)")] and shapes(site.out_specs) == [(0, "(8, 256)")]
    assert site.grid.text == "(4,)"
    (site,) = locate(
        "from functools import partial\n"
        "p = partial(pl.pallas_call, grid=(3,))(kernel, in_specs=[pl.BlockSpec((1, 2), None)])\n",
        "k.py",
    ).sites
    assert site.grid.text == "(3,)" and shapes(site.in_specs) == [(0, "(1, 2)")]


def test_partial_alias_named_pallas_call_merges_into_each_call():
    result = locate(
        textwrap.dedent("""\
        import functools
        from jax.experimental import pallas as pl
        pallas_call = functools.partial(pl.pallas_call, interpret=True, grid=(2,))
        def f(x):
            return pallas_call(kernel, out_shape=x, in_specs=[pl.BlockSpec((8, 128), None)])(x)
        def g(x):
            return pallas_call(kernel, out_shape=x, grid=(5,))(x)
    """),
        "k.py",
    )
    assert [(s.function, s.grid.text, len(s.in_specs)) for s in result.sites] == [("f", "(2,)", 1), ("g", "(5,)", 0)]


PARTIAL_PATTERNS = [
    "@functools.partial(pl.pallas_call, grid=(1,))\ndef k(x_ref, o_ref): ...\n",
    "def f():\n    return partial(pl.pallas_call, grid=(1,))\n",
    "call = partial(pl.pallas_call, grid=(1,))\ncall(k)(x)\ncall(k2)(x)\n",
    "p = partial(pl.pallas_call, grid=(1,))(k, out_shape=x)\n",
    "pallas_call = partial(pl.pallas_call, interpret=True)\npallas_call(k)(x)\npl.pallas_call(k)(x)\n",
    "class T:\n    def setUp(self):\n        self.pallas_call = partial(pl.pallas_call, interpret=True)\n"
    "    def test(self):\n        self.pallas_call(k)(x)\n",
]


@pytest.mark.parametrize("source", PARTIAL_PATTERNS, ids=range(len(PARTIAL_PATTERNS)))
def test_the_ast_count_and_the_locator_agree_on_partials(source):
    source = "import functools\nfrom functools import partial\n" + source
    assert len(locate(source, "k.py").sites) == ast_site_count(ast.parse(source))


def test_partial_returned_uncalled_is_the_site():
    site = only_site("""\
        import functools
        from jax.experimental import pallas as pl
        def make(n):
            return functools.partial(pl.pallas_call, grid=(n,), in_specs=[pl.BlockSpec((8, 128), None)])
    """)
    assert site.function == "make" and site.grid.text == "(n,)"


def test_prefetch_scalar_grid_spec_held_in_a_variable():
    site = only_site("""\
        from jax.experimental import pallas as pl
        from jax.experimental.pallas import tpu as pltpu
        def f(x, idx):
            spec = pl.BlockSpec((None, 8, 128), lambda i, idx_ref: (idx_ref[i], 0, 0))
            grid_spec = pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,
                grid=(4,),
                in_specs=[spec],
                out_specs=spec,
                scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
            )
            return pl.pallas_call(kernel, out_shape=x, grid_spec=grid_spec)(idx, x)
    """)
    assert site.grid_spec.text.startswith("pltpu.PrefetchScalarGridSpec(") and site.grid_spec.span.start_line == 5
    assert site.num_scalar_prefetch.text == "1" and site.grid.text == "(4,)"
    assert shapes(site.in_specs) == [(0, "(None, 8, 128)")] == shapes(site.out_specs)
    assert site.in_specs[0].span.start_line == 4
    assert [(s.kind, s.shape.text, s.dtype.text) for s in site.scratch] == [("VMEM", "(8, 128)", "jnp.float32")]


def test_grid_spec_positional_arguments():
    site = only_site("""\
        def f(x):
            gs = pltpu.PrefetchScalarGridSpec(2, (8,), [pl.BlockSpec((8, 128), None)], pl.BlockSpec((8, 1), None))
            return pl.pallas_call(kernel, x, grid_spec=gs)(x)
    """)
    assert site.num_scalar_prefetch.text == "2" and site.grid.text == "(8,)"
    assert shapes(site.in_specs) == [(0, "(8, 128)")] and shapes(site.out_specs) == [(0, "(8, 1)")]


def test_variables_lists_concatenation_and_branches():
    site = only_site("""\
        def f(x, residuals):
            a = pl.BlockSpec((8, 128), None)
            b = pl.BlockSpec((8, 256), None)
            in_specs = [a] + [b]
            in_specs += [pl.BlockSpec((1, 128), None)]
            if residuals:
                in_specs.append(pl.BlockSpec((2, 128), None))
            else:
                in_specs.append(None)
            in_specs.extend([pl.BlockSpec((3, 128), None)])
            out = [pl.BlockSpec((4, 128), None)]
            out = [*out, pl.BlockSpec((5, 128), None)]
            return pl.pallas_call(k, out_shape=x, in_specs=in_specs, out_specs=out)(x)
    """)
    assert shapes(site.in_specs) == [
        (0, "(8, 128)"),
        (1, "(8, 256)"),
        (2, "(1, 128)"),
        (3, "(2, 128)"),
        (4, "(3, 128)"),
    ]
    assert shapes(site.out_specs) == [(0, "(4, 128)"), (1, "(5, 128)")]


def test_insert_moves_the_later_items():
    site = only_site("""\
        def f(x, segments, i):
            in_specs = [pl.BlockSpec((0,), None), pl.BlockSpec((1,), None), pl.BlockSpec((2,), None)]
            if segments is None:
                in_specs.insert(1, None)
            else:
                in_specs.insert(1, pl.BlockSpec((9,), None))
            in_specs.insert(-1, pl.BlockSpec((8,), None))
            out_specs = [pl.BlockSpec((5,), None)]
            out_specs.insert(i, pl.BlockSpec((6,), None))
            return pl.pallas_call(k, out_shape=x, in_specs=in_specs, out_specs=out_specs)(x)
    """)
    assert shapes(site.in_specs) == [(0, "(0,)"), (1, "(9,)"), (2, "(1,)"), (3, "(8,)"), (4, "(2,)")]
    assert shapes(site.out_specs) == [(None, "(5,)"), (None, "(6,)")]


def test_alternative_definitions_share_an_index():
    site = only_site("""\
        def f(x, wide):
            if wide:
                spec = pl.BlockSpec((8, 512), None)
            else:
                spec = pl.BlockSpec((8, 128), None)
            return pl.pallas_call(k, out_shape=x, in_specs=[spec, spec if wide else None])(x)
    """)
    assert shapes(site.in_specs) == [(0, "(8, 512)"), (0, "(8, 128)"), (1, "(8, 512)"), (1, "(8, 128)")]


def test_module_level_helpers_and_constants():
    source = textwrap.dedent("""\
        from jax.experimental import pallas as pl
        GRID = (16, 4)
        def kernel_specs(bm):
            x_spec = pl.BlockSpec((bm, 128), lambda i, j: (i, 0))
            return [x_spec, pl.BlockSpec((128, 128), lambda i, j: (0, j))]
        def out_spec():
            return pl.BlockSpec((256, 128), lambda i, j: (i, j))
        def f(x):
            return pl.pallas_call(k, out_shape=x, grid=GRID, in_specs=kernel_specs(256), out_specs=out_spec())(x)
    """)
    site = only_site(source)
    assert site.grid == Expr(Span(2, 7, 2, 14), "(16, 4)")
    assert shapes(site.in_specs) == [(0, "(bm, 128)"), (1, "(128, 128)")]
    assert [b.span.start_line for b in site.in_specs] == [4, 5]
    assert shapes(site.out_specs) == [(0, "(256, 128)")] and site.out_specs[0].span.start_line == 7


def test_helper_defined_after_its_use_and_a_local_helper():
    site = only_site("""\
        def f(x):
            def local():
                return [pl.BlockSpec((1, 128), None)]
            return pl.pallas_call(k, out_shape=x, in_specs=local(), out_specs=later())(x)
        def later():
            return pl.BlockSpec((2, 128), None)
    """)
    assert shapes(site.in_specs) == [(0, "(1, 128)")] and shapes(site.out_specs) == [(0, "(2, 128)")]


def test_comprehensions_dicts_and_loops_have_no_index():
    site = only_site("""\
        def f(xs):
            in_specs = [pl.BlockSpec((8, 128), lambda i: (i, 0)) for _ in xs]
            out_specs = {"a": pl.BlockSpec((8, 256), None), "b": pl.BlockSpec((8, 512), None)}
            scratch = []
            for n in (1, 2):
                scratch.append(pltpu.VMEM((n, 128), jnp.float32))
            return pl.pallas_call(k, out_shape=xs, in_specs=in_specs, out_specs=out_specs,
                                  scratch_shapes=scratch)(*xs)
    """)
    assert shapes(site.in_specs) == [(None, "(8, 128)")]
    assert shapes(site.out_specs) == [(None, "(8, 256)"), (None, "(8, 512)")]
    assert [(s.index, s.shape.text) for s in site.scratch] == [(None, "(n, 128)")]
    assert site.notes == ()


# --- specs passed through pytree constructors: their own spans, in jax's flattening order -------------

PYTREE_CLASSES = """\
    import dataclasses, functools
    from typing import Any, NamedTuple
    import jax
    from jax.experimental import pallas as pl
    class Pair(NamedTuple):
        x: Any
        y: Any
    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class Halves:
        top: Any
        bottom: Any
    @functools.partial(jax.tree_util.register_dataclass, data_fields=["late", "early"], meta_fields=["n"])
    @dataclasses.dataclass
    class Reordered:
        early: Any
        n: int
        late: Any
"""

PYTREE_KERNELS = {
    "namedtuple keywords out of field order": """\
        def f(x):
            return pl.pallas_call(k, out_shape=x, out_specs=Pair(y=pl.BlockSpec((2,), None),
                                                                 x=pl.BlockSpec((1,), None)))(x)
    """,
    "namedtuple as in_specs, positional": """\
        def f(x):
            return pl.pallas_call(k, out_shape=x, in_specs=Pair(pl.BlockSpec((1,), None), pl.BlockSpec((2,), None)))(x)
    """,
    "registered dataclass of names": """\
        def f(x):
            top = pl.BlockSpec((1,), None)
            bottom = pl.BlockSpec((2,), None)
            return pl.pallas_call(k, out_shape=x, out_specs=Halves(bottom=bottom, top=top))(x)
    """,
    "data_fields order, a static field left out": """\
        def f(x):
            return pl.pallas_call(k, out_shape=x, out_specs=Reordered(pl.BlockSpec((2,), None), 3,
                                                                      late=pl.BlockSpec((1,), None)))(x)
    """,
    "nested in a tuple, then a list built up": """\
        def f(x):
            specs = [Pair(pl.BlockSpec((1,), None), pl.BlockSpec((2,), None)), pl.BlockSpec((3,), None)]
            specs.append(Halves(pl.BlockSpec((4,), None), Pair(pl.BlockSpec((5,), None), pl.BlockSpec((6,), None))))
            specs += [pl.BlockSpec((7,), None)]
            return pl.pallas_call(k, out_shape=x, in_specs=specs)(x)
    """,
    "nested lists and an empty tuple": """\
        def f(x):
            return pl.pallas_call(k, out_shape=x, in_specs=[[pl.BlockSpec((1,), None), (pl.BlockSpec((2,), None),)],
                                                            (), pl.BlockSpec((3,), None)])(x)
    """,
}


def jax_order(source: str) -> dict[str, list[int]]:
    """What jax itself flattens in_specs and out_specs into (block_shape[0] of each leaf): the source run
    with a pallas_call that records instead of tracing, apart from the locator."""
    seen = {}
    real = pytest.importorskip("jax.experimental.pallas")

    def pallas_call(kernel, out_shape=None, **kw):
        import jax

        for role in ("in_specs", "out_specs"):
            seen[role] = [spec.block_shape[0] for spec in jax.tree_util.tree_leaves(kw.get(role, ()))]
        return lambda *args: None

    namespace = {}
    exec(compile(source, "k.py", "exec"), namespace)
    namespace["pl"] = type("pl", (), {"BlockSpec": real.BlockSpec, "pallas_call": staticmethod(pallas_call)})
    namespace["k"] = None
    namespace["f"](None)
    return seen


@pytest.mark.parametrize("kernel", PYTREE_KERNELS.values(), ids=PYTREE_KERNELS.keys())
def test_pytree_constructor_specs_have_spans_and_jax_flattening_indices(kernel):
    source = textwrap.dedent(PYTREE_CLASSES) + textwrap.dedent(kernel)
    result = locate(source, "k.py")
    assert result.error is None and len(result.sites) == 1
    site = result.sites[0]
    assert site.notes == ()
    expected = jax_order(source)
    for role, specs in (("in_specs", site.in_specs), ("out_specs", site.out_specs)):
        assert all(source_at(source, b.span).startswith("pl.BlockSpec(") for b in specs)
        assert [int(b.block_shape.text.strip("(,)")) for b in sorted(specs, key=lambda b: b.index)] == expected.get(
            role, []
        ), role


def test_pytree_constructors_the_locator_cannot_order_give_spans_without_index():
    """An imported class (a NamedTuple elsewhere), a dataclass registered elsewhere: each spec is found
    at its own place, with index None (the worker's origin then matches it); constants are no items."""
    site = only_site("""\
        from .types import Outputs
        @dataclasses.dataclass
        class Local:
            a: Any
            b: Any
        jax.tree_util.register_pytree_node_class(Local)
        def f(x):
            spec = pl.BlockSpec((1,), None)
            return pl.pallas_call(k, out_shape=x, in_specs=[Local(spec, b=pl.BlockSpec((2,), None)), spec],
                                  out_specs=types.Outputs(pl.BlockSpec((3,), None), 8, "name"))(x)
    """)
    assert shapes(site.in_specs) == [(None, "(1,)"), (None, "(2,)")]
    assert shapes(site.out_specs) == [(None, "(3,)")]
    assert site.notes == ()


def test_a_capitalised_call_without_specs_is_not_a_constructor_of_specs():
    site = only_site("""\
        def f(x):
            return pl.pallas_call(k, out_shape=x, out_specs=MakeSpec(8, 128),
                                  in_specs=[pl.BlockSpec((8, 128), None, pipeline_mode=pl.Buffered(1))])(x)
    """)
    assert shapes(site.in_specs) == [(0, "(8, 128)")] and site.in_specs[0].buffer_count == 1
    assert site.out_specs == () and any("`MakeSpec(8, 128)` is not a BlockSpec" in n for n in site.notes)


def test_pytree_constructor_specs_after_non_ascii_text_have_code_point_spans():
    source = textwrap.dedent("""\
        from typing import Any, NamedTuple
        from jax.experimental import pallas as pl
        class Outputs(NamedTuple):
            a: Any
            b: Any
        def f(x):
            return pl.pallas_call(k, out_shape=x, out_specs=Outputs(
                # b d'abord, « écrit à l'envers » — 先に b
                b=pl.BlockSpec((16, 128), None),
                a="é" and pl.BlockSpec((8, 128), None),
            ))(x)
    """)
    site = locate(source, "k.py").sites[0]
    assert shapes(site.out_specs) == [(0, "(8, 128)"), (1, "(16, 128)")]
    lines = source.split("\n")
    for spec, text in zip(site.out_specs, ("(8, 128)", "(16, 128)")):
        assert spec.block_shape.span.start_col == lines[spec.span.start_line - 1].index(text)
        assert source_at(source, spec.block_shape.span) == text


def test_scratch_shapes_of_every_kind():
    site = only_site("""\
        from jax.experimental.pallas import tpu as pltpu
        def f(x):
            acc = pltpu.VMEM((128, 128), jnp.float32)
            return pl.pallas_call(k, out_shape=x, scratch_shapes=[
                acc,
                pltpu.SMEM((4,), jnp.int32),
                pltpu.SemaphoreType.DMA,
                pltpu.SemaphoreType.DMA((2,)),
                pltpu.VMEM(shape=(8, 128), dtype=jnp.bfloat16),
            ])(x)
    """)
    got = [(s.index, s.kind, s.shape and s.shape.text, s.dtype and s.dtype.text) for s in site.scratch]
    assert got == [
        (0, "VMEM", "(128, 128)", "jnp.float32"),
        (1, "SMEM", "(4,)", "jnp.int32"),
        (2, "SemaphoreType.DMA", None, None),
        (3, "SemaphoreType.DMA", "(2,)", None),
        (4, "VMEM", "(8, 128)", "jnp.bfloat16"),
    ]
    assert site.scratch[0].span.start_line == 3


@pytest.mark.parametrize(
    "params, limit",
    [
        (
            "pltpu.CompilerParams(dimension_semantics=('parallel',), vmem_limit_bytes=64 * 1024 * 1024)",
            "64 * 1024 * 1024",
        ),
        ("pltpu.TPUCompilerParams(vmem_limit_bytes=LIMIT)", "LIMIT"),
        ("dict(mosaic=dict(vmem_limit_bytes=100_000_000))", "100_000_000"),
        ("{'mosaic': {'vmem_limit_bytes': 2**26}}", "2**26"),
        ("pltpu.CompilerParams(dimension_semantics=('parallel',))", None),
    ],
)
def test_compiler_params_and_vmem_limit(params, limit):
    site = only_site(f"def f(x):\n    return pl.pallas_call(k, out_shape=x, compiler_params={params})(x)\n")
    assert site.compiler_params.text == params
    assert (site.vmem_limit_bytes and site.vmem_limit_bytes.text) == limit


def test_compiler_params_held_in_variables():
    site = only_site("""\
        def f(x):
            mosaic = dict(vmem_limit_bytes=32 << 20)
            params = dict(mosaic=mosaic)
            return pl.pallas_call(k, out_shape=x, compiler_params=params)(x)
    """)
    assert site.compiler_params.text == "dict(mosaic=mosaic)" and site.compiler_params.span.start_line == 3
    assert site.vmem_limit_bytes == Expr(Span(2, 35, 2, 43), "32 << 20")


def test_pipeline_mode_buffered():
    site = only_site("""\
        def f(x):
            single = pl.Buffered(buffer_count=1)
            return pl.pallas_call(k, out_shape=x, in_specs=[
                pl.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=pl.Buffered(1)),
                pl.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=single),
                pl.BlockSpec((8, 128), lambda i: (i, 0), pl.Buffered(3)),
                pl.BlockSpec(memory_space=pltpu.SMEM),
            ])(x)
    """)
    assert [(b.buffer_count, b.pipeline_mode and b.pipeline_mode.text) for b in site.in_specs] == [
        (1, "pl.Buffered(1)"),
        (1, "single"),
        (3, "pl.Buffered(3)"),
        (None, None),
    ]
    assert site.in_specs[3].memory_space.text == "pltpu.SMEM" and site.in_specs[3].block_shape is None


def test_enclosing_function_names():
    result = locate(
        textwrap.dedent("""\
        def outer(x):
            def inner(y):
                return pl.pallas_call(k, out_shape=y)(y)
            return inner(x)
        class Ops:
            def run(self, x):
                return pl.pallas_call(k, out_shape=x)(x)
        kernel = pl.pallas_call(k, out_shape=X)
    """),
        "k.py",
    )
    assert [s.function for s in result.sites] == ["outer.inner", "Ops.run", None]


def test_what_cannot_be_followed_is_said_in_notes():
    site = only_site("""\
        def f(x, in_specs):
            return pl.pallas_call(k, out_shape=x, in_specs=in_specs, out_specs=[make_spec(x), None])(x)
    """)
    assert site.in_specs == () and site.out_specs == ()
    assert any("`in_specs`, a parameter" in note for note in site.notes)
    assert any("out_specs[0]: `make_spec(x)` is not a BlockSpec" in note for note in site.notes)


def test_a_match_mapping_rest_rebinds_its_name():
    """`case {**specs}` binds specs to the rest of the mapping: the list bound before is not what it holds."""
    site = only_site("""\
        def f(x, config):
            specs = [pl.BlockSpec((8, 128), lambda i: (i, 0))]
            match config:
                case {"mode": 1, **specs}:
                    pass
            return pl.pallas_call(k, out_shape=x, in_specs=specs, out_specs=None)(x)
    """)
    assert shapes(site.in_specs) == [(0, "(8, 128)")]  # the path where no case matched
    assert any("`specs`, a match capture" in note for note in site.notes)


def test_identical_statements_at_two_places_keep_their_own_spans():
    result = locate(
        textwrap.dedent("""\
        def a(x):
            return pl.pallas_call(k, out_shape=x, in_specs=[pl.BlockSpec((8, 128), None)])(x)
        def b(x):
            return pl.pallas_call(k, out_shape=x, in_specs=[pl.BlockSpec((8, 128), None)])(x)
    """),
        "k.py",
    )
    assert [
        (s.function, s.in_specs[0].span.start_line, s.in_specs[0].block_shape.span.start_line) for s in result.sites
    ] == [("a", 2, 2), ("b", 4, 4)]


# --- keyword arguments: where the fixes insert one, without parsing the call again ---------------


def ast_span(node: ast.AST, lines: list[str]) -> Span:
    """An ast node's span with its UTF-8 byte columns turned into code points, here, apart from the locator."""

    def column(line: int, byte: int) -> int:
        return len(lines[line - 1].encode()[:byte].decode())

    return Span(
        node.lineno, column(node.lineno, node.col_offset), node.end_lineno, column(node.end_lineno, node.end_col_offset)
    )


@pytest.mark.parametrize("path", [p for p in JAX_FILES if "pallas_call" in p.read_text()], ids=lambda p: p.name)
def test_keyword_positions_of_jax_tpu_ops_are_those_of_ast(path):
    source = path.read_text()
    lines = source.split("\n")
    calls = {ast_span(n, lines): n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)}
    for site in locate(source, str(path)).sites:
        expected = tuple((k.arg, ast_span(k, lines)) for k in calls[site.span].keywords if k.arg is not None)
        assert site.keywords == expected and expected


def test_keyword_positions_count_code_points_on_non_ascii_lines():
    source = textwrap.dedent("""\
        from jax.experimental import pallas as pl

        def f(x):
            return pl.pallas_call(kernel, name="注意力", out_shape=x,  # 形状 first
                debug="é", grid=(2,), in_specs=[pl.BlockSpec((8, 128), None)], **extra)(x)
    """)
    site = only_site(source)
    assert site.keywords == (
        ("name", Span(4, 34, 4, 44)),
        ("out_shape", Span(4, 46, 4, 57)),
        ("debug", Span(5, 8, 5, 17)),
        ("grid", Span(5, 19, 5, 28)),
        ("in_specs", Span(5, 30, 5, 69)),
    )
    assert [source_at(source, span) for _, span in site.keywords] == [
        'name="注意力"',
        "out_shape=x",
        'debug="é"',
        "grid=(2,)",
        "in_specs=[pl.BlockSpec((8, 128), None)]",
    ]
    assert pickle.loads(pickle.dumps(site)) == site  # sites cross a process boundary


def test_keyword_positions_are_those_of_the_call_at_the_span():
    """A partial's keywords are written elsewhere: the fixes insert into the call that is the site."""
    source = textwrap.dedent("""\
        from functools import partial
        from jax.experimental import pallas as pl

        def f(x):
            call = partial(pl.pallas_call, out_shape=x, in_specs=[pl.BlockSpec((8, 128), None)])
            return call(kernel, out_specs = pl.BlockSpec((8, 256), None), grid=(4,))(x)
    """)
    site = only_site(source)
    assert [(name, source_at(source, span)) for name, span in site.keywords] == [
        ("out_specs", "out_specs = pl.BlockSpec((8, 256), None)"),
        ("grid", "grid=(4,)"),
    ]
    twice = locate(
        "def a(x):\n    return pl.pallas_call(k, out_shape=x)(x)\n"
        "def b(x):\n    return pl.pallas_call(k, out_shape=x)(x)\n",
        "k.py",
    )
    assert [s.keywords for s in twice.sites] == [
        (("out_shape", Span(2, 29, 2, 40)),),
        (("out_shape", Span(4, 29, 4, 40)),),
    ]


def test_cached_and_cold_results_are_equal():
    source = (JAX_TPU_OPS / "flash_attention.py").read_text()
    clear_cache()
    cold = locate(source, "flash_attention.py")
    assert locate(source, "flash_attention.py") == cold
    edited = source.replace(
        "block_b, 1, block_q, head_dim), q_index_map", "block_b, 1, block_q, 2 * head_dim), q_index_map"
    )
    (changed,) = [b for s in locate(edited, "f.py").sites for b in s.in_specs if "2 * head_dim" in b.block_shape.text]
    assert changed.index == 0


def test_a_call_leaves_no_cyclic_garbage():
    """locate() pauses the garbage collector: that is only free if reference counting frees everything."""
    source = (JAX_TPU_OPS / "splash_attention" / "splash_attention_kernel.py").read_text()
    gc.collect()
    clear_cache()
    locate(source, "splash_attention_kernel.py")
    clear_cache()
    assert gc.collect() == 0
    assert gc.isenabled()


def test_windows_newlines():
    source = textwrap.dedent(MATMUL).replace("\n", "\r\n")
    site = only_site(source)
    assert site.in_specs[1].block_shape == Expr(Span(12, 16, 12, 27), "(1024, 128)")


def test_syntax_error_keeps_the_sites_of_statements_that_parse():
    result = locate(
        textwrap.dedent("""\
        def good(x):
            return pl.pallas_call(k, out_shape=x, in_specs=[pl.BlockSpec((8, 128), None)])(x)

        def broken(x):
            return pl.pallas_call(k, out_shape=x, in_specs=[

        def also_good(x):
            return pl.pallas_call(k, out_shape=x)(x)
    """),
        "k.py",
    )
    assert result.error.startswith("syntax error at line 5:")
    assert [(s.function, s.span.start_line) for s in result.sites] == [("good", 2), ("also_good", 8)]


# --- 3. never raises ---------------------------------------------------------------------------------

ODD_INPUTS = [
    "",
    "\n",
    "\0",
    "x = (",
    ")",
    "def f(:\n",
    "pl.pallas_call(",
    "pl.pallas_call(k, in_specs=[pl.BlockSpec((8,",
    "\ufeffimport x\n",
    "a\rb\r\n",
    "\x0c\n",
    "if 1:\n\tx=1\n        y=2\n",
    "(" * 500,
    "[" * 100_000,
    "x = " + "-" * 100_000 + "1",
    "é = pl.pallas_call(k, in_specs=[pl.BlockSpec((8, 128), None)])\n",
    "pl.pallas_call(k, in_specs=[pl.BlockSpec((8,128), f)])(x)\n\0\n",
    "@partial(pl.pallas_call\n",
    "pallas_call = partial(pl.pallas_call, interpret=True)\npallas_call(k, in_specs=pallas_call)\n",
    "def f():\n  s = s + [pl.BlockSpec((1,), None)]\n  s.append(s)\n  return pl.pallas_call(k, in_specs=s)\n",
    "def f():\n  return f()\npl.pallas_call(k, in_specs=f(), out_specs=f()[0])\n",
    "x = 1; pl.pallas_call(k, grid=x); y = 2\nif x: z = pl.pallas_call(k)\nelse: z = 0\n",
    "class A:\n  specs = [pl.BlockSpec((1,), None)]\n  call = pl.pallas_call(k, in_specs=specs)\n",
    "match x:\n  case [a, *rest]:\n    s = a\n  case _:\n    s = None\npl.pallas_call(k, in_specs=[s])\n",
    "try:\n  s = [pl.BlockSpec((1,), None)]\nexcept E as e:\n  s = e\nfinally:\n  pass\npl.pallas_call(k, in_specs=s)\n",
]


@pytest.mark.parametrize("source", ODD_INPUTS, ids=range(len(ODD_INPUTS)))
def test_odd_inputs_never_raise(source):
    result = locate(source, "odd.py")
    assert isinstance(result, LocateResult)
    assert result.internal_error is None, result.internal_error


@pytest.mark.parametrize("count", [10, pytest.param(50, marks=pytest.mark.slow)], ids=lambda n: f"{n}-cuts")
@pytest.mark.parametrize("path", [p for p in JAX_FILES if "pallas_call" in p.read_text()], ids=lambda p: p.name)
def test_every_prefix_of_a_jax_kernel_file_never_raises(path, count):
    source = path.read_text()
    cuts = random.Random(path.name).sample(range(len(source)), count)
    for cut in cuts:
        result = locate(source[:cut], str(path))
        assert result.internal_error is None, (cut, result.internal_error)
        for site in result.sites:
            for expr in exprs_of(site):
                assert source_at(source, expr.span) == expr.text, (cut, expr)


# --- 4. an edit parses again only what it touched (statements.py) ---------------------------------

EDITED = [
    'x = 1; doc = """\na = 1\nb = 2\n"""\ny = 3\n',
    "x = (1,\n2); y = 3\nz = 4\n",
    "x = 1; z = 1 + \\\n2\nw = 3\n",  # a `;` and a backslash: the next line is not afresh
    "@d\ndef f():\n    pass\nz = 3\n",
    "if a:\n    pass\nelse:\n    pass\nz = 1\n",
    "def f():\n    return 1\n\n# note\nclass A:\n    b = 2\n",
]


@pytest.mark.parametrize("source", EDITED, ids=range(len(EDITED)))
def test_statements_after_an_edit_are_those_of_a_whole_parse(source):
    from vmem_lsp.source.statements import top_level_statements

    def dump(statements):
        return [ast.dump(s, include_attributes=True) for s in statements]

    lines = source.split("\n")
    for i, line in enumerate(lines):
        for new in (
            lines[:i] + [line + " "] + lines[i + 1 :],
            lines[:i] + ["q = 0"] + lines[i:],
            lines[:i] + ["    q"] + lines[i:],
            lines[:i] + lines[i + 1 :],
            lines[:i] + [line[: len(line) // 2]] + lines[i + 1 :],
        ):
            text = "\n".join(new)
            clear_cache()
            top_level_statements(source, lines, "edited.py")
            statements, error = top_level_statements(text, new, "edited.py")
            try:
                expected = dump(ast.parse(text).body)
            except SyntaxError:
                assert error is not None
                continue
            assert error is None and dump(statements) == expected, text


def test_the_lines_an_edit_left_are_counted_as_one_at_a_time():
    """statements._same_lines halves the lines in doubt: the same counts as comparing them in turn."""
    from vmem_lsp.source.statements import _same_lines

    def in_turn(old, new, most, from_end):
        n = 0
        while n < most and (old[-1 - n] == new[-1 - n] if from_end else old[n] == new[n]):
            n += 1
        return n

    rng = random.Random(0)
    for _ in range(3000):
        old = [rng.choice("ab") for _ in range(rng.randrange(12))]
        new = list(old)
        for _ in range(rng.randrange(3)):
            at = rng.randrange(len(new) + 1)
            new[at:at] = [rng.choice("abc")] if rng.random() < 0.5 or not new else []
            if new and rng.random() < 0.3:
                del new[rng.randrange(len(new))]
        for most in range(min(len(old), len(new)) + 1):
            for from_end in (False, True):
                assert _same_lines(old, new, from_end, most) == in_turn(old, new, most, from_end), (old, new, most)


def test_an_editors_edits_locate_as_a_fresh_locate():
    """Typing, Enter above a site (its lines move), a syntax error, undo: as locating each text afresh."""
    import dataclasses

    source = textwrap.dedent("""\
        from jax.experimental import pallas as pl

        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...]

        a = pl.pallas_call(kernel, grid=(1,)); b = pl.pallas_call(kernel, grid=(2,))

        def run(x):
            specs = [pl.BlockSpec((8, 128), lambda i: (i, 0))]
            return pl.pallas_call(kernel, grid=(4,), in_specs=specs, out_specs=specs[0])(x)
        """)
    lines = source.split("\n")
    texts = [
        source,
        source.replace("(8, 128)", "(16, 128)"),
        "\n".join(lines[:2] + [""] + lines[2:]),
        "\n".join(lines[:8] + ["    specs = [pl.BlockSpec((8, 1"] + lines[9:]),
        source,
        "\n".join(lines[:7] + ["    pass"] + lines[7:]),
        "\n".join(lines[:5] + lines[6:]),
        source,
    ]
    clear_cache()
    for number, text in enumerate(texts):
        edited = locate(text, "edited.py")
        fresh = locate(text, f"fresh{number}.py")
        assert edited.error == fresh.error and edited.internal_error is None
        assert [dataclasses.replace(s, path="fresh") for s in edited.sites] == [
            dataclasses.replace(s, path="fresh") for s in fresh.sites
        ], number
    assert [site.grid.text for site in locate(source, "edited.py").sites] == ["(1,)", "(2,)", "(4,)"]


# Sites that read other top-level statements: a module constant, a helper, a class, a partial, a
# name bound after its use, a recursion, text that is not ASCII. locate.py keeps each top-level
# statement's sites with what they read; an edit anywhere must give what a fresh locate gives.
SHARED = """\
from functools import partial
from typing import NamedTuple
from jax.experimental import pallas as pl

GRID = (4,)
BLOCK = (8, 128)
SPECS = [pl.BlockSpec(BLOCK, lambda i: (i, 0))]
MORE = SPECS + [pl.BlockSpec((8, 256), None)]
TAIL = [pl.BlockSpec((1, 128), None)]

def specs(n):
    return [pl.BlockSpec((n, 128), lambda i: (i, 0))] + TAIL

class Out(NamedTuple):
    a: object
    b: object

call = partial(pl.pallas_call, grid=GRID)

def uses_module(x):
    return pl.pallas_call(k, in_specs=MORE, out_specs=specs(8)[0], grid=GRID)(x)

def uses_the_same(x):  # what uses_module computed, kept for this one to read: with what it read
    return pl.pallas_call(k, in_specs=MORE, out_specs=specs(4), grid=(8,))(x)

def uses_class(x):
    s = SPECS
    return call(k, out_specs=Out(a=s[0], b=pl.BlockSpec(BLOCK, None)), scratch_shapes=[pltpu.VMEM(BLOCK, f32)])(x)

def unrelated(x):
    note = "héllo wörld"
    return x + 1

def loops():
    return again()

def again():
    return loops()

def cyclic(x):
    return pl.pallas_call(k, in_specs=[pl.BlockSpec(BLOCK, None)] + loops(), grid=LATER)(x)

top = pl.pallas_call(k, in_specs=SPECS, grid=LATER, compiler_params=dict(mosaic=dict(vmem_limit_bytes=LIMIT)))
LIMIT = 1 << 20
LATER = (2, 2)
é_spec = pl.pallas_call(k, in_specs=[pl.BlockSpec((8, 128), None)], grid=(1,))  # ünïcode
"""

SHARED_EDITS = [
    ("GRID = (4,)", "GRID = (6,)"),
    ("GRID = (4,)", "GRID = (4,); SPECS = [pl.BlockSpec((1, 1), None)]"),
    ("BLOCK = (8, 128)", "BLOCK = (16, 128)"),
    ("SPECS = [pl", "SPECS = specs(2) + [pl"),
    ("TAIL = [pl.BlockSpec((1, 128)", "TAIL = [pl.BlockSpec((2, 128)"),
    ("MORE = SPECS + [", "MORE = SPECS + TAIL + ["),
    ("    return [pl.BlockSpec((n, 128)", "    return [None, pl.BlockSpec((n, 256)"),
    ("    b: object\n", "    b: object\n    c: object\n"),
    ("class Out(NamedTuple)", "class Out"),
    ("grid=GRID)\n\ndef uses", "grid=(1,))\n\ndef uses"),
    ("call = partial(", "calls = partial("),
    ('    note = "héllo wörld"', '    note = "héllo wörld ünd méhr"'),
    ("    return x + 1", "    SPECS = None\n    return x + 1"),
    ("def unrelated(x):", "GRID = (9, 9)\n\ndef unrelated(x):"),
    ("def unrelated(x):", "def specs(n):\n    return []\n\ndef unrelated(x):"),
    ("    return again()", "    return [pl.BlockSpec(BLOCK, None)]"),
    ("LATER = (2, 2)", "LATER = (3, 3)"),
    ("LATER = (2, 2)", ""),
    ("LIMIT = 1 << 20", "LIMIT = 1 << 21"),
    ("é_spec = pl", "é_spéc = pl"),
    ("((8, 128), None)], grid=(1,))", "((8, 128), None)], grid=(1, 2))"),
    ("    s = SPECS", "    s = SPECS + SPECS"),
    ("def uses_class(x):", "def uses_class(x, SPECS):"),
]


def _plain(sites):
    import dataclasses

    return [dataclasses.replace(s, path="p") for s in sites]


@pytest.mark.parametrize("edit", range(len(SHARED_EDITS)), ids=lambda i: SHARED_EDITS[i][1][:30])
def test_sites_kept_across_an_edit_are_those_of_a_fresh_locate(edit):
    """Each edit, then undone, then a keystroke on every line of the edited text (a character not
    ASCII among them): as locating each text afresh, by a path the locator has not seen."""
    old, new = SHARED_EDITS[edit]
    assert old in SHARED
    edited = SHARED.replace(old, new, 1)
    clear_cache()
    texts = [SHARED, edited, SHARED, edited]
    lines = edited.split("\n")
    texts += ["\n".join(lines[:i] + [line + (" é" if i % 3 else " ")] + lines[i + 1 :]) for i, line in enumerate(lines)]
    for number, text in enumerate(texts):
        got = locate(text, "kept.py")
        fresh = locate(text, f"fresh{edit}-{number}.py")
        assert got.internal_error is None and fresh.internal_error is None, got.internal_error or fresh.internal_error
        assert (got.error, _plain(got.sites)) == (fresh.error, _plain(fresh.sites)), (number, text)
        for site in got.sites:
            for expr in exprs_of(site):
                assert source_at(text, expr.span) == expr.text, (number, expr)


def test_an_edit_builds_the_sites_of_its_own_top_level_statement_only(monkeypatch):
    """A keystroke in a function without sites builds none; one in a function with a site builds that
    one; one in a statement the sites read (a module constant) builds those that read it. Where a
    recursion is cut short (SHARED's loops() and again()), every keystroke builds them all."""
    from vmem_lsp.source import locate as located

    built: list[int] = []
    original = located._kernel_site

    def counted(file, call, piece, function):
        site = original(file, call, piece, function)
        built.append(site.span.start_line)
        return site

    monkeypatch.setattr(located, "_kernel_site", counted)
    source = SHARED.replace("    return again()", "    return []")
    lines = source.split("\n")

    def site_in(function: str) -> int:
        """The line after `function`'s def: its pallas_call's (uses_class's is one line further)."""
        return next(n for n, line in enumerate(lines, 1) if line.startswith(f"def {function}(")) + 1

    def built_by(old: str, new: str, text: str = source) -> list[int]:
        assert old in text
        built.clear()
        result = locate(text.replace(old, new, 1), "counted.py")
        assert result.internal_error is None and len(result.sites) == 6
        return sorted(built)

    clear_cache()
    assert len(locate(source, "counted.py").sites) == 6
    assert built_by("    return x + 1", "    return x + 2") == []
    assert built_by('    note = "héllo wörld"', '    note = "héllo wörld!"') == []
    uses_module, uses_the_same, uses_class = site_in("uses_module"), site_in("uses_the_same"), site_in("uses_class") + 1
    top = lines.index("LIMIT = 1 << 20")  # 0-based: the 1-based number of the line before, `top = ...`
    assert built_by("out_specs=specs(8)[0]", "out_specs=specs(9)[0]") == [uses_module]
    assert built_by("GRID = (4,)", "GRID = (6,)") == [uses_module, uses_class]  # grid=GRID, and call's
    assert built_by("LIMIT = 1 << 20", "LIMIT = 1 << 22") == []  # bound after `top`: not followed there
    # Read through MORE and specs(), whose values uses_module computed and uses_the_same was given:
    assert built_by("SPECS = [pl", "SPECS = [None, pl") == [uses_module, uses_the_same, uses_class, top]
    assert built_by("TAIL = [pl.BlockSpec((1,", "TAIL = [pl.BlockSpec((3,") == [uses_module, uses_the_same]
    assert built_by("SPECS = [pl", "SPECS = [None, pl") == []  # kept from the text before
    every = sorted(site.span.start_line for site in locate(source, "every.py").sites)
    assert sorted(set(built_by("    return x + 1", "    return x + 2", SHARED))) == every  # kept, then again
    assert built_by("    return x + 1", "    return x + 3", SHARED) == every  # afresh, once


def test_a_recursion_cut_short_gives_what_a_fresh_locate_gives():
    """`A` is asked for while computing `f()`'s value or the other way round, whichever site asks
    first: with the first site's sites kept, the second's must still come out as in one locate."""
    source = textwrap.dedent("""\
        from jax.experimental import pallas as pl

        def first(x):
            return pl.pallas_call(k, in_specs=A, grid=(1,))(x)

        def second(x):
            return pl.pallas_call(k, in_specs=f(), grid=(2,))(x)

        def f():
            return A

        A = f() + [pl.BlockSpec((8, 128), None)]
        """)
    clear_cache()
    for number, text in enumerate(
        [source, source.replace("grid=(2,)", "grid=(3,)"), source.replace("grid=(1,)", "grid=(4,)"), source]
    ):
        got, fresh = locate(text, "cycle.py"), locate(text, f"cycle-fresh{number}.py")
        assert got.internal_error is None
        assert _plain(got.sites) == _plain(fresh.sites), number


PRIVATE_KERNEL = """\
from jax.experimental import pallas as pl

def _kernel_call(x):
    return pl.pallas_call(k, out_shape=x)(x)

def _helper(x):
    return _kernel_call(x)

def api(x):
    return _helper(x)
"""


def test_example_calls_is_what_add_examples_writes_for_and_follows_edits():
    """VMEM020's suggestion comes from the locator: the public function that reaches a private one
    (templates.reaching_function); after an edit elsewhere, what the kept statements call is
    still right; none where the module does not parse."""
    from vmem_lsp.source.templates import reaching_function

    clear_cache()
    (site,) = locate(PRIVATE_KERNEL, "m.py").sites
    assert site.example_calls == "api"
    cut = PRIVATE_KERNEL.replace("    return _helper(x)", "    return x")
    (site,) = locate(cut, "m.py").sites
    assert site.example_calls == "_kernel_call"
    (site,) = locate(PRIVATE_KERNEL.replace("def api(", "def _api("), "m.py").sites
    assert site.example_calls == "_kernel_call"
    assert [s.example_calls for s in locate(PRIVATE_KERNEL + "\ndef broken(:\n", "m.py").sites] == [None]
    # The caller names the helper in fullwidth letters, which the parser folds (NFKC) into `_helper`.
    (site,) = locate(PRIVATE_KERNEL.replace("return _helper(x)", "return _\uff48elper(x)"), "m.py").sites
    assert site.example_calls == "api"
    for path in JAX_FILES:
        text = path.read_text()
        module = ast.parse(text)
        for site in locate(text, str(path)).sites:
            found = reaching_function(module, site.span.start_line)
            assert site.example_calls == (found.name if found else None), (path, site.span)
