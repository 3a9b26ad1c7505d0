"""Edits that are right on any text. Python's ast counts
columns in UTF-8 bytes, vmem-lsp in code points: on a line with non-ASCII
text before a token, a byte column points past it (a shrink once turned
`BLÖCK = 512` into `BLÖCK = 5256x = BLÖCK`).

The properties: a kernel module is generated with non-ASCII identifiers,
strings and comments, astral characters, characters that str.splitlines
takes for line ends (\\x85, U+2028, \\f), tabs and CRLF; its ASCII twin
replaces each non-ASCII character by one ASCII character, so every token
sits at the same line and code-point column in both. Every rewrite and
every knob must then be the same on both (the ASCII twin being where byte
and code point agree), start and end on token boundaries, leave the rest
of the file alone and come back byte for byte by undo."""

from __future__ import annotations

import ast
import io
import tokenize

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fixes import assert_intact, site_rewrites, whole_arrays
from support.twins import LETTERS, TEXT_CHARS, ascii_twin

from vmem_lsp.fixes import rewrites
from vmem_lsp.fixes.knobs import constant_knobs, default_knobs, example_knobs
from vmem_lsp.source.directives import SHAPE_FUNCTION, compile_call, find_examples
from vmem_lsp.source.locate import locate
from vmem_lsp.source.model import TextEdit
from vmem_lsp.source.text import apply_edits
from vmem_lsp.tpu.chips import MiB

PATH = "/work/kernel.py"

# What strings and comments hold besides: the keywords a text search would take for code.
DECOYS = ("out_shape=", "in_specs=[", "grid_spec=(", "compiler_params=", "(", ")")


@st.composite
def names(draw, base: str) -> str:
    """`base` with some of its letters non-ASCII."""
    return "".join(LETTERS[c] if c in LETTERS and draw(st.booleans()) else c for c in base)


def texts(decoys: bool = False):
    text = st.text(st.sampled_from(TEXT_CHARS), max_size=10)
    if decoys:
        text = st.tuples(text, st.sampled_from(("",) + DECOYS), text).map("".join)
    return text


@st.composite
def kernel_modules(draw) -> str:
    """A Pallas kernel module in one of the shapes the rewrites handle."""
    n, m = draw(names("rows")), draw(names("cols"))
    block, kernel, func = draw(names("BLOCK")), draw(names("double_kernel")), draw(names("copy_rows"))
    spec, label, tag, knob = draw(names("spec")), draw(names("label")), draw(names("tag")), draw(names("bk"))
    I = draw(st.sampled_from(["    ", "\t"]))
    T = draw(st.sampled_from(["", "\t"]))

    def comment() -> str:
        return "  # " + draw(texts(decoys=True)) if draw(st.booleans()) else ""

    def string() -> str:
        return '"' + draw(texts()) + '"'

    shape, index_map = draw(
        st.sampled_from(
            [
                (f"({T}{n}, {m})", "lambda: (0, 0)"),  # whole arrays: a grid can be introduced
                (f"({T}256, 1024)", "lambda i: (i, 0)"),  # literal sizes: shrunk in place
                (f"({block}, {m})", "lambda i: (i, 0)"),
            ]
        )
    )
    keywords = draw(st.booleans())
    made = (
        f"pl.BlockSpec(block_shape={shape}, index_map={index_map})"
        if keywords
        else f"pl.BlockSpec({shape}, {index_map})"
    )
    named = draw(st.booleans())
    grid = draw(st.sampled_from(["", f"grid=({T}16,),", f"grid=({n} // {block},),"]))
    params = draw(
        st.sampled_from(
            [
                [],
                ['compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),'],
                [f"compiler_params=pltpu.CompilerParams({comment()}", f'{I}dimension_semantics=("parallel",)),'],
                ["compiler_params=pltpu.CompilerParams(),"],
                ["compiler_params=pltpu.CompilerParams(vmem_limit_bytes=32 * 1024 * 1024),"],
            ]
        )
    )
    tpu_import = "from jax.experimental.pallas import tpu as pltpu" if params or draw(st.booleans()) else ""
    call = [
        f"{I}return pl.pallas_call({comment()}",
        f"{I * 2}{kernel},{comment()}",
        f"{I * 2}out_shape={T}jax.ShapeDtypeStruct(({n}, {m}), x.dtype),{comment()}",
        *([f"{I * 2}{grid}{comment()}"] if grid else []),
        f"{I * 2}in_specs=[{spec if named else made}],{comment()}",
        f"{I * 2}out_specs={spec if named else made},{comment()}",
        *[f"{I * 2}{line}{comment()}" for line in params],
        f"{I})(x)",
    ]
    lines = [
        f'"""{draw(texts())}"""',
        "import jax",
        "from jax.experimental import pallas as pl",
        tpu_import,
        f"{block} = {T}256{comment()}",
        "",
        "",
        f"def {kernel}(x_ref, o_ref):{comment()}",
        f"{I}o_ref[...] = x_ref[...] * 2",
        "",
        "",
        f"# vmem: {func}(f32[4096, 1024], {tag}={string()}, {knob}={T}512)",
        f"def {func}(x, {tag}={string()}, *, {knob}=1024):",
        f"{I}{label} = {string()}; {n}, {m} = x.shape{comment()}",
        *([f"{I}{label} = {string()}; {spec} = {made}{comment()}"] if named else []),
        *call,
    ]
    return draw(st.sampled_from(["\n", "\r\n"])).join(lines) + "\n"


