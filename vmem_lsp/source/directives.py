"""`# vmem:` example directives: a call expression whose arguments may hold
shape literals in the compiler's notation, e.g.

    # vmem: matmul(bf16[8192, 8192], bf16[8192, 8192], bm=1024)

Parsing is pure and happens in the editor process, so a directive that cannot
work is reported on its own line before any compiler is started.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from typing import TypeGuard

from ..dtypes import DIRECTIVE_DTYPES
from .model import Span
from .syntax import parse_quietly
from .text import split_lines

DIRECTIVE = re.compile(r"^(?P<indent>\s*)#\s*vmem:\s?(?P<expr>.*?)\s*$")

SHAPE_FUNCTION = "__vmem_shape__"
# An array given by its values (the API writes a small integer NumPy array so): the worker's
# scope makes it a NumPy array, a constant of the traced program (compile/known_values.py).
VALUES_FUNCTION = "__vmem_values__"


@dataclass(frozen=True)
class Example:
    """One example: where it is written and the call to trace."""

    path: str  # file that holds the directive (or pyproject.toml)
    line: int  # 1-based line of the directive
    span: Span  # the expression's span on that line
    text: str  # the call as written
    module: str | None = None  # "package.module" for pyproject examples; None: the file itself

    @property
    def key(self) -> ExampleKey:
        return ExampleKey(self.path, self.line)


@dataclass(frozen=True, order=True)
class ExampleKey:
    """Which example: its file and the line of its directive. What fixes and
    diagnostics are filed under; "path:line" only in JSON output."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class DirectiveError:
    path: str
    span: Span
    message: str
    unfinished: bool = False  # a template's placeholders (`f32[...]`) still to fill in: a hint, not an error
    sweep: bool = False  # a list to sweep (`bm=[256, 512]`): for `vmem-lsp sweep`, not run by check


# A 0-d array written as the compiler writes it, `f32[]`, is not Python: parsed as `f32[()]`.
ZERO_D = re.compile(r"\b(" + "|".join(sorted(map(re.escape, DIRECTIVE_DTYPES), key=len, reverse=True)) + r")\[(\s*)\]")


class _ZeroD(ast.NodeTransformer):
    """Turns back into `dtype[()]` the calls `dtype( )` that parse_example wrote for `dtype[ ]`."""

    def __init__(self, places: set[tuple[int, int]]):
        self.places = places

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if isinstance(node.func, ast.Name) and (node.lineno, node.col_offset) in self.places:
            empty = ast.copy_location(ast.Tuple([], ast.Load()), node)
            return ast.copy_location(ast.Subscript(node.func, empty, ast.Load()), node)
        return self.generic_visit(node)


def parse_example(text: str) -> ast.Expression:
    """An example call's tree, with `f32[]` read as the 0-d shape `f32[()]`. The text is
    rewritten at the same length (`f32()`), so every position in the tree is the text's."""
    text = text.strip()
    places: set[tuple[int, int]] = set()
    for number, line in enumerate(text.split("\n"), start=1):
        places |= {(number, len(line[: m.start()].encode())) for m in ZERO_D.finditer(line)}
    tree = parse_quietly(ZERO_D.sub(r"\1(\2)", text), mode="eval")
    return _ZeroD(places).visit(tree) if places else tree


UNFINISHED = (
    "example not finished: write each `...` as the array's shape (e.g. f32[1024, 512]) or the "
    "argument's value; it runs once it has none"
)


def find_examples(source: str, path: str) -> tuple[list[Example], list[DirectiveError]]:
    """Every `# vmem:` directive in a file, checked; bad ones become errors."""
    examples: list[Example] = []
    errors: list[DirectiveError] = []
    if "vmem" not in source:  # most files: no line to match
        return examples, errors
    for number, line in enumerate(split_lines(source), start=1):
        match = DIRECTIVE.match(line)
        if not match:
            continue
        start = match.start("expr")
        span = Span(number, start, number, max(match.end("expr"), start + 1))
        problem = check_call(match["expr"])
        if problem and "..." in match["expr"]:
            errors.append(DirectiveError(path, span, UNFINISHED, unfinished=True))
        elif problem:
            errors.append(DirectiveError(path, span, f"vmem: directive {problem}"))
        elif axes := sweep_axes(match["expr"]):
            errors.append(
                DirectiveError(
                    path,
                    span,
                    f"a sweep over {', '.join(axes)}: `vmem-lsp sweep "
                    f"{os.path.basename(path)}` checks its configs; check runs none",
                    sweep=True,
                )
            )
        else:
            examples.append(Example(path, number, span, match["expr"]))
    return examples, errors


