"""Fixes as the tests make and check them: the fixes a real worker plans for
the overflowing examples of a folder, every rewrite the fixes can make at one
kernel site with no compiler, and what an edit may and may not change."""

from __future__ import annotations

import ast
import functools

import pytest

from support.tiers import COMPILER, starts
from vmem_lsp.fixes import rewrites
from vmem_lsp.fixes.edits import inverse_edits
from vmem_lsp.results import CapturedCall, Operand, Origin
from vmem_lsp.source.model import BlockSpecSite, KernelSite
from vmem_lsp.source.text import apply_edits, line_start, offset
from vmem_lsp.tpu.chips import MiB


@starts(COMPILER)
def fixes_for(path, targets, cache, sources=None, worker=None) -> list:
    """[(example, fixes)] for the overflowing examples under `path`, with a real
    worker: `worker` when given (a module's tests share one: starting one
    imports jax), else one of its own."""
    from vmem_lsp.compile.cache import ResultCache
    from vmem_lsp.compile.client import WorkerClient
    from vmem_lsp.config import Settings
    from vmem_lsp.engine import SourceFiles, cached_runner, check
    from vmem_lsp.fixes.plan import plan

    settings = Settings(targets=targets, cache_dir=str(cache))
    sources = sources or SourceFiles()
    own = worker is None
    worker = worker or WorkerClient()
    try:
        outcome = check([str(path)], settings, worker=worker)
        run = cached_runner(ResultCache(settings.cache_folder()), worker, settings.limits())
        return plan(outcome.results, settings.targets, sources.text, run, sources.sites_of)
    finally:
        if own:
            worker.stop()


def changed_outside(before: str, after: str, edits) -> list:
    """The pieces of `before` outside every edit that `after` lost: [] when the
    two differ only in the edited tokens. The pieces must appear in `after` in
    order, the first at its start and the last at its end, so a character
    gained, lost or moved outside the edits shows (two edits of one span, say).
    No diff is computed: a character diff of a 2,000-line jax module takes
    seconds, and it may align an insertion beside its edit rather than at it."""
    regions = sorted(
        (offset(before, e.span.start_line, e.span.start_col), offset(before, e.span.end_line, e.span.end_col))
        for e in edits
    )
    pieces, at = [], 0
    for start, end in regions:
        pieces.append(before[at : max(start, at)])
        at = max(at, end)
    pieces.append(before[at:])
    lost = []
    if not after.startswith(pieces[0]):
        lost.append(pieces[0][-60:])
    found = len(pieces[0])
    for piece in pieces[1:-1]:
        index = after.find(piece, found)
        if index < 0:
            lost.append(piece[:60])
        else:
            found = index + len(piece)
    if len(pieces) > 1 and not (after.endswith(pieces[-1]) and len(after) - len(pieces[-1]) >= found):
        lost.append(pieces[-1][:60])
    if len(pieces) == 1 and after != before:
        lost.append(before[:60])
    return lost


def overlapping(edits) -> list:
    """Pairs of edits whose spans overlap or coincide: an editor applies a
    workspace edit only when its edits are disjoint."""
    spans = sorted(((e.span.start_line, e.span.start_col), (e.span.end_line, e.span.end_col), e) for e in edits)
    return [(a[2], b[2]) for a, b in zip(spans, spans[1:]) if b[0] < a[1] or a[:2] == b[:2]]


def assert_intact(before: str, edits: list, what: str) -> None:
    """The edits leave Python, touch nothing outside their spans, are
    disjoint, leave no line ending in a space, and undo restores every byte."""
    after = apply_edits(before, edits)
    try:
        parses(before, after, edits)
    except SyntaxError as error:
        pytest.fail(f"{what}: {error}")
    assert changed_outside(before, after, edits) == [], what
    assert overlapping(edits) == [], what
    assert trailing_spaces(after) <= trailing_spaces(before), what
    assert apply_edits(after, inverse_edits(before, edits)) == before, what


