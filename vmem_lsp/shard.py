"""CI shards: which (example, target) pairs, and which files' own diagnostics,
job K of N owns, so that a matrix of N jobs covers a run exactly once.

Pairs go round-robin in a sorted order (by path relative to the project
root, line, call text, chip): shards differ by one pair at most, none is empty
while there are at least N pairs, and neither the machine, its checkout folder
nor the order PATHs are given in changes the split. A hash of each pair mod N
would keep a pair on its shard when others are added, but leaves shards empty
or doubled on a small repository; with a shared cache a moved pair costs
nothing, while an idle CI job costs its whole start-up.

Diagnostics that are no pair's (a bad directive, an unreadable file, a
kernel no example reaches) belong to the shard that owns their file: a stable
hash of its relative path, as they cost no compile and need no balance."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .source.directives import Example


class ShardError(ValueError):
    """`--shard` that is not K/N with 1 <= K <= N."""


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based, as CI matrices count
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """`K/N`, as `--shard` takes it."""
    index, slash, count = text.partition("/")
    try:
        shard = Shard(int(index), int(count))
    except ValueError:
        shard = None
    if not slash or shard is None or not 1 <= shard.index <= shard.count:
        raise ShardError(f"--shard wants K/N with 1 <= K <= N (e.g. 2/4), not {text!r}")
    return shard


def relative(path: str, root: str) -> str:
    """A path as every machine's checkout names it: relative to the project root, with `/`."""
    return os.path.relpath(path, root).replace(os.sep, "/")


PairKey = tuple[str, int, str, str]  # (relative path, line, call text, target)
Pair = tuple["Example", str]  # an example, and the target it runs on


def pair_key(example: Example, target: str, root: str) -> PairKey:
    return (relative(example.path, root), example.line, example.text, target)


def take(pairs: list[Pair], shard: Shard, root: str) -> list[Pair]:
    """The (example, target) pairs of `pairs` that `shard` runs, in their given order."""
    order = sorted(range(len(pairs)), key=lambda i: pair_key(*pairs[i], root))
    mine = {i for rank, i in enumerate(order) if rank % shard.count == shard.index - 1}
    return [pair for i, pair in enumerate(pairs) if i in mine]


def owns(shard: Shard, path: str, root: str) -> bool:
    """Whether `shard` reports the diagnostics of `path` that belong to no pair."""
    digest = hashlib.sha256(relative(path, root).encode()).digest()
    return int.from_bytes(digest[:8], "big") % shard.count == shard.index - 1


@dataclass
class ShardWork:
    """What one shard did, for `vmem-lsp merge`: the whole plan (every pair of
    the run) and its own pairs, its diagnostics before chips were merged, and
    what the merge must know of its results to merge chips and VMEM020 as one
    run does."""

    shard: Shard
    plan: list[PairKey]  # every pair of the whole run, sorted
    done: list[PairKey]  # this shard's
    examples: int  # of the whole run
    parts: list = field(default_factory=list)  # [Diagnostic], suppressed ones dropped, chips not merged
    compiled: dict = field(default_factory=dict)  # (ExampleKey, call number) -> {target}: compiled and fit
    covered: set = field(default_factory=set)  # (path, name span) of each pallas_call site reached
    unknown: set = field(default_factory=set)  # files with an example that could not run: no VMEM020
    internal_errors: list = field(default_factory=list)  # paths the locator failed on
