"""A `# vmem:` example for a pallas_call that none reaches: which function to
call, with what, and where to write it.

The directive goes above the module-level function that reaches the
pallas_call (following calls within the file to a public one). Parameters
without a default become shape placeholders (`f32[...]`), integer defaults
are written out (`bm=512`: what a fix will shrink); where the file or a test
module of the project calls that function with arrays of literal shapes
(`jnp.ones((1024, 512), jnp.bfloat16)`), those shapes are proposed instead
and the template says where they were found. Pure: texts in, a Template out.
"""

from __future__ import annotations

import ast
import functools
import os
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from ..dtypes import TABLE
from .model import Span
from .syntax import parse_quietly

PLACEHOLDER = "f32[...]"
JAX_TO_DIRECTIVE = {d.jax: d.name for d in TABLE}
# Constructors whose shape and dtype can be read: name -> (index of the shape argument, of the dtype argument).
CONSTRUCTORS: dict[str, tuple[int, int] | tuple[None, None]] = {  # where the shape and the dtype are passed
    "ones": (0, 1),
    "zeros": (0, 1),
    "empty": (0, 1),
    "full": (0, 2),
    "ShapeDtypeStruct": (0, 1),
    "normal": (1, 2),
    "uniform": (1, 2),
    "randint": (1, 4),
    "bernoulli": (None, None),
}


@dataclass(frozen=True)
class Template:
    path: str
    line: int  # the directive goes on a new line before this one (1-based)
    indent: str
    function: str
    arguments: tuple[str, ...]  # "f32[...]", "bf16[1024, 512]", "bm=512"
    found_in: str | None = None  # "tests/test_matmul.py:42": where the shapes were read

    @property
    def call(self) -> str:
        return f"{self.function}({', '.join(self.arguments)})"

    @property
    def directive(self) -> str:
        return f"{self.indent}# vmem: {self.call}\n"

    @property
    def unfinished(self) -> bool:
        return any("..." in a for a in self.arguments)


Function = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(statements: Sequence[ast.stmt]) -> dict[str, Function]:
    return {n.name: n for n in statements if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


# What each function calls, by name, kept as long as its ast node lives: the locator reuses the
# nodes of the statements an edit did not touch (statements.py), so a keystroke walks only the
# function it changed, not every function of the file for each site (VMEM020 asks per keystroke).
_called: weakref.WeakKeyDictionary[ast.AST, frozenset[str]] = weakref.WeakKeyDictionary()


def _called_names(function: Function) -> frozenset[str]:
    """The names `function` calls: `f` of `f(...)` and of `m.f(...)`, anywhere in it (its decorators too)."""
    found = _called.get(function)
    if found is None:
        found = frozenset(
            n.func.id if isinstance(n.func, ast.Name) else n.func.attr
            for n in ast.walk(function)
            if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))
        )
        _called[function] = found
    return found


def reaching_function(module: ast.Module, line: int) -> Function | None:
    """The module-level function to call for the pallas_call on `line`: the
    top-level def around it when public, else a public one that calls it
    (through private helpers of the file), else the def itself."""
    return ModuleFunctions(module.body).reaching(line)


class ModuleFunctions:
    """A module's top-level functions, for reaching_function's search, once for all its sites
    (the locator's statements, statements.py). `words(function)`, where given, is the set of
    words of the function's text, or None where that cannot tell which names it calls: a
    function not walked yet whose words hold none of the names asked is not walked then."""

    def __init__(
        self, statements: Sequence[ast.stmt], words: Callable[[Function], frozenset[str] | None] | None = None
    ):
        self.functions = _functions(statements)
        self.words = words
        self.known: dict[str, tuple[bool, frozenset[str]]] = {}  # name -> (walked: its called names, else its words)

    def reaching(self, line: int) -> Function | None:
        functions = self.functions
        around = next((f for f in functions.values() if f.lineno <= line <= (f.end_lineno or f.lineno)), None)
        if around is None:
            return None
        if not around.name.startswith("_"):
            return around
        reached, frontier = {around.name}, [around.name]
        while frontier:
            callers = [f for f in functions.values() if f.name not in reached and self._calls(f, frontier)]
            public = [f for f in callers if not f.name.startswith("_")]
            if public:
                return min(public, key=lambda f: f.lineno)
            frontier = [f.name for f in callers]
            reached.update(frontier)
        return around

    def _calls(self, function: Function, names: list[str]) -> bool:
        known = self.known.get(function.name)
        if known is None:
            called = _called.get(function)
            if called is not None:
                known = (True, called)
            elif self.words is not None and (words := self.words(function)) is not None:
                known = (False, words)
            else:
                known = (True, _called_names(function))
            self.known[function.name] = known
        walked, found = known
        if not walked:
            if found.isdisjoint(names):
                return False  # not walked: an edit made it new, and no word of it is one of `names`
            found = _called_names(function)
            self.known[function.name] = (True, found)
        return not found.isdisjoint(names)


