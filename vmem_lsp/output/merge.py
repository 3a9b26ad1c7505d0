"""`vmem-lsp merge`: the JSON reports of `check --shard K/N` jobs joined into
the report, and the exit code, that one unsharded run gives.

A shard's JSON keeps the keys of any check and adds "shard": its place, the
whole plan's digest and size, the pairs it ran, and its diagnostics whole
(subject, wording, module positions) before chips were merged. The merge
rebuilds those Diagnostics and runs what one run would have run over all of
them: drop duplicates, merge chips, say where a failing kernel compiled, and
keep a VMEM020 only where no shard's example reached the kernel."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from .. import __version__
from ..diagnostics import Diagnostic, Related, Subject
from ..render import Wording
from ..shard import ShardWork
from ..source.directives import ExampleKey
from ..source.model import Span
from .formats import fit_tally, tally


class MergeError(Exception):
    """Shards that do not make one run: the merge refuses, exit 2."""


# ---- a shard's JSON ---------------------------------------------------------------------


def plan_digest(plan: list) -> str:
    """The whole run's pairs, as one string shards of one run share."""
    return hashlib.sha256(json.dumps(plan).encode()).hexdigest()[:16]


def pair_dict(key) -> dict:
    path, line, text, target = key
    return {"example": f"{path}:{line}", "call": text, "target": target}


def pair_id(pair: dict) -> tuple[str, str]:
    return pair["example"], pair["target"]


def part_dict(d: Diagnostic) -> dict:
    """A diagnostic whole, at module positions and absolute paths, as `part_of` rebuilds it."""
    return dataclasses.asdict(d)


def part_of(data: dict) -> Diagnostic:
    subject, wording = data["subject"], data["wording"]
    return Diagnostic(
        data["path"],
        Span(**data["span"]),
        data["severity"],
        data["code"],
        data["message"],
        data["target"],
        data["origin"],
        tuple(Related(r["path"], Span(**r["span"]), r["message"]) for r in data["related"]),
        data["facts"],
        Subject(ExampleKey(**subject["example"]), subject["call"], subject["part"]) if subject else None,
        Wording(**wording) if wording else None,
    )


def shard_dict(work: ShardWork, targets: list[str]) -> dict:
    """The "shard" key of a shard's JSON."""
    return {
        "index": work.shard.index,
        "count": work.shard.count,
        "targets": list(targets),
        "plan": {"digest": plan_digest(work.plan), "pairs": len(work.plan), "examples": work.examples},
        "work": [pair_dict(k) for k in work.done],
        "parts": [part_dict(d) for d in work.parts],
        "compiled": [
            [key.path, key.line, call, target]
            for (key, call), chips in sorted(work.compiled.items())
            for target in sorted(chips)
        ],
        "covered": [
            [path, dataclasses.asdict(span)]  # sorted before the spans become dicts
            for path, span in sorted(work.covered, key=lambda c: (c[0], dataclasses.astuple(c[1])))
        ],
        "unknown": sorted(work.unknown),
        "internal_errors": work.internal_errors,
    }


# ---- reading them back --------------------------------------------------------------------


@dataclass
class ShardReport:
    """One shard's JSON as the merge reads it."""

    name: str  # the file it came from
    version: str
    summary: str
    shard: dict


def read_shard(name: str, text: str) -> ShardReport:
    try:
        data = json.loads(text)
    except ValueError as error:
        raise MergeError(f"{name}: not JSON ({error})") from None
    if not isinstance(data, dict) or not isinstance(data.get("shard"), dict):
        raise MergeError(f"{name}: not the JSON of `vmem-lsp check --shard K/N --format json`")
    return ShardReport(name, data.get("version", "?"), data.get("summary", ""), data["shard"])