def parse_pyproject_example(entry: str, config_path: str, config_text: str = "") -> Example | DirectiveError:
    """`"package.module:function(f32[1024, 1024], block=256)"` from [tool.vmem-lsp] examples;
    its span is where the entry is written in `config_text`, if found."""
    span = next(
        (text_span(config_text, quoted) for quoted in (f'"{entry}"', f"'{entry}'") if quoted in config_text),
        text_span(config_text, entry),
    )
    module, sep, call = entry.partition(":")
    if not sep or not module.strip():
        return DirectiveError(
            config_path, span, f"example {entry!r} must look like 'package.module:function(f32[8, 128])'"
        )
    problem = check_call(call)
    if problem:
        return DirectiveError(config_path, span, f"example {entry!r}: {problem}")
    if axes := sweep_axes(call):
        return DirectiveError(
            config_path,
            span,
            f"example {entry!r} is a sweep over {', '.join(axes)}: "
            f"`vmem-lsp sweep` checks its configs; check runs none",
            sweep=True,
        )
    return Example(config_path, span.start_line, span, call.strip(), module=module.strip())


def text_span(text: str, needle: str) -> Span:
    """The span of the first occurrence of `needle` in `text`; line 1 when absent."""
    for number, line in enumerate(split_lines(text), start=1):
        col = line.find(needle)
        if col >= 0:
            return Span(number, col, number, col + len(needle))
    return Span(1, 0, 1, 0)


def check_call(text: str) -> str | None:
    """Why `text` is not a usable example call, or None when it is."""
    if not text.strip():
        return "is empty: write a call such as kernel(f32[1024, 1024])"
    try:
        tree = parse_example(text)
    except SyntaxError as error:
        return f"does not parse: {error.msg} (column {error.offset})"
    if not isinstance(tree.body, ast.Call):
        return "must be a call such as kernel(f32[1024, 1024])"
    for node in ast.walk(tree):
        if is_shape_literal(node):
            problem = check_dims(node)
            if problem:
                return problem
        if isinstance(node, ast.Constant) and node.value is Ellipsis:
            return "has a `...` still to fill in"
    return None


def is_axis(node: ast.AST) -> TypeGuard[ast.List]:
    """A bracketed list of constants: the values of a sweep axis. A list that
    holds a shape literal (a pytree of arrays) is an argument."""
    if not isinstance(node, ast.List) or any(is_shape_literal(n) for n in ast.walk(node)):
        return False
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


def axis_nodes(call: ast.expr) -> list[tuple[str, ast.List]]:
    """(name, list) of each sweep axis among the arguments of the call and of the
    calls inside it (`block_sizes=BlockSizes(block_q=[512, 1024])` is the axis
    `BlockSizes.block_q`), in the order they are written."""
    found = []
    for node in ast.walk(call):
        if not isinstance(node, ast.Call):
            continue
        prefix = "" if node is call else ast.unparse(node.func) + "."
        found += [(f"{prefix}arg {n}", a) for n, a in enumerate(node.args) if is_axis(a)]
        found += [(f"{prefix}{k.arg}", k.value) for k in node.keywords if k.arg and is_axis(k.value)]
    return sorted(found, key=lambda pair: (pair[1].lineno, pair[1].col_offset))


def sweep_axes(text: str) -> list[str]:
    """The names of the sweep axes of an example call."""
    if "[" not in text:
        return []
    return [name for name, _ in axis_nodes(parse_example(text).body)]


def is_shape_literal(node: ast.AST) -> TypeGuard[ast.Subscript]:
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in DIRECTIVE_DTYPES


def check_dims(node: ast.Subscript) -> str | None:
    dims = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    for dim in dims:
        if not (isinstance(dim, ast.Constant) and type(dim.value) is int and dim.value >= 0):
            return f"has a shape {ast.unparse(node)} whose dimensions are not whole numbers"
    return None


class _ShapeLiterals(ast.NodeTransformer):
    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        if not is_shape_literal(node) or not isinstance(node.value, ast.Name):
            return self.generic_visit(node)
        dims = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        call = ast.Call(
            ast.Name(SHAPE_FUNCTION, ast.Load()),
            [ast.Constant(DIRECTIVE_DTYPES[node.value.id]), ast.Tuple(list(dims), ast.Load())],
            [],
        )
        return ast.copy_location(call, node)


def compile_call(text: str) -> ast.Call:
    """The example's call with each shape literal `bf16[8, 128]` turned into
    `__vmem_shape__("bfloat16", (8, 128))`, for the worker to evaluate."""
    tree = _ShapeLiterals().visit(parse_example(text))
    return ast.fix_missing_locations(tree).body
