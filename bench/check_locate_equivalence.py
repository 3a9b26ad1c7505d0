"""The locator with its caches against the locator before them, on many texts fed as an editor would.

    .venv/bin/python bench/check_locate_equivalence.py [--base REV | --tree REV] [--positions N] [--plant FAULT]

Two copies of vmem_lsp/source are imported side by side: the reference, whose
statements.py, prepass.py, pieces.py and locate.py come from `--base` (by
default the commit before the caches; sites.py's site_calls as it was there),
and the working tree's (`--tree REV`: the reference is all of vmem_lsp/source
at REV, for a change to any of the locator's modules). Each text (jax's Pallas ops, examples/,
tests/data/kernels/, every .py of vmem_lsp/ and tests/) is located, then
edited at N lines each (type a character, insert a line in column 0 or
indented, delete a line, cut a line in half, split it in two, then undo; and
a chain of edits without undo), every text fed to the same long-lived locator
under the file's path. Sites, notes, syntax errors and
internal errors must be identical, and the top-level statements the cache
gives must dump (with positions) as a whole parse's. `--plant` breaks the
cache on purpose (the check must then fail): shift goes red here; ends and
memo need texts the corpus lacks (a `;` before a backslash, two sites on one
line) and go red in tests/test_locate.py; starts has not been seen to matter
(the lines before such a statement never parse alone).
Exit status 1 on any difference.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MINE = ("statements.py", "prepass.py", "pieces.py", "locate.py")
BEFORE_CACHES = "de72336^"  # the commit before the locator's caches
SITE_CALLS_NOW = '    calls = piece.remember("own calls", statement, lambda: _own_calls(statement, piece))\n'
SITE_CALLS_BEFORE = "    calls = _own_calls(statement, piece)\n"
PLANTS = {  # file -> (what is there, what breaks it)
    "shift": ("statements.py", "    if shift == 0:\n", "    if True:\n"),
    "starts": (
        "statements.py",
        "    first = first_line(statements[index])\n    return (",
        "    first = first_line(statements[index])\n    return True or (",
    ),
    "ends": (
        "statements.py",
        "else None\n    return (following is None",
        "else None\n    return True or (following is None",
    ),
    "memo": ("pieces.py", "key = (what, id(node))", "key = (what,)"),
}


def build(folder: Path, name: str, base: str | None, plant: str | None, tree: str | None = None):
    """A copy of vmem_lsp/source as the package `name`, with MINE from `base` (None: as in the tree),
    or all of it as at `tree`."""
    package = folder / name
    shutil.copytree(ROOT / "vmem_lsp" / "source", package / "source")
    (package / "__init__.py").write_text("")
    shutil.copy(ROOT / "vmem_lsp" / "dtypes.py", package / "dtypes.py")
    if tree is not None:
        listed = subprocess.run(
            ["git", "ls-tree", "--name-only", tree, "vmem_lsp/source/"],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        for file in listed:
            text = subprocess.run(
                ["git", "show", f"{tree}:{file}"], cwd=ROOT, check=True, capture_output=True, text=True
            )
            (package / "source" / Path(file).name).write_text(text.stdout)
    elif base is not None:
        for file in MINE:
            text = subprocess.run(
                ["git", "show", f"{base}:vmem_lsp/source/{file}"], cwd=ROOT, check=True, capture_output=True, text=True
            ).stdout
            (package / "source" / file).write_text(text)
        sites = (package / "source" / "sites.py").read_text()
        assert SITE_CALLS_NOW in sites, "site_calls moved on: update SITE_CALLS_NOW"
        (package / "source" / "sites.py").write_text(sites.replace(SITE_CALLS_NOW, SITE_CALLS_BEFORE))
    if plant is not None:
        file, there, broken = PLANTS[plant]
        path = package / "source" / file
        assert there in path.read_text(), f"cannot plant {plant}: the code moved"
        path.write_text(path.read_text().replace(there, broken))
    sys.path.insert(0, str(folder))
    return (importlib.import_module(f"{name}.source.locate"), importlib.import_module(f"{name}.source.statements"))


def corpus() -> list[Path]:
    ops = ROOT / ".venv/lib/python3.11/site-packages/jax/experimental/pallas/ops"
    files = [
        *ops.rglob("*.py"),
        *(ROOT / "examples").rglob("*.py"),
        *(ROOT / "tests/data/kernels").rglob("*.py"),
        *(ROOT / "vmem_lsp").rglob("*.py"),
        *(ROOT / "tests").glob("*.py"),
    ]
    return sorted(set(files))


def edits(text: str, rng: random.Random, positions: int) -> list[str]:
    """The texts an editor would send, one after another: edits at a few lines, each undone, then a chain."""
    lines = text.split("\n")
    chosen = rng.sample(range(len(lines)), min(positions, len(lines)))
    chosen += [i for i, line in enumerate(lines) if "pallas_call" in line][:3]
    sent = [text]
    for i in chosen:
        line = lines[i]
        half = len(line) // 2
        variants = [
            lines[:i] + [line + " "] + lines[i + 1 :],  # typing at the end of the line
            lines[:i] + [line[:half] + "x" + line[half:]] + lines[i + 1 :],  # typing within it
            lines[:i] + ["x = 1"] + lines[i:],  # a new line in column 0
            lines[:i] + ["    pass"] + lines[i:],  # an indented one
            lines[:i] + [""] + lines[i:],  # Enter
            lines[:i] + lines[i + 1 :],  # a line deleted
            lines[:i] + [line[:half]] + lines[i + 1 :],  # cut in half: often a syntax error
            lines[:i] + [line[:half], line[half:]] + lines[i + 1 :],  # split in two
        ]
        for variant in variants:
            sent += ["\n".join(variant), text]
    chain = list(lines)
    for i in chosen:  # edits piling up, never undone
        j = min(i, len(chain) - 1)
        action = rng.randrange(4)
        if action == 0:
            chain.insert(j, "")
        elif action == 1:
            chain[j] += " "
        elif action == 2 and len(chain) > 1:
            del chain[j]
        else:
            chain[j] = chain[j][: len(chain[j]) // 2]
        sent.append("\n".join(chain))
    sent.append(text)
    return sent


def outcome(result) -> tuple:
    internal = result.internal_error.strip().splitlines()[-1] if result.internal_error else None
    return repr(result.sites), result.error, internal  # repr: the two copies have their own classes


def dumped(statements: list[ast.stmt]) -> list[str]:
    return [ast.dump(s, include_attributes=True) for s in statements]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default=BEFORE_CACHES, help="the revision of the reference's own files")
    parser.add_argument("--positions", type=int, default=6, help="lines edited per file (plus its pallas_call lines)")
    parser.add_argument("--tree", help="the reference is all of vmem_lsp/source at this revision instead")
    parser.add_argument("--plant", choices=sorted(PLANTS))
    parser.add_argument("--limit", type=int, help="only the first N files")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        reference, _ = build(Path(folder), "vmem_reference", args.base, None, args.tree)
        new, new_statements = build(Path(folder), "vmem_new", None, args.plant)
        rng = random.Random(args.seed)
        files = corpus()[: args.limit]
        texts = sites = differences = 0
        for file in files:
            original = file.read_text(errors="replace")
            path = str(file)
            for number, text in enumerate(edits(original, rng, args.positions)):
                texts += 1
                reference_result = reference.locate(text, path)
                expected, got = outcome(reference_result), outcome(new.locate(text, path))
                sites += len(reference_result.sites)
                problem = None
                if expected != got:
                    problem = "locate differs"
                else:
                    normal = text.replace("\r\n", "\n").replace("\r", "\n")
                    statements, error = new_statements.top_level_statements(normal, normal.split("\n"), path + "#")
                    if error is None and dumped(statements) != dumped(ast.parse(normal).body):
                        problem = "statements differ from a whole parse"
                if problem:
                    differences += 1
                    if differences <= 5:
                        print(f"DIFFERENT: {file} text {number}: {problem}")
                        for label, value in (("reference", expected), ("new", got)):
                            print(f"  {label}: {value[0][:300]}, error {value[1]!r}, internal {value[2]!r}")
    print(
        f"{len(files)} files, {texts} texts ({sites} sites located in them), {differences} different; "
        f"{time.perf_counter() - started:.0f} s" + (f"; planted fault: {args.plant}" if args.plant else "")
    )
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
