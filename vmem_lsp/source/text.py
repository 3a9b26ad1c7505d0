"""Positions in a source text, in the project's one unit: lines 1-based and
ended by \\n, \\r\\n or \\r, as Python, libcst and the LSP count them (not
str.splitlines, which also breaks at \\f, \\v, \\x1c-\\x1e, \\x85, U+2028
and U+2029, all of which a comment or a string may hold); columns 0-based,
in code points. Python's ast counts columns in UTF-8 bytes: they are turned
into code points where they are read (`node_span`); the LSP edge turns code
points into the client's encoding (server/convert.py)."""

from __future__ import annotations

import re

from .model import Span, TextEdit

LINE_BREAK = re.compile(r"\r\n|\r|\n")
LINE_WITH_END = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str, keepends: bool = False) -> list[str]:
    """The lines of a text, without their ends (a final line end leaves an
    empty last line); or with them, as str.splitlines(True) gives them."""
    if keepends:
        return LINE_WITH_END.findall(text)
    return text.split("\n") if "\r" not in text else LINE_BREAK.split(text)


def line_start(text: str, line: int) -> int:
    """String index where 1-based `line` starts; the text's end past its last line."""
    if "\r" not in text:
        index = 0
        for _ in range(line - 1):
            found = text.find("\n", index)
            if found < 0:
                return len(text)
            index = found + 1
        return index
    if line <= 1:
        return 0
    for number, match in enumerate(LINE_BREAK.finditer(text), start=2):
        if number == line:
            return match.end()
    return len(text)


def line_and_column(text: str, index: int) -> tuple[int, int]:
    """(line, column) of a string index: the inverse of `line_start` plus a column."""
    if "\r" not in text:
        return text.count("\n", 0, index) + 1, index - (text.rfind("\n", 0, index) + 1)
    line, start = 1, 0
    for match in LINE_BREAK.finditer(text, 0, index):
        line, start = line + 1, match.end()
    return line, index - start


def offset(text: str, line: int, col: int) -> int:
    """The string index of (line, col) in text: lines end at \\n, \\r\\n or \\r, columns count code points."""
    return line_start(text, line) + col


def apply_edits(text: str, edits: list[TextEdit]) -> str:
    """`text` with non-overlapping edits applied (from the end, so spans stay valid)."""
    ordered = sorted(edits, key=lambda e: (e.span.start_line, e.span.start_col), reverse=True)
    for edit in ordered:
        start = offset(text, edit.span.start_line, edit.span.start_col)
        end = offset(text, edit.span.end_line, edit.span.end_col)
        text = text[:start] + edit.new_text + text[end:]
    return text


def char_column(line: str, byte_column: int) -> int:
    """A column of `line` counted in UTF-8 bytes (ast's), in code points."""
    return byte_column if line.isascii() else len(line.encode()[:byte_column].decode(errors="ignore"))


def node_span(node, lines: list[str]) -> Span:
    """An ast node's span in code points; `lines` are those of the text it was parsed from."""
    return Span(
        node.lineno,
        char_column(lines[node.lineno - 1], node.col_offset),
        node.end_lineno,
        char_column(lines[node.end_lineno - 1], node.end_col_offset),
    )
