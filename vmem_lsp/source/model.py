"""What the locator finds in a source file, and the edits that change one:
plain data, no libcst objects.

Lines are 1-based and columns 0-based (as libcst's CodeRange and Python's ast);
the LSP and SARIF edges convert.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Span:
    start_line: int
    start_col: int
    end_line: int
    end_col: int

    def contains_line(self, line: int) -> bool:
        return self.start_line <= line <= self.end_line


@dataclass(frozen=True)
class TextEdit:
    """`span` of the file at `path` replaced by `new_text`: the only way a fix,
    a template or a notebook cell's change touches a text (source.text.apply_edits)."""

    path: str
    span: Span  # lines 1-based, columns 0-based, end exclusive
    new_text: str


@dataclass(frozen=True, slots=True)
class Expr:
    """A source expression: where it is and its text as written."""

    span: Span
    text: str


@dataclass(frozen=True, slots=True)
class BlockSpecSite:
    """One `BlockSpec(...)` construction attached to a pallas_call site."""

    span: Span  # the whole BlockSpec(...) call
    role: str  # "in" or "out"
    index: int | None  # position in in_specs/out_specs when statically known
    block_shape: Expr | None  # positional arg 0 or block_shape=
    index_map: Expr | None
    memory_space: Expr | None
    pipeline_mode: Expr | None  # e.g. pl.Buffered(1)
    buffer_count: int | None  # n of a literal pl.Buffered(n)


@dataclass(frozen=True, slots=True)
class ScratchSite:
    """One entry of scratch_shapes: pltpu.VMEM(shape, dtype), SMEM, a semaphore..."""

    span: Span
    index: int | None
    kind: str  # "VMEM", "SMEM", "SemaphoreType.DMA", ... as written (last name)
    shape: Expr | None
    dtype: Expr | None


@dataclass(frozen=True, slots=True)
class KernelSite:
    """One pallas_call in a module, with everything that decides its VMEM use."""

    path: str
    span: Span  # the pallas_call(...) call (or functools.partial(...))
    name_span: Span  # the `pallas_call` token: where the total is reported
    function: str | None  # qualified name of the enclosing function, if any
    grid: Expr | None
    grid_spec: Expr | None  # grid_spec=... when given
    num_scalar_prefetch: Expr | None
    in_specs: tuple[BlockSpecSite, ...] = ()
    out_specs: tuple[BlockSpecSite, ...] = ()
    scratch: tuple[ScratchSite, ...] = ()
    compiler_params: Expr | None = None
    vmem_limit_bytes: Expr | None = None
    notes: tuple[str, ...] = field(default=())  # what the locator could not follow, said plainly
    # The keyword arguments written in the call at `span`, in source order: name -> span of
    # `name=value` (where the fixes insert a keyword, without parsing the call again).
    keywords: tuple[tuple[str, Span], ...] = ()
    # The module-level function an example calls to reach this pallas_call, as --add-examples writes
    # its template (templates.reaching_function); None where the module does not parse.
    example_calls: str | None = None
