"""Fixes, and the line ends and undo of their edits (source.model.TextEdit,
applied by source.text.apply_edits). An edit replaces exactly the tokens it
changes, so formatting and comments stay byte for byte."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from ..source.model import Span, TextEdit
from ..source.text import apply_edits, line_and_column, offset


@dataclass(frozen=True)
class Fix:
    kind: str  # "shrink" | "grid" | "raise_limit" | "single_buffer"
    title: str
    edits: tuple[TextEdit, ...]
    verified: bool  # compiled on every target, and it fits
    estimated_total: dict  # target -> bytes the layout model expects after the fix
    compiles: int = 0  # compiles spent finding and verifying it
    estimated_cycles: dict = field(default_factory=dict)  # target -> the compiler's cycle estimate (faster-fixes)


BARE_NEWLINE = re.compile(r"(?<!\r)\n")


def with_line_ends(new_text: str, text: str) -> str:
    """`new_text` with the line ends of the `text` it goes into: a fix writes
    \n, and in a file of \r\n lines (written on Windows) the lines it added
    ended otherwise than the rest."""
    return BARE_NEWLINE.sub("\r\n", new_text) if "\r\n" in text else new_text


def in_line_endings(edits, text: str) -> list[TextEdit]:
    """The edits, each with the line ends of `text` (see with_line_ends)."""
    return [replace(e, new_text=with_line_ends(e.new_text, text)) for e in edits]


def position(text: str, index: int) -> tuple[int, int]:
    """(line, col) of a string index: the inverse of `offset`."""
    return line_and_column(text, index)


def inverse_edits(text: str, edits: list[TextEdit]) -> list[TextEdit]:
    """The edits that undo `edits` once applied to `text` (an editor's undo)."""
    after = apply_edits(text, edits)
    undo, shift = [], 0
    for edit in sorted(edits, key=lambda e: (e.span.start_line, e.span.start_col)):
        start = offset(text, edit.span.start_line, edit.span.start_col)
        end = offset(text, edit.span.end_line, edit.span.end_col)
        new_start = start + shift
        new_end = new_start + len(edit.new_text)
        shift += len(edit.new_text) - (end - start)
        undo.append(TextEdit(edit.path, Span(*position(after, new_start), *position(after, new_end)), text[start:end]))
    return undo
