"""The source rewrites behind the fixes, as minimal text edits at positions
the locator found: introduce a grid, set vmem_limit_bytes, single-buffer a
window, resize blocks written as numbers. Each returns None (or nothing) when the code is not in a shape it can
rewrite safely."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ..budget import literal_int
from ..correlate import spec_in_site
from ..results import CapturedCall
from ..source.model import BlockSpecSite, Expr, KernelSite, Span, TextEdit
from ..source.syntax import parse_quietly
from ..source.text import node_span, offset, split_lines
from .edits import position

MiB = 1 << 20

TPU_ALIAS = re.compile(
    r"^\s*(?:from\s+jax\.experimental\.pallas\s+import\s+tpu\s+as\s+(\w+)"
    r"|import\s+jax\.experimental\.pallas\.tpu\s+as\s+(\w+))",
    re.M,
)
TPU_IMPORT = "from jax.experimental.pallas import tpu as pltpu\n"
PALLAS_ALIAS = re.compile(
    r"^\s*(?:from\s+jax\.experimental\s+import\s+pallas\s+as\s+(\w+)"
    r"|import\s+jax\.experimental\.pallas\s+as\s+(\w+))",
    re.M,
)
KEYWORDS = ("in_specs", "out_specs", "grid_spec", "out_shape")


def _node(expr: Expr | None) -> ast.expr | None:
    if expr is None:
        return None
    try:
        return parse_quietly(expr.text.strip(), mode="eval").body
    except SyntaxError:
        return None


def _span_in(expr: Expr, node: ast.AST) -> Span:
    """A node's span in the file, from its position inside `expr.text`."""
    lead = len(expr.text) - len(expr.text.lstrip())
    inside = node_span(node, split_lines(expr.text.strip()))

    def at(line: int, col: int) -> tuple[int, int]:
        return (expr.span.start_line + line - 1, col + (expr.span.start_col + lead if line == 1 else 0))

    return Span(*at(inside.start_line, inside.start_col), *at(inside.end_line, inside.end_col))


def _distinct(edits: list[TextEdit]) -> list[TextEdit]:
    """Each edit once. One BlockSpec or scratch object used for several
    operands (ragged paged attention's `lm_scratch` is both l and m; a
    `q_block_spec` is an input and the output) is located once per use, and
    the same edit applied twice writes its text over the tokens after it."""
    return list(dict.fromkeys(edits))


def _keyword_anchor(site: KernelSite, source: str) -> tuple[int, int, str] | None:
    """Where to insert a new keyword argument of the pallas_call: before its
    first in_specs=/out_specs=/... keyword; with the text to put after it.
    The place is a keyword argument the locator recorded (KernelSite.keywords):
    a comment or a string that holds `out_shape=` is not a keyword."""
    spans = [span for name, span in site.keywords if name in KEYWORDS]
    if not spans:
        return None
    first = min(spans, key=lambda span: (span.start_line, span.start_col))
    line, col = first.start_line, first.start_col
    line_text = split_lines(source)[line - 1]
    starts_line = not line_text[:col].strip()
    return line, col, ("\n" + line_text[:col]) if starts_line else " "


