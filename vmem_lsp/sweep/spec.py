"""Sweep specs: an example call in which a bracketed list of constants marks
an axis, e.g.

    examples/matmul.py:matmul(bf16[8192, 8192], bf16[8192, 8192], bm=[256, 512, 1024], bk=512)

Every other argument is fixed; the configs are the product of the axes. The
same call may be written in a `# vmem:` line or a pyproject example. A list
that holds a shape literal (`[f32[8, 128], f32[8, 128]]`, a pytree of arrays)
is an argument, not an axis. Pure: errors are raised before anything runs.
"""

from __future__ import annotations

import ast
import itertools
import math
import os
from dataclasses import dataclass
from typing import Protocol

from ..source.directives import DIRECTIVE, Example, axis_nodes, check_call, parse_example
from ..source.model import Span
from ..source.text import char_column, split_lines

MAX_CONFIGS = 10_000  # beyond this a sweep needs --budget-compiles: it is a search, not a table


class SweepError(ValueError):
    """A sweep spec that cannot run: the message says why, before any compile."""


@dataclass(frozen=True)
class Axis:
    name: str  # the keyword, or "arg N" for a positional argument
    values: tuple  # the constants, as written
    start: int  # string indices of the list in the call text
    end: int


class Configs(Protocol):
    """What run_sweep runs: configs as keyword dicts, each made into an example
    (a Sweep's product of axes; the API's list of an autotuner's configs)."""

    @property
    def example(self) -> Example: ...
    def configs(self) -> list[dict]: ...
    def example_for(self, config: dict) -> Example: ...


@dataclass(frozen=True)
class Sweep:
    example: Example  # where the call is written; its text still holds the lists
    axes: tuple[Axis, ...]

    @property
    def size(self) -> int:
        return math.prod(len(a.values) for a in self.axes)

    def configs(self) -> list[dict]:
        """Every config, as {axis name: value}, in the order the axes are written."""
        names = [a.name for a in self.axes]
        return [dict(zip(names, values)) for values in itertools.product(*(a.values for a in self.axes))]

    def call_for(self, config: dict) -> str:
        """The example call with each axis list replaced by the config's value."""
        text = self.example.text
        for axis in sorted(self.axes, key=lambda a: -a.start):
            text = text[: axis.start] + repr(config[axis.name]) + text[axis.end :]
        return text

    def example_for(self, config: dict) -> Example:
        return Example(
            self.example.path, self.example.line, self.example.span, self.call_for(config), module=self.example.module
        )


def axes_of(call_text: str) -> tuple[Axis, ...]:
    """The bracketed lists of constants among the call's arguments (directives.axis_nodes)."""
    text = call_text.strip()
    tree = parse_example(text).body
    lines = text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)

    def index(line: int, byte_col: int) -> int:
        return starts[line - 1] + char_column(lines[line - 1], byte_col)

    axes = []
    for name, node in axis_nodes(tree):
        values = tuple(ast.literal_eval(node))
        if not values:
            raise SweepError(f"the axis {name} is an empty list: give it at least one value")
        axes.append(
            Axis(
                name,
                values,
                index(node.lineno, node.col_offset),
                index(node.end_lineno or node.lineno, node.end_col_offset or node.col_offset),
            )
        )
    return tuple(axes)


def sweep_of(example: Example) -> Sweep | None:
    """The example as a sweep, or None when it has no axis."""
    axes = axes_of(example.text)
    if not axes:
        return None
    return Sweep(Example(example.path, example.line, example.span, example.text.strip(), example.module), axes)


def example_at(spec: str, root: str = ".") -> Example:
    """`path.py:call(...)` or `package.module:call(...)` as an example; SweepError if it is neither."""
    where, sep, call = spec.partition(":")
    if not sep or not where.strip():
        raise SweepError(
            f"{spec!r} must look like 'path/to/file.py:function(bf16[8192, 8192], bm=[256, 512])' "
            f"or 'package.module:function(...)'"
        )
    problem = check_call(call)
    if problem:
        raise SweepError(f"the call {call.strip()!r} {problem}")
    where, span = where.strip(), Span(1, 0, 1, 0)
    if where.endswith((".py", ".ipynb")) or os.path.exists(os.path.join(root, where)):
        path = os.path.abspath(os.path.join(root, where))
        if not os.path.isfile(path):
            raise SweepError(f"no file {where}")
        return Example(path, 1, span, call.strip())
    return Example(os.path.abspath(os.path.join(root, "pyproject.toml")), 1, span, call.strip(), module=where)


def parse_spec(spec: str, root: str = ".") -> Sweep:
    """A sweep spec; SweepError if it is not one (no list to sweep, an empty list, a bad call)."""
    example = example_at(spec, root)
    sweep = sweep_of(example)
    if sweep is None:
        raise SweepError(f"{example.text!r} has no axis: write the values to sweep as a list, e.g. bm=[256, 512, 1024]")
    return sweep


def one_config(spec: str, root: str = ".") -> Example:
    """A table entry: an example with no list to sweep."""
    example = example_at(spec, root)
    if axes_of(example.text):
        raise SweepError(f"example {spec!r} holds a list: a table entry is one config")
    return example


def sweeps_in(text: str, path: str) -> list[Sweep]:
    """The `# vmem:` lines of a file that hold an axis, as sweeps."""
    found = []
    for number, line in enumerate(split_lines(text), start=1):
        match = DIRECTIVE.match(line)
        if match and not check_call(match["expr"]):
            span = Span(number, match.start("expr"), number, match.end("expr"))
            if (sweep := sweep_of(Example(path, number, span, match["expr"]))) is not None:
                found.append(sweep)
    return found


def check_size(sweeps: list[Sweep], budget: int | None) -> None:
    """More than MAX_CONFIGS configs is a search: it needs a compile budget."""
    total = sum(s.size for s in sweeps)
    if total > MAX_CONFIGS and budget is None:
        raise SweepError(
            f"{total:,} configs: more than {MAX_CONFIGS:,} needs --budget-compiles N "
            f"(configs left undecided are reported as such)"
        )
