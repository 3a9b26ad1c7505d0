"""Test modules share code through tests/support only: a test module that
imports another runs that module's tests' imports and fixtures twice under two
names, and conftest.py is pytest's, loaded before any test (importing it by
name makes a second copy whose fixtures pytest never sees)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def forbidden_imports(folder: Path) -> list[str]:
    """`file:line module` for each import of a test module or conftest in the
    test modules and the support package under `folder`, at any depth of the
    file (an import inside a function counts)."""
    found = []
    for path in sorted([*folder.glob("test_*.py"), *folder.glob("support/**/*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top == "conftest" or top.startswith("test_"):
                    found.append(f"{path.relative_to(folder)}:{node.lineno} {name}")
    return found


def test_no_test_module_imports_another_or_conftest():
    assert forbidden_imports(TESTS) == []


def test_a_planted_import_is_found(tmp_path):
    (tmp_path / "support").mkdir()
    (tmp_path / "support" / "helpers.py").write_text("def f():\n    from conftest import ROOT\n")
    (tmp_path / "test_a.py").write_text("import os\nimport test_b as b\nfrom support import cli\n")
    (tmp_path / "test_b.py").write_text("from test_a import x\nfrom .test_a import y\n")
    assert forbidden_imports(tmp_path) == ["support/helpers.py:2 conftest", "test_a.py:2 test_b", "test_b.py:1 test_a"]
