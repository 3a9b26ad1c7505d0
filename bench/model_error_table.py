"""Writes vmem_lsp/tpu/model_error.json: how far the layout model's total was
from the compiler's, by kind of kernel (model_error.kind_of) and chip, over the
agreement records of model_results.jsonl. The sweep trusts the model only
beyond these bounds.

    cd bench && ../.venv/bin/python model_error_table.py [--from model_results.jsonl]

The bounds go under the key of the libtpu this Python runs (the one that compiled the records);
the other keys of the file stay as they are. Without --from the records are
model_results-<libtpu>.jsonl when it exists (0.0.50.1's), else model_results.jsonl (0.0.42.1's).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from importlib.metadata import version
from pathlib import Path

from model_harness import captured_call, compare, compiler_total, load, usable

from vmem_lsp.tpu.chips import chip
from vmem_lsp.tpu.model_error import TABLE, kind_of


def errors(records: list[dict], libtpu: str | None = None) -> dict:
    """{(kind, chip): [(model - compiler) / limit]} over the records with a VMEM verdict, the limit
    with the chip's figures as `libtpu` (the compiler of the records) prints them."""
    found = defaultdict(list)
    for record in records:
        total = compiler_total(record) if usable(record) else None
        if total is None:
            continue
        call, target = captured_call(record), chip(record["target"], libtpu)
        limit = min(call.vmem_limit_bytes or target.scoped_limit, target.capacity)
        found[(kind_of(call, record["target"]), record["target"])].append(
            (compare(record)["model_total"] - total) / limit
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    libtpu = version("libtpu")
    mine = Path(f"model_results-{libtpu}.jsonl")
    parser.add_argument("--from", dest="source", default=str(mine if mine.exists() else "model_results.jsonl"))
    args = parser.parse_args()
    found = errors(load(Path(args.source)), libtpu)
    bounds: dict = defaultdict(dict)
    print(f"{'kind':10s} {'chip':5s} {'records':>7s} {'low':>8s} {'high':>8s}")
    for (kind, target), values in sorted(found.items()):
        bounds[kind][target] = {
            "low": round(min(min(values), 0.0), 4),
            "high": round(max(max(values), 0.0), 4),
            "records": len(values),
        }
        b = bounds[kind][target]
        print(f"{kind:10s} {target:5s} {b['records']:7d} {b['low']:+8.4f} {b['high']:+8.4f}")
    # Keyed by the libtpu that compiled the records (this environment's): the bounds of
    # other versions stay as they were measured.
    tables = json.loads(TABLE.read_text()) if TABLE.exists() else {}
    tables[libtpu] = {"source": f"bench/{Path(args.source).name}", "bounds": bounds}
    TABLE.write_text(json.dumps(tables, indent=1, sort_keys=True) + "\n")
    print(f"wrote {TABLE}")


if __name__ == "__main__":
    main()