def refusal(reports: list[ShardReport]) -> str | None:
    """Why these shards are not one whole run, or None."""
    first = reports[0]
    if len({r.version for r in reports}) > 1:
        return "the shards come from different vmem-lsp versions: " + describe(reports, lambda r: r.version)
    if first.version != __version__:
        return (
            f"the shards come from vmem-lsp {first.version}; this is {__version__}: merge with the version that checked"
        )
    if len({r.shard["count"] for r in reports}) > 1:
        return "the shards split the run differently: " + describe(
            reports, lambda r: f"{r.shard['index']}/{r.shard['count']}"
        )
    if len({r.shard["plan"]["digest"] for r in reports}) > 1:
        return "the shards checked different runs (other files, examples or chips): " + describe(
            reports, lambda r: r.shard["plan"]["digest"]
        )
    count = first.shard["count"]
    indices = [r.shard["index"] for r in reports]
    if twice := sorted({i for i in indices if indices.count(i) > 1}):
        return f"shard {', '.join(f'{i}/{count}' for i in twice)} given more than once"
    if missing := sorted(set(range(1, count + 1)) - set(indices)):
        return f"shard {', '.join(f'{i}/{count}' for i in missing)} missing: a merge needs all {count}"
    seen: dict = {}
    for r in reports:
        for pair in r.shard["work"]:
            if (other := seen.setdefault(pair_id(pair), r.name)) != r.name:
                return f"{pair['example']} on {pair['target']} was checked by both {other} and {r.name}"
    if len(seen) != first.shard["plan"]["pairs"]:
        return f"the shards ran {len(seen)} of the run's {first.shard['plan']['pairs']} (example, chip) pairs"
    return None


def describe(reports: list[ShardReport], value) -> str:
    return ", ".join(f"{r.name}: {value(r)}" for r in reports)


# ---- the merge ----------------------------------------------------------------------------


@dataclass
class Merged:
    """The whole run's diagnostics, rebuilt from its shards."""

    diagnostics: list[Diagnostic]
    summary: str
    internal_errors: list[str]

    def exit_code(self) -> int:
        """engine.exit_code's rule: 2 for our bugs, 1 for an error found, else 0."""
        if self.internal_errors:
            return 2
        return 1 if any(d.severity == "error" for d in self.diagnostics) else 0


def compiled_of(reports: list[ShardReport]) -> dict:
    """engine.compiled_chips over every shard's results."""
    compiled: dict = {}
    for r in reports:
        for path, line, call, target in r.shard["compiled"]:
            compiled.setdefault((ExampleKey(path, line), call), set()).add(target)
    return compiled


def reached_elsewhere(d: Diagnostic, covered: set, unknown: set) -> bool:
    """A shard's VMEM020 that one run would not give: another shard's example
    reached that kernel, or could not run in that file."""
    return d.code == "VMEM020" and (d.path in unknown or (d.path, d.span) in covered)


def merge(reports: list[ShardReport]) -> Merged:
    """One run's diagnostics from all its shards, as engine.diagnose makes them."""
    from ..engine import merge_chips

    if not reports:
        raise MergeError("no shard reports given")
    if (problem := refusal(reports)) is not None:
        raise MergeError(problem)
    covered = {(path, Span(**span)) for r in reports for path, span in r.shard["covered"]}
    unknown = {path for r in reports for path in r.shard["unknown"]}
    parts = [part_of(p) for r in sorted(reports, key=lambda r: r.shard["index"]) for p in r.shard["parts"]]
    kept = [d for d in dict.fromkeys(parts) if not reached_elsewhere(d, covered, unknown)]
    diagnostics = merge_chips(kept, compiled_of(reports))
    internal = sorted({p for r in reports for p in r.shard["internal_errors"]})
    return Merged(diagnostics, summary(diagnostics, reports), internal)


def summary(diagnostics: list[Diagnostic], reports: list[ShardReport]) -> str:
    """The unsharded run's counts, and where they came from."""
    unchecked = sum(d.code == "VMEM020" for d in diagnostics)
    plan, targets = reports[0].shard["plan"], reports[0].shard["targets"]
    return (
        tally(diagnostics) + f" in {plan['examples']} example{'s' * (plan['examples'] != 1)} on {', '.join(targets)} "
        f"(merged from {len(reports)} shards, {plan['pairs']} (example, chip) pairs)"
        + (f"; {unchecked} kernel{'s' * (unchecked != 1)} not checked" if unchecked else "")
        + fit_tally(diagnostics)
    )