def parses(before: str, after: str, edits) -> None:
    """Raise SyntaxError unless `after`, `before` with `edits` applied, parses. A jax kernel
    file is 2,600 lines and is rewritten at every site, one rewrite at a time: parsing it whole
    for each was most of test_edits_on_jax_ops' time. So first only the top-level statements
    that hold the edits, as they read after them: the text around them is `before`'s (which
    changed_outside checks), which begins and ends those statements on a line of its own at
    the top level; so when they parse alone, as whole statements with every bracket and string
    closed, the file parses. When they do not (or an edit is outside every statement), the
    whole file decides, and its error is the one raised."""
    region = _edited_statements(before, edits)
    if region is not None:
        start, end = region
        try:
            ast.parse(after[start : end + len(after) - len(before)])
            return
        except SyntaxError:
            pass
    ast.parse(after)


def _edited_statements(before: str, edits) -> tuple[int, int] | None:
    """The string range of `before`'s top-level statements, from the first line of the one
    the first edit starts in to the end of the line of the one the last edit ends in; None
    when an edit starts or ends outside them."""
    statements = _statement_lines(before)
    if not edits or statements is None:
        return None
    first = min(e.span.start_line for e in edits)
    last = max(e.span.end_line for e in edits)
    holding = [(a, b) for a, b in statements if a <= first <= b or a <= last <= b]
    if not any(a <= first <= b for a, b in holding) or not any(a <= last <= b for a, b in holding):
        return None
    return line_start(before, min(a for a, _ in holding)), line_start(before, max(b for _, b in holding) + 1)


@functools.lru_cache(maxsize=4)
def _statement_lines(source: str) -> tuple[tuple[int, int], ...] | None:
    """(first, last) line of each top-level statement of `source`, its decorators included;
    None when it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    return tuple(
        (min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))]), node.end_lineno or node.lineno)
        for node in tree.body
    )


def trailing_spaces(text: str) -> int:
    return sum(1 for line in text.splitlines() if line != line.rstrip())


def traced_as(site: KernelSite, spec: BlockSpecSite) -> CapturedCall:
    """A call as the worker would capture it, with one operand made by `spec`:
    its origin is how the fixes find that spec among alternatives (paged
    attention's q_block_spec has six)."""
    origin = Origin(site.path, spec.span.start_line, spec.span.start_col)
    operand = Operand(spec.role, spec.index or 0, 0, "f32", (4096, 4096), (512, 512), None, None, False, origin)
    return CapturedCall("kernel", None, None, (8, 8), 0, (operand,), (), None, False, None, 0.0)


def whole_arrays(site: KernelSite) -> CapturedCall:
    """A single-step call whose every window is its whole array: what
    introduce_grid asks of the compiled call before it looks at the source."""
    operands = tuple(
        Operand(s.role, s.index or 0, i, "f32", (4096, 512), (4096, 512), None, None, False, None)
        for i, s in enumerate((*site.in_specs, *site.out_specs))
    )
    return CapturedCall("kernel", None, None, (), 0, operands, (), None, False, None, 0.0)


def within(edits: list, spec: BlockSpecSite, source: str) -> bool:
    """Every edit starts inside the spec's BlockSpec(...)."""
    start, end = (
        offset(source, spec.span.start_line, spec.span.start_col),
        offset(source, spec.span.end_line, spec.span.end_col),
    )
    return all(start <= offset(source, e.span.start_line, e.span.start_col) <= end for e in edits)


def site_rewrites(site: KernelSite, source: str) -> list[tuple[str, list | None]]:
    """(label, edits or None) of every rewrite the fixes can make at one site."""
    made = [("set_vmem_limit", rewrites.set_vmem_limit(site, source, 100 * MiB))]
    for spec in (*site.in_specs, *site.out_specs):
        edits = rewrites.single_buffer(site, traced_as(site, spec), spec.role, spec.index or 0, source)
        assert edits is None or within(edits, spec, source), (spec, edits)  # the spec it was asked for
        made.append((f"single_buffer {spec.role}[{spec.index}] line {spec.span.start_line}", edits))
    for label, edits, _ in rewrites.literal_block_sizes(site, whole_arrays(site), source):
        made.append((label, edits))
    for rows, edits in rewrites.introduce_grid(site, whole_arrays(site), source):
        made.append((f"introduce_grid {rows}", edits))
    return made
