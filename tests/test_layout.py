"""The package's layout follows the flow (docs/architecture.md): no import cycle among
vmem_lsp's modules, and nothing below the faces (the CLI, the server) imports them.
Pure and fast: the imports are read with `ast`, nothing is imported or started.

Imports inside functions count: vmem-lsp imports lazily (jax, libcst, the server) to keep
`--version` and the worker light, and a lazy import still makes the importer depend on
what it imports. Imports under `if TYPE_CHECKING:` do not: they never run, and a type
annotation may name a face's type (a handler naming its server) without depending on it."""

from __future__ import annotations

import ast
import functools
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "vmem_lsp"
FACES = ("vmem_lsp.cli", "vmem_lsp.server")  # and vmem_lsp.__main__, which runs the CLI


def module_name(path: pathlib.Path, top: pathlib.Path) -> str:
    parts = path.relative_to(top.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_package(path: pathlib.Path) -> bool:
    return path.name == "__init__.py"


def type_checking_only(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_names(tree: ast.AST):
    """(module, level, names) of every import in the tree that runs, at any depth."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, 0, ()
        elif isinstance(node, ast.ImportFrom):
            yield node.module or "", node.level, tuple(alias.name for alias in node.names)
        if isinstance(node, ast.If) and type_checking_only(node):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def import_graph(top: pathlib.Path = PACKAGE) -> dict[str, set[str]]:
    """Each module of the package under `top` -> the modules of that package it imports."""
    files = {module_name(path, top): path for path in top.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        here = name if is_package(path) else name.rpartition(".")[0]
        found: set[str] = set()
        for module, level, names in imported_names(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if level:
                base = here.split(".")[: len(here.split(".")) - (level - 1)]
                module = ".".join(base + ([module] if module else []))
            # `from P import x` runs P.x when it is a module, else takes x from P's __init__.
            targets = [f"{module}.{n}" if f"{module}.{n}" in files else module for n in names] or [module]
            found.update(t for t in targets if t in files)
        found.discard(name)
        graph[name] = found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan), each a cycle or knot of them."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def is_face(module: str) -> bool:
    return module.endswith(".__main__") or any(module == f or module.startswith(f + ".") for f in FACES)


@functools.cache
def package_graph() -> dict[str, set[str]]:
    """vmem_lsp's own graph, read (every module parsed) once for the three tests that look at it."""
    return import_graph()


def core_importing_faces(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(module, face) for every module below the faces that imports one of them."""
    return sorted((m, t) for m, targets in graph.items() if not is_face(m) for t in targets if is_face(t))


def test_no_import_cycle():
    graph = package_graph()
    knots = ["\n".join(f"  {m} -> {', '.join(sorted(graph[m] & c))}" for m in sorted(c)) for c in cycles(graph)]
    assert not knots, "modules that import each other, round and round:\n" + "\n\n".join(knots)


def test_nothing_below_the_faces_imports_them():
    assert core_importing_faces(package_graph()) == []


def test_the_checks_see_a_planted_cycle_and_a_core_importing_a_face(tmp_path):
    """The checks themselves, on a small package with the faults planted: engine imports
    the CLI inside a function (lazily, as vmem-lsp does), which imports engine back."""
    top = tmp_path / "vmem_lsp"
    (top / "cli").mkdir(parents=True)
    (top / "__init__.py").write_text("")
    (top / "engine.py").write_text("def check():\n    from .cli.common import emit\n")
    (top / "cli" / "__init__.py").write_text("from . import common\n")
    (top / "cli" / "common.py").write_text("from ..engine import check\n")
    (top / "typed.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .cli import common\n")
    graph = import_graph(top)
    assert graph["vmem_lsp.engine"] == {"vmem_lsp.cli.common"}
    assert graph["vmem_lsp.cli"] == {"vmem_lsp.cli.common"}
    assert graph["vmem_lsp.typed"] == set()  # a type-only import is no dependency
    assert cycles(graph) == [frozenset({"vmem_lsp.engine", "vmem_lsp.cli.common"})]
    assert core_importing_faces(graph) == [("vmem_lsp.engine", "vmem_lsp.cli.common")]


# The faces (and the tuner API, a face for scripts) get their workers, pools, clusters and caches
# from compile.backend, so that a new backend is added there once. doctor is left out: it is the
# face that inspects the backends' parts (the cache store's URL, the memory plan) one by one.
BACKEND = "vmem_lsp.compile.backend"
BACKEND_USERS = ("vmem_lsp.cli", "vmem_lsp.server", "vmem_lsp.api")


def faces_reaching_past_the_backend(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(face module, compile module) for each import of compile/ by a face other than the backend."""
    return sorted(
        (m, t)
        for m, targets in graph.items()
        if any(m == f or m.startswith(f + ".") for f in BACKEND_USERS)
        for t in targets
        if t.startswith("vmem_lsp.compile.") and t != BACKEND
    )


def test_the_faces_compile_through_the_backend_only():
    assert faces_reaching_past_the_backend(package_graph()) == []


def test_a_face_importing_the_worker_client_is_seen(tmp_path):
    top = tmp_path / "vmem_lsp"
    (top / "compile").mkdir(parents=True)
    (top / "server").mkdir()
    for name in ("__init__.py", "compile/__init__.py", "compile/backend.py", "server/__init__.py"):
        (top / name).write_text("")
    (top / "compile" / "client.py").write_text("")
    (top / "server" / "compiler.py").write_text("from ..compile.backend import x\nfrom ..compile.client import y\n")
    assert faces_reaching_past_the_backend(import_graph(top)) == [
        ("vmem_lsp.server.compiler", "vmem_lsp.compile.client")
    ]


# ---- hardware families: each a package of its own, asked through one interface (issue 40) ----------

FAMILIES = ("vmem_lsp.tpu", "vmem_lsp.gpu")  # each the one home of its family
REGISTRY = "vmem_lsp.families"  # the one module of the core that imports them
# What the core may not say: a test of which family it holds ("is_gpu(...)"), or a name of a GPU
# part ("gpu_layout", "call.gpu_backend"): the issue's `grep -rn "is_gpu\|gpu_" vmem_lsp/`.
FAMILY_TESTS = re.compile(r"is_gpu|is_tpu|gpu_")


def family_of_module(module: str) -> str | None:
    return next((f for f in FAMILIES if module == f or module.startswith(f + ".")), None)


def core_importing_a_family(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(module, family module) for each import of a family's package by a module outside it,
    the registry aside: by the core, or by another family."""
    return sorted(
        (m, t)
        for m, targets in graph.items()
        if m != REGISTRY
        for t in targets
        if (owner := family_of_module(t)) is not None and family_of_module(m) != owner
    )


def family_tests_in_the_core(top: pathlib.Path = PACKAGE) -> list[str]:
    """`path:line: text` of every line outside the families' packages and the registry that
    tests which family it has or names a GPU part (FAMILY_TESTS), comments and docstrings too."""
    found = []
    for path in sorted(top.rglob("*.py")):
        module = module_name(path, top)
        if module == REGISTRY or family_of_module(module) is not None:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if FAMILY_TESTS.search(line):
                found.append(f"{path.relative_to(top.parent)}:{number}: {line.strip()}")
    return found


def test_the_core_imports_no_family_but_through_the_registry():
    assert core_importing_a_family(import_graph()) == []


def test_the_core_never_tests_which_family_it_has():
    assert family_tests_in_the_core() == []


def test_the_family_rules_see_a_planted_branch(tmp_path):
    """The two checks on a small package with the faults planted: engine tests is_gpu, imported
    lazily from the GPU's package; the TPU's package imports the GPU's; the registry may import both."""
    top = tmp_path / "vmem_lsp"
    for folder in ("tpu", "gpu"):
        (top / folder).mkdir(parents=True)
        (top / folder / "__init__.py").write_text("")
    (top / "__init__.py").write_text("")
    (top / "gpu" / "targets.py").write_text("def is_gpu(name):\n    return name == 'h100'\n")
    (top / "tpu" / "chips.py").write_text("from ..gpu.targets import is_gpu\n")
    (top / "families.py").write_text("from .gpu import targets\nfrom .tpu import chips\n")
    (top / "engine.py").write_text(
        "def run(target):\n    from .gpu.targets import is_gpu\n\n    return 'GPU' if is_gpu(target) else 'TPU'\n"
    )
    graph = import_graph(top)
    assert core_importing_a_family(graph) == [
        ("vmem_lsp.engine", "vmem_lsp.gpu.targets"),
        ("vmem_lsp.tpu.chips", "vmem_lsp.gpu.targets"),
    ]
    assert family_tests_in_the_core(top) == [
        "vmem_lsp/engine.py:2: from .gpu.targets import is_gpu",
        "vmem_lsp/engine.py:4: return 'GPU' if is_gpu(target) else 'TPU'",
    ]
