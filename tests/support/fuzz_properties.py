"""What must hold of the code that reads untrusted text, whatever the text: one
property per fuzz target, shared by the hypothesis tests (tests/test_fuzz.py)
and the atheris targets (fuzz/run.py), so that both fail on the same faults.

Every property fails on an internal error: an exception, or the locator's
`internal_error` (which it returns rather than raises). And each checks the
answer against something computed independently of the code under test: the
locator's site count against an `ast` count, the didChange splice against a
slow spelling-out of the LSP's rules. A fault that only drops or moves
results, without raising, is caught that way too.
"""

from __future__ import annotations

import ast
import re
import warnings

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from vmem_lsp.server.documents import apply_change
from vmem_lsp.source.directives import check_call, find_examples
from vmem_lsp.source.locate import LocateResult, locate
from vmem_lsp.tpu.parse import parse_report

FORMS = {"physical", "scoped", "single_allocation", "block_shape", "unknown"}
CODEC = PositionCodec()  # UTF-16, the LSP's default


def check_report(text: str) -> None:
    report = parse_report(text)
    assert report.text == text, "the user must always get the whole text"
    assert report.form in FORMS, report.form
    assert all(a.size >= 0 for a in report.allocations), report.allocations


def check_directive(text: str) -> None:
    """`text` on one `# vmem:` line: an example or a reason, never neither, never both."""
    text = " ".join(text.splitlines())
    problem = check_call(text)
    assert problem is None or isinstance(problem, str)
    examples, errors = find_examples(f"# vmem: {text}\n", "fuzzed.py")
    assert len(examples) + len(errors) == 1, (examples, errors)


def check_locate(text: str, path: str = "fuzzed.py") -> LocateResult:
    """No internal error; where the text parses, as many sites as the ast count."""
    result = locate(text, path)
    assert result.internal_error is None, result.internal_error
    assert isinstance(result.sites, tuple)
    if result.error is None and "pallas_call" in text:
        tree = _parse(text)
        if tree is not None:
            assert len(result.sites) == ast_site_count(tree), (len(result.sites), ast_site_count(tree))
    return result


def check_splice(text: str, change: types.TextDocumentContentChangePartial) -> None:
    after = apply_change(text, change, CODEC)
    assert after == reference_splice(text, change), (after, reference_splice(text, change))


# --- the independent answers ---------------------------------------------------------------


def _parse(text: str) -> ast.Module | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None


def name_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def ast_site_count(tree: ast.Module) -> int:
    """Calls of pallas_call (any alias), calls of a partial of it, and partials whose result is never called.

    That is what one kernel site means to the locator: `partial(pl.pallas_call, ...)` used as a
    decorator or returned is the site; when its result is called (directly, or through the name it
    is bound to), that call is the site and the partial is not counted again.
    """
    imported = {a.asname or a.name: a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    pallas = {"pallas_call"} | {local for local, name in imported.items() if name == "pallas_call"}
    pallas |= {
        name_of(t)
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and name_of(n.value) in pallas
        for t in n.targets
    }
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]

    def is_partial(call: ast.AST) -> bool:
        return (
            isinstance(call, ast.Call)
            and imported.get(name_of(call.func), name_of(call.func)) == "partial"
            and bool(call.args)
            and name_of(call.args[0]) in pallas
        )

    partials = [c for c in calls if is_partial(c)]
    aliases = {
        name_of(t): n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and is_partial(n.value)
        for t in n.targets
    }
    alias_calls = [c for c in calls if name_of(c.func) in aliases]
    called_aliases = {name_of(c.func) for c in alias_calls}
    called_partials = {id(c.func) for c in calls if is_partial(c.func)}
    called_partials |= {id(value) for name, value in aliases.items() if name in called_aliases}
    named_calls = [c for c in calls if name_of(c.func) in pallas and name_of(c.func) not in aliases]
    calls_of_partials = [c for c in calls if is_partial(c.func)]
    lone_partials = [p for p in partials if id(p) not in called_partials]
    return len(named_calls) + len(alias_calls) + len(calls_of_partials) + len(lone_partials)


def reference_splice(text: str, change: types.TextDocumentContentChangePartial) -> str:
    """The LSP's rules spelled out, slowly: lines end at \\n, \\r\\n or \\r only; a character
    outside the BMP is two UTF-16 units, and a position inside it means after it; a column past
    a line's end is that end, a line past the last is the text's end; an end before the start
    is the start."""
    pieces = re.split(r"(\r\n|\r|\n)", text)
    lines = [(pieces[i], pieces[i + 1] if i + 1 < len(pieces) else "") for i in range(0, len(pieces), 2)]

    def index(position: types.Position) -> int:
        if position.line >= len(lines):
            return len(text)
        start = sum(len(body) + len(end) for body, end in lines[: position.line])
        body, units = lines[position.line][0], 0
        for offset, char in enumerate(body):
            if units >= position.character:
                return start + offset
            units += 2 if ord(char) > 0xFFFF else 1
        return start + len(body)

    start = index(change.range.start)
    end = max(start, index(change.range.end))
    return text[:start] + change.text + text[end:]