# One text: --add-examples asks for each unreached site of a file in turn, a code action for one.
# Each entry holds a whole module's ast (3.5 MB for a 2,600-line file), which the collector walks.
@functools.lru_cache(maxsize=1)
def _module(text: str) -> ast.Module | None:
    try:
        return parse_quietly(text)
    except (SyntaxError, ValueError):
        return None


def _default_text(node: ast.AST) -> str | None:
    """A default worth writing out: an integer (a block size) or a tuple of them."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return str(node.value)
    if isinstance(node, ast.Tuple) and node.elts and all(_default_text(e) for e in node.elts):
        return ast.unparse(node)
    return None


def parameters(function: Function) -> tuple[list[str], list[str]]:
    """(names of the positional parameters without a default; `name=...` of
    keyword-only ones without, and `name=default` of integer defaults)."""
    args = function.args
    positional = [a for a in args.posonlyargs + args.args if a.arg not in ("self", "cls")]
    defaults = dict(zip([a.arg for a in positional][len(positional) - len(args.defaults) :], args.defaults))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    required = [a.arg for a in positional if a.arg not in defaults]
    written = [f"{a.arg}=..." for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    written += [f"{name}={text}" for name, node in defaults.items() if (text := _default_text(node))]
    return required, written


def _dtype(node: ast.AST | None) -> str | None:
    if node is None:
        return "f32"
    name = (
        node.attr
        if isinstance(node, ast.Attribute)
        else node.id
        if isinstance(node, ast.Name)
        else node.value
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        else None
    )
    return JAX_TO_DIRECTIVE.get(name) if name else None


def _shape(node: ast.AST) -> tuple[int, ...] | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return (node.value,)
    if isinstance(node, (ast.Tuple, ast.List)):
        dims = tuple(e.value for e in node.elts if isinstance(e, ast.Constant) and type(e.value) is int)
        return dims if len(dims) == len(node.elts) else None
    return None


def array_literal(node: ast.AST, names: Mapping[str, ast.AST]) -> str | None:
    """`bf16[1024, 512]` for `jnp.ones((1024, 512), jnp.bfloat16)`,
    `jax.random.normal(key, (8, 128))`, `jax.ShapeDtypeStruct((8, 128), jnp.float32)`,
    or a name assigned one of them in the same function."""
    if isinstance(node, ast.Name) and node.id in names:
        return array_literal(names[node.id], {})
    if not isinstance(node, ast.Call):
        return None
    func = (
        node.func.attr
        if isinstance(node.func, ast.Attribute)
        else node.func.id
        if isinstance(node.func, ast.Name)
        else None
    )
    shape_at, dtype_at = CONSTRUCTORS.get(func or "", (None, None))
    if shape_at is None or dtype_at is None:
        return None
    keywords = {k.arg: k.value for k in node.keywords}
    shape_node = node.args[shape_at] if len(node.args) > shape_at else keywords.get("shape")
    dtype_node = node.args[dtype_at] if len(node.args) > dtype_at else keywords.get("dtype")
    shape = _shape(shape_node) if shape_node is not None else None
    dtype = _dtype(dtype_node)
    if shape is None or dtype is None:
        return None
    return f"{dtype}[{', '.join(map(str, shape))}]"


def calls_with_shapes(text: str, name: str) -> list[tuple[int, tuple[str, ...]]]:
    """(line, arguments) of each call of `name` in `text` whose array arguments
    are all constructors of literal shape (or names assigned one)."""
    return list(_calls_with_shapes(text).get(name, ()))


_SHAPED_TEXTS = 32  # a project's test modules, and the file itself: their calls, never their ast
_shaped: OrderedDict[str, dict[str, list[tuple[int, tuple[str, ...]]]]] = OrderedDict()
_shaped_lock = threading.Lock()  # the server's code actions and the CLI's engine may ask from two threads


def _calls_with_shapes(text: str, module: ast.Module | None = None) -> dict[str, list[tuple[int, tuple[str, ...]]]]:
    """calls_with_shapes for every callee name of `text`, found once per text (`module`: its parse,
    where the caller has it): the "add example" code action asks on each request, for the file and
    each test module of the project, and the CLI for each unreached site of a file."""
    with _shaped_lock:
        if text in _shaped:
            _shaped.move_to_end(text)
            return _shaped[text]
    if module is None:
        try:
            module = parse_quietly(text)
        except (SyntaxError, ValueError):
            module = None
    found = _shaped_calls(module) if module is not None else {}
    with _shaped_lock:
        _shaped[text] = found
        if len(_shaped) > _SHAPED_TEXTS:
            _shaped.popitem(last=False)
    return found


def _shaped_calls(module: ast.Module) -> dict[str, list[tuple[int, tuple[str, ...]]]]:
    """Each call of literal-shaped arrays, by callee name, as found in each scope: the module, then
    every function (at any depth, in ast.walk's order), each call of a scope read with the names
    assigned anywhere in that scope (the last assignment in ast.walk's order winning). In one walk:
    a scope's nodes come in the order ast.walk of the module gives them; a call whose arguments name
    no variable reads the same in every scope around it, so only the module's reading of it counts
    (the others add nothing new to the set, and the set keeps the first)."""
    functions: list[ast.AST] = []
    names: dict[ast.AST, dict[str, ast.AST]] = {module: {}}
    calls: list[ast.Call] = []  # in the module, in ast.walk's order
    naming: dict[ast.AST, list[ast.Call]] = {}  # function -> its calls with a name among their arguments
    todo: deque[tuple[ast.AST, tuple[ast.AST, ...]]] = deque([(module, (module,))])
    while todo:
        node, scopes = todo.popleft()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.append(node)
            names[node], naming[node] = {}, []
            scopes = (*scopes, node)
        todo.extend((child, scopes) for child in ast.iter_child_nodes(node))
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    for scope in scopes:
                        names[scope][target.id] = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)) and node.args:
            calls.append(node)
            if any(isinstance(a, ast.Name) for a in node.args):
                for scope in scopes[1:]:
                    naming[scope].append(node)
    found: dict[str, list[tuple[int, tuple[str, ...]]]] = {}
    for scope, within in [(module, calls), *((f, naming[f]) for f in functions)]:
        assigned = names[scope]
        for call in within:
            arrays = [literal for a in call.args if (literal := array_literal(a, assigned))]
            if len(arrays) == len(call.args):
                name = call.func.id if isinstance(call.func, ast.Name) else cast(ast.Attribute, call.func).attr
                keywords = [
                    f"{k.arg}={ast.unparse(k.value)}" for k in call.keywords if k.arg and _default_text(k.value)
                ]
                found.setdefault(name, []).append((call.lineno, tuple([*arrays, *keywords])))
    return {name: sorted(set(shaped), key=lambda f: f[0]) for name, shaped in found.items()}


def test_files(path: str, root: str | None) -> list[str]:
    """The project's test modules: test_*.py and *_test.py under `root`'s tests/ and beside `path`."""
    folders = {os.path.dirname(path)}
    if root:
        folders |= {os.path.join(root, "tests"), os.path.join(root, "test")}
    found = []
    for folder in sorted(folders):
        if not os.path.isdir(folder):
            continue
        for directory, subdirs, files in os.walk(folder):
            subdirs[:] = [d for d in subdirs if not d.startswith(".") and d != "__pycache__"]
            found += [
                os.path.join(directory, f)
                for f in sorted(files)
                if f.endswith(".py") and (f.startswith("test_") or f.endswith("_test.py"))
            ]
    return found


def template_for(text: str, path: str, site_span: Span, others: Sequence[tuple[str, str]] = ()) -> Template | None:
    """The example to add for the pallas_call at `site_span`; `others` are
    (path, text) of files to look in for calls with literal shapes (tests)."""
    module = _module(text)
    if module is None:
        return None
    function = reaching_function(module, site_span.start_line)
    if function is None:
        return None
    first = min([function.lineno, *(d.lineno for d in function.decorator_list)])
    indent = ""
    required, written = parameters(function)
    for where, source in [(path, text), *others]:
        calls = _calls_with_shapes(source, module if source is text else None).get(function.name, [])
        for line, arguments in calls:
            keywords = {a.split("=")[0] for a in arguments if "=" in a}
            needed = {w.split("=")[0] for w in written if w.endswith("=...")}
            if len([a for a in arguments if "=" not in a]) == len(required) and needed <= keywords:
                relative = os.path.relpath(where, os.path.dirname(path)) if where != path else os.path.basename(path)
                return Template(path, first, indent, function.name, tuple(arguments), f"{relative}:{line}")
    return Template(path, first, indent, function.name, tuple([PLACEHOLDER] * len(required) + written))


def snippet(template: Template) -> str:
    """The directive as an LSP snippet: each placeholder a tab stop, in order."""
    escape = lambda text: text.replace("\\", "\\\\").replace("$", "\\$").replace("}", "\\}")
    parts, stop = [], 0
    for argument in template.arguments:
        name, equals, value = argument.rpartition("=") if "=" in argument else ("", "", argument)
        if "..." in value:
            stop += 1
            parts.append(f"{escape(name)}{equals}${{{stop}:{escape(value)}}}")
        else:
            parts.append(escape(argument))
    return f"{escape(template.indent)}# vmem: {escape(template.function)}({', '.join(parts)})$0\n"
