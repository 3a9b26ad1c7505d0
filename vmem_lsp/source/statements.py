"""The module's top-level statements, with `ast`, even around syntax errors.

An editor buffer is often mid-edit, and one syntax error must not hide the
kernels elsewhere: on failure the text is cut into top-level chunks (at the
lines that start in column 0, decorators kept with their def) and the text
around each error is parsed again, each failure dropping one chunk. `ast` is C
and fast; libcst (pieces.py) only ever sees the few statements a site needs.
"""
from __future__ import annotations

import ast
import bisect
import re

from .syntax import parse_quietly

_CLAUSE = re.compile(r"(else|elif|except|finally)\b")
_DEFINITION = re.compile(r"(async\s+def|def|class)\b")


def top_level_statements(text: str, lines: list[str]) -> tuple[list[ast.stmt], str | None]:
    """The module's top-level statements; around syntax errors, those that still parse on their own."""
    try:
        return parse_quietly(text).body, None
    except (SyntaxError, ValueError) as exc:
        return _statements_around_errors(lines), _describe_syntax_error(exc, text)
    except (RecursionError, MemoryError):
        return [], "syntax error: the file is nested too deeply to parse"


def _describe_syntax_error(exc: Exception, text: str) -> str:
    message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    return f"syntax error at line {_error_line(exc, text)}: {message}"


def _error_line(exc: Exception, text: str) -> int:
    """The 1-based line of a parse error; ValueError (a null byte) carries none, so find the byte."""
    if isinstance(exc, SyntaxError) and exc.lineno:
        return exc.lineno
    null = text.find("\0")
    return text.count("\n", 0, null) + 1 if null >= 0 else 1


def _statements_around_errors(lines: list[str]) -> list[ast.stmt]:
    """Parse the line ranges around each failing top-level chunk; each failure drops one chunk."""
    starts = _chunk_starts(lines)
    statements: list[ast.stmt] = []
    ranges = [(0, len(lines))]
    while ranges:
        first, end = ranges.pop()
        text = "\n".join(lines[first:end])
        try:
            tree = parse_quietly(text)
        except (SyntaxError, ValueError) as exc:
            bad = min(max(first + _error_line(exc, text) - 1, first), end - 1)
            chunk_first, chunk_end = _chunk_around(starts, bad, first, end)
            ranges += [(a, b) for a, b in ((first, chunk_first), (chunk_end, end)) if a < b]
            continue
        except (RecursionError, MemoryError):
            continue
        ast.increment_lineno(tree, first)
        statements += tree.body
    return sorted(statements, key=lambda statement: statement.lineno)


def _chunk_starts(lines: list[str]) -> list[int]:
    """0-based lines that look like the start of a top-level statement (decorators stay with their def)."""
    starts = []
    awaiting_definition = False
    for number, line in enumerate(lines):
        if not line or line[0] in " \t#)]}" or _CLAUSE.match(line):
            continue
        if awaiting_definition and (line.startswith("@") or _DEFINITION.match(line)):
            awaiting_definition = line.startswith("@")
            continue
        starts.append(number)
        awaiting_definition = line.startswith("@")
    return starts


def _chunk_around(starts: list[int], line: int, first: int, end: int) -> tuple[int, int]:
    before = bisect.bisect_right(starts, line) - 1
    chunk_first = max(starts[before], first) if before >= 0 else first
    after = bisect.bisect_right(starts, line)
    chunk_end = min(starts[after], end) if after < len(starts) else end
    return chunk_first, chunk_end


def first_line(statement: ast.stmt) -> int:
    decorators = getattr(statement, "decorator_list", None)
    return min([statement.lineno] + [d.lineno for d in decorators or ()])
