"""A call expression found by where the worker saw it made: the BlockSpec
passed to a pltpu.emit_pipeline, or a VMEM(...) of a pl.run_scoped, written
in the kernel body where the locator's pallas_call sites do not reach.

The worker gives (line, column in code points) of the call; this gives the
call's span and its first argument's (a block shape). Parsed with ast once
per text; columns turned into code points (text.node_span)."""

from __future__ import annotations

import ast
import functools

from .model import Span
from .syntax import parse_quietly
from .text import node_span, split_lines


@functools.lru_cache(maxsize=16)
def _calls(text: str) -> dict[tuple[int, int], tuple[Span, Span | None]]:
    try:
        tree = parse_quietly(text)
    except (SyntaxError, ValueError):
        return {}
    lines = split_lines(text)
    found: dict[tuple[int, int], tuple[Span, Span | None]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            span = node_span(node, lines)
            first = node.args[0] if node.args else (node.keywords[0].value if node.keywords else None)
            found.setdefault(
                (span.start_line, span.start_col), (span, node_span(first, lines) if first is not None else None)
            )
    return found


def call_at(text: str, line: int, col: int | None) -> tuple[Span, Span | None] | None:
    """(the call's span, its first argument's span) of the call that starts at
    (line, col); with no column, the first call that starts on the line."""
    calls = _calls(text)
    if col is not None:
        return calls.get((line, col))
    return next((found for (at, _), found in sorted(calls.items()) if at == line), None)


@functools.lru_cache(maxsize=4)
def _lines(text: str) -> tuple[str, ...]:
    """A text's lines, split once for all its sites: VMEM020 asks for every
    pallas_call of a file on each keystroke (a str keeps its hash, so a repeat
    costs a lookup). Only the last few texts: each entry keeps a whole
    version of the file alive, and its lines, and a server is typed into
    for hours."""
    return tuple(split_lines(text))


def kernel_name(text: str, span: Span) -> str | None:
    """The kernel a `pallas_call(kernel, ...)` at `span` is given, by name:
    `matmul_kernel`, also through `functools.partial(matmul_kernel, bm=bm)`;
    None when it is not written as a name."""
    lines = _lines(text)
    if not 0 < span.start_line <= span.end_line <= len(lines):
        return None
    if span.start_line == span.end_line:
        written = lines[span.start_line - 1][span.start_col : span.end_col]
    else:
        written = "\n".join(
            [
                lines[span.start_line - 1][span.start_col :],
                *lines[span.start_line : span.end_line - 1],
                lines[span.end_line - 1][: span.end_col],
            ]
        )
    return _kernel_name_of(written)


@functools.lru_cache(maxsize=256)
def _kernel_name_of(written: str) -> str | None:
    """The kernel name of a call as written, cached by the call's own text: a
    keystroke elsewhere in the file asks again with the same call, and a key
    of the whole file's text would keep every version typed alive."""
    try:
        node = parse_quietly(f"({written})", mode="eval").body
    except (SyntaxError, ValueError):
        return None
    while isinstance(node, ast.Call) and node.args:
        node = node.args[0]
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return node.attr
    return None
