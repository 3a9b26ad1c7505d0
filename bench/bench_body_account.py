"""The body account against the compiler's internal scratch, per kernel family (issue 42, item 1).

    python bench/bench_body_account.py [--families flash,router,...] [--targets v5e,v6e] [--jobs 2]

Reads the compiler's recorded facts (bench/model_results.jsonl, made by model_harness.py: each
kernel's total and, where the compiler listed them, its allocations), traces each case again with
today's capture (model_harness.retrace: the body account, tpu/body.held_values, is a trace-only
fact) and compares, per record where the compiler gave a total:

- internal: the compiler's total less the model's windows, scratch and scoped buffers (what
  VMEM003/VMEM008 split), or the listing's spill slots where the compiler listed them;
- account: the bytes of the values the body holds at its peak (every held value).

Prints a row per family and chip: records, records with an internal share over 1 MiB, the median of
account / internal over those, and the share within 25%. Nothing is compiled.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import model_harness

from vmem_lsp.held import held
from vmem_lsp.tpu import layout

MiB = 1 << 20
MEASURED_FROM = MiB  # an internal share below this is noise beside the windows' rounding


def internal_of(record: dict, call) -> int | None:
    """The compiler's internal scratch for one record: its listed spill slots, else its total less
    the model's windows, scratch and scoped buffers."""
    listed = record.get("allocations")
    if listed is not None and any(a["kind"] == "spill" for a in listed):
        return model_harness.spill_bytes(record)
    total = model_harness.compiler_total(record)
    if total is None:
        return None
    return total - sum(c.bytes for c in layout.window_costs(call, record["target"]))


def account_of(call, target: str) -> int:
    return sum(u.bytes for u in held(call, layout.account_kind(call, target)))


def rows(records: list[dict]) -> list[dict]:
    found: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for r in records:
        if not model_harness.usable(r) or not r.get("captured"):
            continue
        call = model_harness.captured_call(r)
        internal = internal_of(r, call)
        if internal is None:
            continue
        found[(model_harness.family(r), r["target"])].append((internal, account_of(call, r["target"])))
    out = []
    for (fam, target), points in sorted(found.items()):
        big = [(i, a) for i, a in points if i >= MEASURED_FROM]
        ratios = [a / i for i, a in big]
        out.append(
            {
                "family": fam,
                "target": target,
                "records": len(points),
                "measured": len(big),
                "median": statistics.median(ratios) if ratios else None,
                "within_25": sum(abs(x - 1) <= 0.25 for x in ratios) / len(ratios) if ratios else None,
            }
        )
    return out


def table(found: list[dict]) -> str:
    lines = [
        "| family | chip | records | internal >= 1 MiB | account / internal (median) | within 25% |",
        "|---|---|---|---|---|---|",
    ]
    for r in found:
        median = f"{r['median']:.2f}" if r["median"] is not None else "-"
        within = f"{100 * r['within_25']:.0f}%" if r["within_25"] is not None else "-"
        lines.append(f"| {r['family']} | {r['target']} | {r['records']} | {r['measured']} | {median} | {within} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, default=model_harness.DEFAULT_OUT)
    parser.add_argument("--families", default="flash,paged_attention,router,normalize,reduce,mask,scan,sort")
    parser.add_argument("--targets", default="v5e,v6e")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    wanted, targets = set(args.families.split(",")), set(args.targets.split(","))
    records = [
        r for r in model_harness.load(args.source) if model_harness.family(r) in wanted and r["target"] in targets
    ]
    if not records:
        print(f"no records of {sorted(wanted)} on {sorted(targets)} in {args.source}", file=sys.stderr)
        return 1
    print(table(rows(model_harness.retrace(records, args.jobs))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
