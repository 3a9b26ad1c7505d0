"""Notebooks made from the project's .py kernels, for the notebook tests: the
file cut into cells at its top-level definitions, a Markdown cell before each
file and IPython magics mixed in, written by Jupyter's own writer (nbformat).
`where` records the cell and line each .py line went to."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

STARTS_A_CELL = re.compile(r"^(def |class |@|# vmem:)")


def chunks(lines: list[str]) -> list[list[tuple[int, str]]]:
    """The file's lines (numbered from 1) cut before each top-level definition
    that follows a blank line; blank lines between chunks are dropped."""
    cut: list[list[tuple[int, str]]] = [[]]
    for number, line in enumerate(lines, 1):
        if STARTS_A_CELL.match(line) and number > 1 and not lines[number - 2].strip() and cut[-1]:
            cut.append([])
        cut[-1].append((number, line))
    for chunk in cut:
        while chunk and not chunk[-1][1].strip():
            chunk.pop()
    return [c for c in cut if c]


def notebook_from(files: list[Path], magics: bool = True):
    """(notebook node, where): where[(file name, line)] = (cell number from 1, line in that cell)."""
    cells, where = [], {}
    for path in files:
        cells.append(new_markdown_cell(f"## {path.name}\nThe kernel — «as written» in `{path.name}`."))
        for n, chunk in enumerate(chunks(path.read_text().splitlines())):
            head = ["%load_ext autoreload", "!echo checking"] if magics and n == 0 else []
            cells.append(new_code_cell("\n".join(head + [line for _, line in chunk])))
            for offset, (number, _) in enumerate(chunk):
                where[(path.name, number)] = (len(cells), len(head) + offset + 1)
        if magics:
            cells.append(new_code_cell("%%timeit\nsum(range(10))"))
            cells[-1].outputs = [new_output("stream", text="1.2 µs ± 3 ns per loop\n")]
    return new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}}), where


def write_notebook(files: list[Path], to: Path, magics: bool = True) -> dict:
    node, where = notebook_from(files, magics)
    nbformat.write(node, str(to))
    return where