def introduce_grid(site: KernelSite, call: CapturedCall, source: str, most: int = 6):
    """For a single-step kernel whose windows are whole arrays: blocks of R
    rows, a grid over them, and index maps that follow it. Yields (R, edits)."""
    specs = (*site.in_specs, *site.out_specs)
    if site.grid is not None or site.grid_spec is not None or not specs or call.grid:
        return
    windows = [op for op in call.operands if op.role != "prefetch"]
    if any(op.block_shape != op.full_shape or len(op.full_shape) < 2 for op in windows):
        return
    rows_total = {op.full_shape[0] for op in windows}
    if len(rows_total) != 1:
        return
    [full] = rows_total
    firsts: list[tuple[Expr, ast.expr]] = []  # each shape's first element
    maps: list[tuple[Expr, ast.Tuple]] = []  # each index map's returned tuple
    for spec in specs:
        shape, index_map = _node(spec.block_shape), _node(spec.index_map)
        if not (
            spec.block_shape is not None
            and spec.index_map is not None
            and isinstance(shape, ast.Tuple)
            and len(shape.elts) >= 2
            and isinstance(index_map, ast.Lambda)
            and not index_map.args.args
            and isinstance(index_map.body, ast.Tuple)
        ):
            return
        firsts.append((spec.block_shape, shape.elts[0]))
        maps.append((spec.index_map, index_map.body))
    dim_texts = {ast.unparse(e) for _, e in firsts}
    anchor = _keyword_anchor(site, source)
    if len(dim_texts) != 1 or anchor is None:
        return
    [dim] = dim_texts
    line, col, after = anchor
    rows, found = full // 2, 0
    while rows >= 8 and found < most:
        if full % rows == 0 and rows % 8 == 0:
            edits = [TextEdit(site.path, _span_in(block_shape, e), str(rows)) for block_shape, e in firsts]
            for map_expr, returned in maps:
                rest = [ast.unparse(x) for x in returned.elts[1:]]
                edits.append(TextEdit(site.path, map_expr.span, f"lambda i: ({', '.join(['i', *rest])})"))
            grid = f"{dim} // {rows}" if not dim.isdigit() else str(int(dim) // rows)
            edits.append(TextEdit(site.path, Span(line, col, line, col), f"grid=({grid},),{after}"))
            found += 1
            yield rows, _distinct(edits)
        rows //= 2


def set_vmem_limit(site: KernelSite, source: str, limit: int) -> list[TextEdit] | None:
    """The limit written as a number: in place of a number already there, or
    as a new keyword. Not in place of a name or a parameter (ragged paged
    attention passes its caller's `vmem_limit_bytes` through): the number
    would cut that plumbing; the value is to be raised where it is set."""
    value = f"{limit // MiB} * 1024 * 1024"
    if site.vmem_limit_bytes is not None:
        written = _node(site.vmem_limit_bytes)
        if written is None or literal_int(written) is None:
            return None
        return [TextEdit(site.path, site.vmem_limit_bytes.span, value)]
    params = site.compiler_params
    if params is not None:
        node = _node(params)
        if not isinstance(node, ast.Call):
            return None
        return [_first_argument(site.path, source, params, node, f"vmem_limit_bytes={value}")]
    anchor = _keyword_anchor(site, source)
    if anchor is None:
        return None
    line, col, after = anchor
    match = TPU_ALIAS.search(source)
    alias = (match[1] or match[2]) if match else "pltpu"
    edits = [
        TextEdit(
            site.path,
            Span(line, col, line, col),
            f"compiler_params={alias}.CompilerParams(vmem_limit_bytes={value}),{after}",
        )
    ]
    if match is None:
        edits.append(TextEdit(site.path, Span(*_after_imports(source), *_after_imports(source)), TPU_IMPORT))
    return edits


def _first_argument(path: str, source: str, call: Expr, node: ast.Call, text: str) -> TextEdit:
    """An edit that makes `text` the call's first argument, placed by the
    syntax tree: before the first argument there is, on a line of its own at
    its indent when it starts a line (jax's kernels end the line with
    `CompilerParams(`: inserting after the "(" would leave that line ending
    in a space); before the ")" of a call without arguments."""
    arguments: list[ast.expr | ast.keyword] = [*node.args, *node.keywords]
    if not arguments:
        whole = _span_in(call, node)
        return TextEdit(path, Span(whole.end_line, whole.end_col - 1, whole.end_line, whole.end_col - 1), text)
    first = _span_in(call, min(arguments, key=lambda a: (a.lineno, a.col_offset)))
    indent = split_lines(source)[first.start_line - 1][: first.start_col]
    after = f",\n{indent}" if not indent.strip() else ", "
    return TextEdit(path, Span(first.start_line, first.start_col, first.start_line, first.start_col), text + after)


def _after_imports(source: str) -> tuple[int, int]:
    try:
        body = parse_quietly(source).body
    except SyntaxError:
        return 1, 0
    imports = [n for n in body if isinstance(n, (ast.Import, ast.ImportFrom))]
    return ((imports[-1].end_lineno or imports[-1].lineno) + 1 if imports else 1), 0


def single_buffer(site: KernelSite, call: CapturedCall, role: str, index: int, source: str) -> list[TextEdit] | None:
    """pipeline_mode=pl.Buffered(1) as the BlockSpec's last argument, written
    right after the last argument already there, so a call whose ")" closes
    on a line of its own keeps it there alone."""
    spec = spec_in_site(site, call, role, index)
    if spec is None or spec.pipeline_mode is not None:
        return None
    start = offset(source, spec.span.start_line, spec.span.start_col)
    end = offset(source, spec.span.end_line, spec.span.end_col)
    written = Expr(spec.span, source[start:end])
    node = _node(written)
    match = PALLAS_ALIAS.search(source)
    if match is None or not isinstance(node, ast.Call):
        return None  # not a call, or no `pallas as pl` import to name Buffered by
    keyword = f"pipeline_mode={match[1] or match[2]}.Buffered(1)"
    arguments: list[ast.expr | ast.keyword] = [*node.args, *node.keywords]
    if not arguments:
        line, col = position(source, end - 1)
        return [TextEdit(site.path, Span(line, col, line, col), keyword)]
    last = _span_in(written, max(arguments, key=lambda a: (a.end_lineno or a.lineno, a.end_col_offset or 0)))
    return [TextEdit(site.path, Span(last.end_line, last.end_col, last.end_line, last.end_col), f", {keyword}")]


@dataclass(frozen=True)
class Written:
    """A block size written as a number in a shape: its token, and its place
    counted from the shape's end (-1 lanes, -2 sublanes), None when it is
    not an element of the shape itself (`(2 * 512, 512)`'s 2)."""

    value: int
    span: Span
    dim: int | None


def _int_nodes(node: ast.AST) -> list[ast.Constant]:
    """The integer literals in an expression, but for subscripts' indices:
    `x.shape[0]`'s 0 names a dimension, it is no size."""
    if isinstance(node, ast.Constant):
        return [node] if type(node.value) is int else []
    if isinstance(node, ast.Subscript):
        return _int_nodes(node.value)
    return [n for child in ast.iter_child_nodes(node) for n in _int_nodes(child)]


def _elements(node: ast.AST | None) -> list[ast.AST]:
    """A tuple's elements; a lone expression is one (`grid=8`)."""
    if node is None:
        return []
    return list(node.elts) if isinstance(node, (ast.Tuple, ast.List)) else [node]


def _shape_ints(expr: Expr | None) -> list[Written]:
    """Every integer literal written in a shape, with its place in it."""
    node = _node(expr)
    if expr is None or node is None:
        return []
    elements = node.elts if isinstance(node, (ast.Tuple, ast.List)) else []
    places = {id(e): at - len(elements) for at, e in enumerate(elements)}
    return [
        Written(n.value, _span_in(expr, n), places.get(id(n))) for n in _int_nodes(node) if isinstance(n.value, int)
    ]


def written_sizes(site: KernelSite) -> list[Written]:
    """The numbers written in the site's BlockSpecs and scratch shapes: where
    a block size is set when no parameter or constant sets it."""
    shapes = [s.block_shape for s in (*site.in_specs, *site.out_specs)] + [e.shape for e in site.scratch]
    return [written for shape in shapes for written in _shape_ints(shape)]


def axis_places(spec: BlockSpecSite) -> list[tuple[int, int]]:
    """(grid axis, block place from the end) of each bare parameter that the
    spec's index map returns, when it is written as `lambda i, j: (i, j)`."""
    node = _node(spec.index_map)
    if not (isinstance(node, ast.Lambda) and isinstance(node.body, ast.Tuple)):
        return []
    params = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
    elements = node.body.elts
    return [
        (params.index(e.id), at - len(elements))
        for at, e in enumerate(elements)
        if isinstance(e, ast.Name) and e.id in params
    ]


def _walks(site: KernelSite) -> dict[int, set[int]]:
    """grid axis -> the block places (from the end) it steps along, by the
    index maps (`axis_places`). An axis no map shows is absent: unknown, not "none"."""
    walks: dict[int, set[int]] = {}
    for spec in (*site.in_specs, *site.out_specs):
        for axis, place in axis_places(spec):
            walks.setdefault(axis, set()).add(place)
    return walks


def _grid_follows(site: KernelSite, call: CapturedCall, dims: set, size: int, new: int) -> list[TextEdit]:
    """The grid's edits when blocks of `size` at places `dims` become `new`:
    in each axis that steps along one of those places (any axis, when the
    index maps do not say), a count written as a number that was array //
    size is recounted, and the size written in a computed count follows
    (`x.shape[0] // 100`). A count that is not array // size is left: the
    coverage check then refuses the fix rather than guess."""
    windows = [(op.full_shape, block) for op in call.operands if op.role != "prefetch" and (block := op.block_shape)]
    fulls = sorted(
        {
            full[d]
            for full, block in windows
            for d in range(-len(block), 0)
            if block[d] == size and (None in dims or d in dims)
        }
    )
    walks = _walks(site)
    grid = site.grid  # also a grid spec's: the locator follows it
    if grid is None:
        return []
    edits: list[TextEdit] = []
    for axis, element in enumerate(_elements(_node(grid))):
        if axis in walks and None not in dims and not walks[axis] & dims:
            continue
        if isinstance(element, ast.Constant) and type(element.value) is int:
            full = next((f for f in fulls if f // size == element.value and f % new == 0), None)
            if full is not None:
                edits.append(TextEdit(site.path, _span_in(grid, element), str(full // new)))
            continue
        edits += [TextEdit(site.path, _span_in(grid, n), str(new)) for n in _int_nodes(element) if n.value == size]
    return edits


def resized(site: KernelSite, call: CapturedCall, written: list[Written], new: int) -> list[TextEdit]:
    """Edits that set the written numbers (all of one size) to `new`, and the grid that follows them."""
    size = written[0].value
    edits = [TextEdit(site.path, w.span, str(new)) for w in written]
    return _distinct(edits + _grid_follows(site, call, {w.dim for w in written}, size, new))


def literal_block_sizes(site: KernelSite, call: CapturedCall, source: str, levels: int = 3):
    """Block sizes written as numbers in the BlockSpecs themselves, e.g.
    `pl.BlockSpec((1024, 512), ...)` with `grid=(8, 16)`. Every occurrence of
    one size changes together (a matmul's 1024 is in x's, the output's and the
    scratch's shapes); the grid follows (`resized`). Yields (label, edits, ratio)."""
    by_size: dict[int, list[Written]] = {}
    for number in written_sizes(site):
        by_size.setdefault(number.value, []).append(number)
    for size, written in sorted(by_size.items(), reverse=True):
        if size < 16 or size & (size - 1):
            continue  # not a power-of-two block size: leave it to the user
        for level in range(1, levels + 1):
            new = size >> level
            yield f"Shrink blocks: {size} -> {new} in the BlockSpecs", resized(site, call, written, new), new / size