def token_boundaries(source: str) -> set[tuple[int, int]]:
    """(line, column) where a token starts or ends, columns in code points;
    also the tokens of each `# vmem:` example, which Python sees as a comment."""
    tokens = tokenize.generate_tokens(io.StringIO(source, newline="").readline)
    found = {at for token in tokens for at in (token.start, token.end)}
    for example in find_examples(source, PATH)[0]:
        tokens = tokenize.generate_tokens(io.StringIO(example.text).readline)
        found |= {
            (example.line, example.span.start_col + col) for token in tokens for _, col in (token.start, token.end)
        }
    return found


def on_boundaries(source: str, edits: list[TextEdit]) -> list[TextEdit]:
    """The edits that start or end inside a token: a comment, a string, a name."""
    boundaries = token_boundaries(source)
    return [e for e in edits if {(e.span.start_line, e.span.start_col), (e.span.end_line, e.span.end_col)} - boundaries]


def every_edit(source: str) -> list[tuple[str, list[TextEdit] | None]]:
    """(label, edits) of every rewrite at every site and every knob halved."""
    located = locate(source, PATH)
    assert located.error is None, located.error
    made = [(label, edits) for site in located.sites for label, edits in site_rewrites(site, source)]
    [example], _ = find_examples(source, PATH)
    knobs = [*example_knobs(example), *default_knobs(example, source), *constant_knobs(PATH, source)]
    for knob in knobs:
        made.append((f"knob {knob.name}", [TextEdit(PATH, knob.span, str(knob.value // 2))]))
    return made


def assert_twins(source: str) -> None:
    twin = ascii_twin(source)
    assert twin.isascii() and len(twin) == len(source)
    made, expected = every_edit(source), every_edit(twin)
    assert [(ascii_twin(label), [(e.span, ascii_twin(e.new_text)) for e in edits or ()]) for label, edits in made] == [
        (label, [(e.span, e.new_text) for e in edits or ()]) for label, edits in expected
    ]
    assert sum(1 for _, edits in made if edits) >= 4  # at least a limit, two single-buffers, a knob
    for label, edits in made:
        if edits:
            assert_intact(source, edits, label)
            assert on_boundaries(source, edits) == [], label


# A few modules in the fast tier, many in the full run: each module is a whole set of rewrites.
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kernel_modules())
def test_every_rewrite_on_non_ascii_text_is_its_ascii_twins(source):
    assert_twins(source)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kernel_modules())
def test_every_rewrite_on_non_ascii_text_is_its_ascii_twins_on_many_modules(source):
    assert_twins(source)


def test_knobs_on_a_non_ascii_constant_edit_its_number():
    """The case that forced the rule: a shrink of `BLÖCK = 1024` writes `BLÖCK = 512`."""
    source = "BLÖCK = 1024\n\n# vmem: f(f32[8, 8], bk=BLÖCK, tag='ü𝔘', bm=1024)\ndef f(x, bk=1, tag='', bm=1): ...\n"
    [knob] = constant_knobs(PATH, source)
    assert apply_edits(source, [TextEdit(PATH, knob.span, "512")]).startswith("BLÖCK = 512\n\n")
    [example], _ = find_examples(source, PATH)
    [bm] = example_knobs(example)
    assert apply_edits(source, [TextEdit(PATH, bm.span, "512")]).splitlines()[2].endswith("tag='ü𝔘', bm=512)")


DECOY_CALL = """from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def copy(x):
    return pl.pallas_call(  # out_shape= comes next; in_specs=[ too
        kernel, out_shape=x,  # grid_spec=( here
        in_specs=[pl.BlockSpec((8, 128), lambda: (0, 0))],
        compiler_params=pltpu.CompilerParams(  # dimension_semantics=( below
            dimension_semantics=("parallel",)),
    )(x)
"""


def keywords_of(source: str, name: str) -> list[str]:
    calls = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith(name)]
    return [k.arg for call in calls for k in call.keywords]


def test_keywords_are_inserted_in_the_code_not_in_a_comment_that_names_them():
    source = DECOY_CALL.replace(
        "        compiler_params=pltpu.CompilerParams(  # dimension_semantics=( below\n"
        '            dimension_semantics=("parallel",)),\n',
        "",
    )
    [site] = locate(source, PATH).sites
    after = apply_edits(source, rewrites.set_vmem_limit(site, source, 100 * MiB))
    assert "compiler_params" in keywords_of(after, "pallas_call")
    assert "# out_shape= comes next; in_specs=[ too\n" in after and "# grid_spec=( here\n" in after
    [(rows, edits), *_] = rewrites.introduce_grid(site, whole_arrays(site), source)
    assert "grid" in keywords_of(apply_edits(source, edits), "pallas_call")


def test_a_limit_goes_into_compiler_params_in_the_code_not_in_its_comment():
    [site] = locate(DECOY_CALL, PATH).sites
    after = apply_edits(DECOY_CALL, rewrites.set_vmem_limit(site, DECOY_CALL, 100 * MiB))
    assert keywords_of(after, "CompilerParams") == ["vmem_limit_bytes", "dimension_semantics"]
    assert "CompilerParams(  # dimension_semantics=( below\n" in after


@pytest.mark.parametrize("zero_d", ["f32[]", "f32[ ]", "f32[()]"])
def test_a_0_d_array_parses_and_the_knobs_after_it_keep_their_columns(zero_d):
    """`f32[]` is how the compiler writes a 0-d array; Python does not parse it. It is read as
    `f32[()]` with every column of the text kept: a fix of `bm` after it, and after non-ASCII
    text, still edits bm's number."""
    source = f"# vmem: f(s32[], tag='ü𝔘', s={zero_d}, x=f32[8, 128], bm=1024)\ndef f(**kw): ...\n"
    [example], errors = find_examples(source, PATH)
    assert errors == []
    call = compile_call(example.text)
    shapes = [
        ast.unparse(n) for n in ast.walk(call) if isinstance(n, ast.Call) and ast.unparse(n.func) == SHAPE_FUNCTION
    ]
    assert shapes == [
        f"{SHAPE_FUNCTION}('int32', ())",
        f"{SHAPE_FUNCTION}('float32', ())",
        f"{SHAPE_FUNCTION}('float32', (8, 128))",
    ]
    [bm] = example_knobs(example)
    assert apply_edits(source, [TextEdit(PATH, bm.span, "512")]).splitlines()[0].endswith(", bm=512)")
