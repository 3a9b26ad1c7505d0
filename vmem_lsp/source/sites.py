"""Pallas sites: a pallas_call's arguments, by parameter name, built into KernelSite,
BlockSpecSite and ScratchSite (plain data, model.py).

The arguments come from the call, and from the partial it calls when there is
one; in_specs, out_specs and scratch_shapes are followed through names
(nameflow.py) to their items, and what cannot be followed becomes a note said
plainly on the site, never a guess.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import libcst as cst

from .model import BlockSpecSite, Expr, KernelSite, ScratchSite
from .nameflow import Entry, File, Leaf, Scope, as_sequence, evaluate, follow, unique
from .pieces import Piece, dotted, integer, is_none, name_token
from .prepass import Names

_Site = TypeVar("_Site", BlockSpecSite, ScratchSite)

_KERNEL_PARAMETERS = ("kernel", "out_shape")
_BLOCK_SPEC_PARAMETERS = ("block_shape", "index_map", "pipeline_mode")
_SCRATCH_PARAMETERS = ("shape", "dtype")
_GRID_SPEC_PARAMETERS = {
    "GridSpec": ("grid", "in_specs", "out_specs", "scratch_shapes"),
    "PrefetchScalarGridSpec": ("num_scalar_prefetch", "grid", "in_specs", "out_specs", "scratch_shapes"),
}
_NOT_OWN = (
    cst.BaseSuite,
    cst.BaseCompoundStatement,
    cst.Else,
    cst.ExceptHandler,
    cst.ExceptStarHandler,
    cst.Finally,
    cst.MatchCase,
)


@dataclass(frozen=True)
class SiteCall:
    """One kernel site before building: the span node, the name token, and where its arguments come from."""

    span_node: cst.Call
    name_node: cst.CSTNode
    sources: tuple[tuple[Leaf, int], ...]  # (call, positional arguments to skip), earliest first
    notes: tuple[str, ...] = ()


def _own_calls(statement: cst.CSTNode, piece: Piece) -> tuple[cst.Call, ...]:
    """The calls of a statement outside its nested blocks (those are statements of their own), in the
    order a visit meets them: outer before inner, then left to right. Read off the positions the piece
    has of every node, not by a visit: libcst rebuilds every node it visits, and a 40-line pallas_call
    statement costs as much to visit as to parse. A node's span holds its children's, but for the
    decorators of a def or a class, which come before it (and before the block it starts)."""
    positions = piece.parsed.positions
    first, last = _span_of(statement, positions)
    calls, blocks = [], []
    for node in positions:
        if node is statement or not isinstance(node, (cst.Call, *_NOT_OWN)):
            continue
        start, end = _span_of(node, positions)
        if not first <= start <= end <= last:
            continue
        if isinstance(node, cst.Call):
            calls.append((start, end, node))
        elif (start, end) != (first, last):  # an equal span: a block around the statement
            blocks.append((start, end))
    calls.sort(key=lambda call: (call[0], -call[1][0], -call[1][1]))
    return tuple(node for start, end, node in calls if not any(a <= start and end <= b for a, b in blocks))


def _span_of(node: cst.CSTNode, positions) -> tuple[tuple[int, int], tuple[int, int]]:
    """A node's span with everything it holds: a def's decorators, a block's first def's."""
    where = positions[node]
    start = (where.start.line, where.start.column)
    first = node.body[0] if isinstance(node, cst.IndentedBlock) and node.body else node
    decorators = getattr(first, "decorators", ())
    if decorators:
        start = min(start, (positions[decorators[0]].start.line, positions[decorators[0]].start.column))
    return start, (where.end.line, where.end.column)


def site_calls(file: File, statement: cst.CSTNode, piece: Piece, scope: Scope) -> Iterator[SiteCall]:
    """pallas_call(...); partial(pallas_call, ...) unless it is called later (then that call is the site)."""

    calls = piece.remember("own calls", statement, lambda: _own_calls(statement, piece))
    names = file.names
    partials = {id(c) for c in calls if _is_partial_of_pallas(c, names)}
    called = {id(c.func) for c in calls if id(c.func) in partials}
    for call in calls:
        leaf = Leaf(call, piece, scope)
        name = _last_name(call.func, names)
        partial = follow(file, leaf.at(call.func)) if name in names.partials else None
        if id(call.func) in partials and isinstance(call.func, cst.Call):
            yield SiteCall(call, name_token(call.func.args[0].value), ((leaf.at(call.func), 1), (leaf, 0)))
        elif id(call) in partials:
            if id(call) not in called and not _bound_to_called_alias(statement, call, file):
                yield SiteCall(call, name_token(call.args[0].value), ((leaf, 1),))
        elif partial is not None and isinstance(partial.node, cst.Call) and _is_partial_of_pallas(partial.node, names):
            yield SiteCall(call, name_token(call.func), ((partial, 1), (leaf, 0)))
        elif name in names.pallas:
            yield SiteCall(call, name_token(call.func), ((leaf, 0),))
        elif name in names.partials:
            note = f"the arguments bound by partial `{_short(piece.expr(call.func).text)}` were not followed"
            yield SiteCall(call, name_token(call.func), ((leaf, 0),), (note,))


def _is_partial_of_pallas(call: cst.Call, names: Names) -> bool:
    return (
        _last_name(call.func, names) == "partial"
        and bool(call.args)
        and not call.args[0].keyword
        and _last_name(call.args[0].value, names) in names.pallas
    )


def _bound_to_called_alias(statement: cst.CSTNode, call: cst.Call, file: File) -> bool:
    if not isinstance(statement, (cst.Assign, cst.AnnAssign)) or statement.value is not call:
        return False
    targets = [t.target for t in statement.targets] if isinstance(statement, cst.Assign) else [statement.target]
    return any((dotted(t) or ("",))[-1] in file.plan.called_partials for t in targets)


def kernel_site(file: File, call: SiteCall, piece: Piece, function: str | None) -> KernelSite:
    args, notes = _arguments(call.sources, _KERNEL_PARAMETERS)
    notes = list(call.notes) + notes
    grid_spec = follow(file, args.get("grid_spec"))
    spec_args: dict[str, Leaf] = {}
    if grid_spec is not None:
        parameters = _grid_spec_parameters(grid_spec.node, file.names)
        if parameters is None:
            notes.append(
                f"grid_spec `{_short(grid_spec.piece.expr(grid_spec.node).text)}` is not a GridSpec "
                "the locator can follow"
            )
        else:
            spec_args, more = _arguments(((grid_spec, 0),), parameters)
            notes += more
    given = {**args, **spec_args}
    in_specs, in_notes = _block_specs(file, given.get("in_specs"), "in")
    out_specs, out_notes = _block_specs(file, given.get("out_specs"), "out")
    scratch, scratch_notes = _scratch(file, given.get("scratch_shapes"))
    compiler_params = follow(file, args.get("compiler_params"))
    vmem_limit = compiler_params and _vmem_limit(file, compiler_params, depth=3)
    return KernelSite(
        path=file.path,
        span=piece.span(call.span_node),
        name_span=piece.span(call.name_node),
        function=function,
        grid=_defined(file, given.get("grid")),
        grid_spec=_written(grid_spec),
        num_scalar_prefetch=_defined(file, spec_args.get("num_scalar_prefetch")),
        in_specs=in_specs,
        out_specs=out_specs,
        scratch=scratch,
        compiler_params=_written(compiler_params),
        vmem_limit_bytes=_defined(file, vmem_limit),
        notes=tuple(unique(notes + in_notes + out_notes + scratch_notes)),
        keywords=tuple((arg.keyword.value, piece.span(arg)) for arg in call.span_node.args if arg.keyword is not None),
    )


def _grid_spec_parameters(node: cst.BaseExpression, names: Names) -> tuple[str, ...] | None:
    if not isinstance(node, cst.Call):
        return None
    name = _last_name(node.func, names) or ""
    if name in _GRID_SPEC_PARAMETERS:
        return _GRID_SPEC_PARAMETERS[name]
    return () if name.endswith("GridSpec") else None


def _arguments(sources: Sequence[tuple[Leaf, int]], parameters: Sequence[str]) -> tuple[dict[str, Leaf], list[str]]:
    """Arguments by parameter name; positional ones continue across a partial and the call of its result."""
    found: dict[str, Leaf] = {}
    notes: list[str] = []
    position = 0
    for leaf, skip in sources:
        positional = 0
        for arg in cst.ensure_type(leaf.node, cst.Call).args:  # a call, or a partial's
            if arg.star:
                notes.append(f"`{arg.star}{_short(leaf.piece.expr(arg.value).text)}` is not followed")
            elif arg.keyword is not None:
                found[arg.keyword.value] = leaf.at(arg.value)
            else:
                positional += 1
                if positional > skip:
                    if position < len(parameters):
                        found[parameters[position]] = leaf.at(arg.value)
                    position += 1
    return found, notes


def _items(
    file: File, leaf: Leaf | None, label: str, what: str, build: Callable[[Entry], _Site | None]
) -> tuple[tuple[_Site, ...], list[str]]:
    """The items of in_specs, out_specs or scratch_shapes, each built into a site, or a note where `build` cannot."""
    if leaf is None:
        return (), []
    value = as_sequence(evaluate(file, leaf))
    notes = [f"{label}: could not follow {unknown}" for unknown in value.unknown]
    sites = []
    for entry in value.items:
        node = entry.leaf.node
        if is_none(node):
            continue
        site = build(entry)
        if site is None:
            notes.append(
                f"{label}{_at(entry.index)}: `{_short(entry.leaf.piece.expr(node).text)}` "
                f"is not a {what} the locator can follow"
            )
        else:
            sites.append(site)
    return tuple(sorted(sites, key=_site_order)), notes


def _block_specs(file: File, leaf: Leaf | None, role: str) -> tuple[tuple[BlockSpecSite, ...], list[str]]:
    return _items(file, leaf, f"{role}_specs", "BlockSpec", lambda entry: _block_spec_site(file, entry, role))


def _block_spec_site(file: File, entry: Entry, role: str) -> BlockSpecSite | None:
    leaf = entry.leaf
    if not isinstance(leaf.node, cst.Call) or _last_name(leaf.node.func, file.names) != "BlockSpec":
        return None
    args, _ = _arguments(((leaf, 0),), _BLOCK_SPEC_PARAMETERS)
    pipeline_mode = args.get("pipeline_mode")
    return BlockSpecSite(
        span=leaf.piece.span(leaf.node),
        role=role,
        index=entry.index,
        block_shape=_written(args.get("block_shape")),
        index_map=_written(args.get("index_map")),
        memory_space=_written(args.get("memory_space")),
        pipeline_mode=_written(pipeline_mode),
        buffer_count=_buffer_count(follow(file, pipeline_mode), file.names),
    )


def _buffer_count(leaf: Leaf | None, names: Names) -> int | None:
    if leaf is None or not isinstance(leaf.node, cst.Call) or _last_name(leaf.node.func, names) != "Buffered":
        return None
    count = _arguments(((leaf, 0),), ("buffer_count",))[0].get("buffer_count")
    return integer(count.node) if count is not None else None


def _scratch(file: File, leaf: Leaf | None) -> tuple[tuple[ScratchSite, ...], list[str]]:
    return _items(file, leaf, "scratch_shapes", "scratch shape", lambda entry: _scratch_site(file, entry))


def _scratch_site(file: File, entry: Entry) -> ScratchSite | None:
    node = entry.leaf.node
    kind = _kind(node.func if isinstance(node, cst.Call) else node, file.names)
    if kind is None:
        return None
    args = _arguments(((entry.leaf, 0),), _SCRATCH_PARAMETERS)[0] if isinstance(node, cst.Call) else {}
    return ScratchSite(
        span=entry.leaf.piece.span(node),
        index=entry.index,
        kind=kind,
        shape=_written(args.get("shape")),
        dtype=_written(args.get("dtype")),
    )


def _kind(node: cst.BaseExpression, names: Names) -> str | None:
    """`pltpu.VMEM` -> "VMEM", `pltpu.SemaphoreType.DMA` -> "SemaphoreType.DMA": from the first class-like name."""
    parts = dotted(node)
    if len(parts) == 1:
        parts = (names.imported.get(parts[0], parts[0]),)
    for i, part in enumerate(parts):
        if part[:1].isupper():
            return ".".join(parts[i:])
    return None


def _vmem_limit(file: File, leaf: Leaf, depth: int) -> Leaf | None:
    """vmem_limit_bytes of CompilerParams(...), dict(mosaic=dict(...)) or {"mosaic": {...}}."""
    node = leaf.node
    if isinstance(node, cst.Call):
        found = _arguments(((leaf, 0),), ())[0]
        inner = list(found.values())
    elif isinstance(node, cst.Dict):
        pairs = [e for e in node.elements if isinstance(e, cst.DictElement)]
        found = {key: leaf.at(e.value) for e in pairs if (key := _string(e.key)) is not None}
        inner = [leaf.at(e.value) for e in pairs]
    else:
        return None
    if "vmem_limit_bytes" in found:
        return found["vmem_limit_bytes"]
    for value in inner if depth > 0 else ():
        followed = follow(file, value)
        limit = followed and _vmem_limit(file, followed, depth - 1)
        if limit is not None:
            return limit
    return None


def _string(node: cst.BaseExpression) -> str | None:
    value = node.evaluated_value if isinstance(node, cst.SimpleString) else None
    return value if isinstance(value, str) else None


def _written(leaf: Leaf | None) -> Expr | None:
    return leaf.piece.expr(leaf.node) if leaf is not None else None


def _defined(file: File, leaf: Leaf | None) -> Expr | None:
    """The expression where the value is written: through a name to its single definition."""
    return _written(follow(file, leaf))


def _site_order(site: BlockSpecSite | ScratchSite) -> tuple:
    return (site.index is None, site.index or 0, site.span.start_line, site.span.start_col)


def _at(index: int | None) -> str:
    return f"[{index}]" if index is not None else ""


def _short(text: str) -> str:
    line = text.strip().split("\n")[0]
    return line if len(line) <= 60 and "\n" not in text.strip() else line[:57] + "..."


def _last_name(node: cst.CSTNode, names: Names) -> str | None:
    """The name a callee is known by: `pl.BlockSpec` -> BlockSpec, `BS` imported as BlockSpec -> BlockSpec."""
    if isinstance(node, cst.Name):
        return names.imported.get(node.value, node.value)
    return node.attr.value if isinstance(node, cst.Attribute) else None
