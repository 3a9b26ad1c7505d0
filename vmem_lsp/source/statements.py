"""The module's top-level statements, with `ast`, even around syntax errors.

An editor buffer is often mid-edit, and one syntax error must not hide the
kernels elsewhere: on failure the text is cut into top-level chunks (at the
lines that start in column 0, decorators kept with their def) and the text
around each error is parsed again, each failure dropping one chunk. `ast` is C
and fast; libcst (pieces.py) only ever sees the few statements a site needs.

Typing changes a line or two, so the last clean parse of each path is kept, and
only the lines between the unchanged statements before and after the edit are
parsed again (`_reparse_edit`); see there why that gives the same statements.
"""

from __future__ import annotations

import ast
import bisect
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

from .syntax import parse_quietly

_CLAUSE = re.compile(r"(else|elif|except|finally)\b")
_DEFINITION = re.compile(r"(async\s+def|def|class)\b")


_PATHS_KEPT = 4  # the ast of a 2,600-line file holds 3.5 MB


@dataclass(frozen=True, eq=False)
class _Clean:
    """A text of a path that parsed without error, and its statements (shared: nobody mutates them)."""

    lines: list[str]
    statements: list[ast.stmt]


_last_clean: OrderedDict[str, _Clean] = OrderedDict()
_lock = threading.Lock()  # the CLI's engine and the server's fallback may locate from two threads


def clear_cache() -> None:
    with _lock:
        _last_clean.clear()


def top_level_statements(text: str, lines: list[str], path: str | None = None) -> tuple[list[ast.stmt], str | None]:
    """The module's top-level statements; around syntax errors, those that still parse on their own.
    With a path, the statements its last clean text shares with this one are reused."""
    with _lock:
        last = _last_clean.get(path) if path is not None else None
    statements = _reparse_edit(last, lines) if last is not None else None
    if statements is None:
        try:
            statements = parse_quietly(text).body
        except (SyntaxError, ValueError) as exc:
            return _statements_around_errors(lines), _describe_syntax_error(exc, text)
        except (RecursionError, MemoryError):
            return [], "syntax error: the file is nested too deeply to parse"
    if path is not None:
        with _lock:
            _last_clean[path] = _Clean(lines, statements)
            _last_clean.move_to_end(path)
            if len(_last_clean) > _PATHS_KEPT:
                _last_clean.popitem(last=False)
    return list(statements), None


def _reparse_edit(last: _Clean, lines: list[str]) -> list[ast.stmt] | None:
    """The statements of `lines`, parsing only what an edit of the last clean text touched; None when
    this cannot be sure to give what a whole parse gives (then the caller parses the whole text).

    Old statements entirely within the unchanged leading lines are kept, up to one after which the
    tokenizer is at a line start with nothing open (the next statement starts on a later line and no
    backslash continues the line); so are the old statements entirely within the unchanged trailing
    lines, from one that starts in column 0 on such a line, when the line count did not change (else
    their positions would be wrong: the rest of the file is parsed again instead). The lines between
    are parsed alone, padded with empty lines so that positions come out as in the file: if they
    parse, they end with nothing open, and the trailing statements, starting in column 0, parse as
    before. If they do not parse, the caller's whole parse fails, or takes an indented line or an
    `else:` into the statement before: either way its own parse decides."""
    old, old_statements = last.lines, last.statements
    if not old_statements:
        return None
    shortest = min(len(old), len(lines))
    same_before = _same_lines(old, lines, False, shortest)
    if same_before == len(old) == len(lines):
        return old_statements
    same_after = _same_lines(old, lines, True, shortest - same_before)
    kept_before = 0
    while kept_before < len(old_statements) and last_line(old_statements[kept_before]) <= same_before:
        kept_before += 1
    while kept_before and not _ends_cleanly(old, old_statements, kept_before - 1):
        kept_before -= 1
    start = last_line(old_statements[kept_before - 1]) if kept_before else 0  # 0-based first line to parse
    shift = len(lines) - len(old)
    kept_after = len(old_statements)
    if shift == 0:
        unchanged_from = len(old) - same_after  # 0-based, in both
        while kept_after > kept_before and first_line(old_statements[kept_after - 1]) - 1 >= unchanged_from:
            kept_after -= 1
        while kept_after < len(old_statements) and not _starts_cleanly(old, old_statements, kept_after):
            kept_after += 1
    end = first_line(old_statements[kept_after]) - 1 if kept_after < len(old_statements) else len(lines)
    try:
        middle = parse_quietly("\n" * start + "\n".join(lines[start:end])).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return old_statements[:kept_before] + middle + old_statements[kept_after:]


def _same_lines(old: list[str], new: list[str], from_end: bool, most: int) -> int:
    """How many lines are equal in both, from the first on (or from the last back), at most `most`:
    halving the lines in doubt, each half compared as one slice, in C (a keystroke in a 2,600-line
    file compared them one at a time in Python)."""
    same, unsure = 0, most  # equal: `same`; the first difference, if any, is within the next `unsure`
    while unsure:
        half = (unsure + 1) // 2
        if from_end:
            equal = old[len(old) - same - half : len(old) - same] == new[len(new) - same - half : len(new) - same]
        else:
            equal = old[same : same + half] == new[same : same + half]
        same, unsure = (same + half, unsure - half) if equal else (same, half - 1)
    return same


def _ends_cleanly(lines: list[str], statements: list[ast.stmt], index: int) -> bool:
    """Whether, after statement `index`, the next line starts afresh: no `;` statement after it on its
    last line, and no backslash joining that line to the next."""
    end = last_line(statements[index])
    following = statements[index + 1] if index + 1 < len(statements) else None
    return (following is None or first_line(following) > end) and not lines[end - 1].endswith("\\")


def _starts_cleanly(lines: list[str], statements: list[ast.stmt], index: int) -> bool:
    """Whether statement `index` starts in column 0 of a line of its own, with nothing before it open."""
    first = first_line(statements[index])
    return (
        lines[first - 1][:1] not in ("", " ", "\t", "\f", "#")
        and (index == 0 or _ends_cleanly(lines, statements, index - 1))
        and (first < 2 or not lines[first - 2].endswith("\\"))
    )


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


def last_line(node: ast.stmt | ast.expr) -> int:
    """The line a node ends on (ast.parse sets it; the type allows a node built by hand without)."""
    return node.end_lineno if node.end_lineno is not None else node.lineno
