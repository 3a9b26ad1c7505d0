"""Knobs: the integer literals a fix may change to resize blocks, found where
the value lives: a keyword of the `# vmem:` example (also nested, such as
`BlockSizes(block_q=...)`), a default argument of the example's function, or
a module constant. Which knob moves which block is learned by tracing."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..source.directives import Example, is_shape_literal, parse_example
from ..source.model import Span
from ..source.syntax import parse_quietly
from ..source.text import node_span, split_lines


@dataclass(frozen=True)
class Knob:
    name: str  # "bm", "block_sizes.block_q", "BLOCK_ROWS"
    where: str  # "example" | "keyword" | "default" | "constant" | "field"
    path: str  # the file the literal is written in
    span: Span  # the literal's token; for a "keyword", where it is to be added
    value: int
    shared: bool = False  # changing it changes other code too: other callers of a default, a module constant

    def edit_text(self, value: int) -> str:
        """The text that sets this knob to `value` at `span`."""
        return f", {self.name}={value}" if self.where == "keyword" else str(value)


def _int(node: ast.AST | None) -> int | None:
    return node.value if isinstance(node, ast.Constant) and type(node.value) is int else None


def example_knobs(example: Example, source: str | None = None) -> list[Knob]:
    """Integer arguments of the example call, at any depth (also those of a
    call that makes the function called), except shape dims. A positional
    argument of the called function is named by its parameter when `source`
    defines it (`bk=512`, not `arg2=512`, in a fix's title)."""
    if example.module is not None:
        return []  # pyproject examples: edited in the source, not the table
    text = example.text
    lead = len(text) - len(text.lstrip())
    try:
        call = parse_example(text).body
    except SyntaxError:
        return []
    base_col = example.span.start_col + lead
    lines = [text.strip()]
    knobs: list[Knob] = []

    def visit(node, prefix: str):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Call):  # make_kernel(block_sizes=...)(q, k, v)
                visit(node.func, prefix)
            named = [(named_positionally(node, i), a) for i, a in enumerate(node.args)] + [
                (k.arg, k.value) for k in node.keywords if k.arg
            ]
        elif isinstance(node, (ast.Tuple, ast.List)):  # block_shape=(512, 512)
            named = [(f"[{i}]", e) for i, e in enumerate(node.elts)]
        else:
            return
        for name, value in named:
            full = f"{prefix}{name}" if name.startswith("[") or not prefix else f"{prefix}.{name}"
            if (number := _int(value)) is not None and number > 0:
                at = node_span(value, lines)
                span = Span(example.line, base_col + at.start_col, example.line, base_col + at.end_col)
                knobs.append(Knob(full, "example", example.path, span, number))
            elif isinstance(value, (ast.Call, ast.Tuple, ast.List)) and not is_shape_literal(value):
                visit(value, full)

    parameters = _parameters(source, callee_name(example)) if source is not None else []

    def named_positionally(node, index: int) -> str:
        if node is call and index < len(parameters):
            return parameters[index]
        return f"arg{index}"

    visit(call, "")
    return knobs


def callee_name(example: Example) -> str | None:
    try:
        call = parse_example(example.text).body
    except SyntaxError:
        return None
    return call.func.id if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) else None


def _function(source: str, name: str | None) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The module-level def called `name` in `source`, or None."""
    try:
        module = parse_quietly(source)
    except SyntaxError:
        return None
    return next(
        (
            node
            for node in module.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name
        ),
        None,
    )


def _parameters(source: str, name: str | None) -> list[str]:
    """The positional parameters of the def called `name`, in order."""
    function = _function(source, name)
    return [a.arg for a in function.args.posonlyargs + function.args.args] if function else []


def default_knobs(example: Example, source: str) -> list[Knob]:
    """Integer defaults of the example's function, when the example leaves them."""
    function = _function(source, callee_name(example))
    if function is None:
        return []
    passed = {k.name.split(".")[0] for k in example_knobs(example, source)}
    lines = split_lines(source)
    args = function.args
    positional = args.posonlyargs + args.args
    pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    shared = _has_other_callers(source, function.name, example)
    return [
        Knob(a.arg, "default", example.path, node_span(d, lines), value, shared)
        for a, d in pairs
        if (value := _int(d)) and a.arg not in passed
    ]


def _has_other_callers(source: str, name: str, example: Example) -> bool:
    """The function is called somewhere in the file besides the `# vmem:` directives."""
    try:
        module = parse_quietly(source)
    except SyntaxError:
        return True
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
        for node in ast.walk(module)
    )


def keyword_knobs(example: Example, source: str) -> list[Knob]:
    """The example's function's integer defaults, as keywords to add to the
    example (`, bm=256` before its closing parenthesis): the example's own
    number, preferred to editing a default that other callers share."""
    if example.module is not None or not example.text.rstrip().endswith(")") or example.text.rstrip().endswith("()"):
        return []
    end = example.span.start_col + len(example.text.rstrip()) - 1
    at = Span(example.line, end, example.line, end)
    return [Knob(k.name, "keyword", example.path, at, k.value) for k in default_knobs(example, source)]


def constant_knobs(path: str, source: str) -> list[Knob]:
    """Module-level `NAME = <int>` that the module uses elsewhere, and integer
    field defaults of its classes (a block-sizes dataclass)."""
    try:
        module = parse_quietly(source)
    except SyntaxError:
        return []
    lines = split_lines(source)
    knobs = []
    for node in module.body:
        if (found := _int_assignment(node)) and source.count(found[0]) > 1:
            name, literal, value = found
            users = sum(
                1
                for f in module.body
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(f))
            )
            knobs.append(Knob(name, "constant", path, node_span(literal, lines), value, users > 1))
        if isinstance(node, ast.ClassDef):
            for field in node.body:
                if found := _int_assignment(field):  # every instance's default
                    name, literal, value = found
                    knobs.append(Knob(f"{node.name}.{name}", "field", path, node_span(literal, lines), value, True))
    return knobs


def _int_assignment(node: ast.stmt) -> tuple[str, ast.expr, int] | None:
    """NAME, the literal and its value of `NAME = <int>` or `NAME: int = <int>` (ints of 8 and more:
    block sizes, not flags)."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        target = node.targets[0]
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        target = node.target
    else:
        return None
    value = _int(node.value)
    return (target.id, node.value, value) if node.value is not None and value is not None and value >= 8 else None
