"""Measure the layout model against the real TPU compiler, per chip.

    python bench/model_harness.py [--sample N] [--targets v5e,v6e] [--jobs 2] [--out FILE]
    python bench/model_harness.py --from bench/model_results.jsonl      # recompute, no compiling

Each case of bench/model_corpus.py is traced and every pallas_call in it is compiled alone
for each target. Per call and chip it records the compiler's verdict, its total VMEM use
(also when the kernel fits) and every allocation it lists, as one JSON line. The table
compares the model (vmem_lsp.layout) with those records; the model is re-evaluated every
time, so `--from` shows the current model against recorded compiler facts.

How the compiler is made to speak when a kernel fits: the call is compiled again with a
ballast input (an f32 window exactly the chip's capacity, pl.Buffered(1), ignored by the
kernel) and vmem_limit_bytes at twice the capacity. The physical check then fails with
"Ran out of memory ... Largest program allocations", which lists every allocation and the
"Used" total; the ballast's own entry is taken out. Where that form does not come, a compile
with vmem_limit_bytes=4 KiB gives E1001's "Scoped allocation with size X".
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from vmem_lsp import layout  # noqa: E402
from vmem_lsp.chips import CHIPS, chip  # noqa: E402
from vmem_lsp.compile.protocol import CapturedCall, result_from_dict  # noqa: E402
from vmem_lsp.report.parse import format_size, parse_report  # noqa: E402

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "model_results.jsonl"
TINY_LIMIT = 4096
PRINTED_ROUNDING = 0.0001    # "128.02M": two decimals of the unit
TOTAL_TOLERANCE = 0.05
TOTAL_SLACK = 256 * 1024
TARGETS_MET = {"verdict": 98.0, "allocations": 99.0, "total": 95.0}


# ---- in the compile worker --------------------------------------------------------------

def worker_init() -> None:
    os.environ["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"


def ballast_patch(capacity: int | None, limit: int):
    """A pallas_call replacement that raises vmem_limit_bytes to `limit` and, when `capacity` is
    given, appends an input the kernel ignores whose single-buffered window is `capacity` bytes."""
    import jax
    import jax.numpy as jnp
    from jax._src.pallas import core as pallas_core
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    original = pl.pallas_call

    def with_limit(compiler_params):
        if compiler_params is None:
            return pltpu.CompilerParams(vmem_limit_bytes=limit)
        if isinstance(compiler_params, dict):
            return {k: with_limit(v) for k, v in compiler_params.items()}
        return dataclasses.replace(compiler_params, vmem_limit_bytes=limit)

    def pallas_call(kernel, out_shape=None, *, grid_spec=None, in_specs=pallas_core.no_block_spec, **kwargs):
        kwargs["compiler_params"] = with_limit(kwargs.get("compiler_params"))
        if capacity is None:
            return original(kernel, out_shape, grid_spec=grid_spec, in_specs=in_specs, **kwargs)
        ballast = jax.ShapeDtypeStruct((capacity // 512, 128), jnp.float32)
        ballast_spec = pl.BlockSpec(ballast.shape, lambda *ids: (0, 0), pipeline_mode=pl.Buffered(1))

        def invoke(*args):
            position = len(args)    # the kernel's refs: inputs (top level), ballast, outputs, scratch

            def kernel_without_ballast(*refs, **kw):
                return kernel(*refs[:position], *refs[position + 1:], **kw)

            kernel_without_ballast.__name__ = getattr(kernel, "__name__", "kernel")
            prefetch = grid_spec.num_scalar_prefetch if hasattr(grid_spec, "num_scalar_prefetch") else 0

            def specs_with_ballast(specs):
                if specs is pallas_core.no_block_spec:
                    specs = [pl.BlockSpec()] * (len(args) - prefetch)
                return (*specs, ballast_spec)

            if grid_spec is not None:
                spec = pltpu.PrefetchScalarGridSpec(
                    num_scalar_prefetch=prefetch, grid=grid_spec.grid,
                    in_specs=specs_with_ballast(grid_spec.in_specs), out_specs=grid_spec.out_specs,
                    scratch_shapes=grid_spec.scratch_shapes)
                call = original(kernel_without_ballast, out_shape, grid_spec=spec, **kwargs)
            else:
                call = original(kernel_without_ballast, out_shape, in_specs=specs_with_ballast(in_specs), **kwargs)
            return call(*args, jnp.zeros(ballast.shape, ballast.dtype))

        return invoke

    return pallas_call


def trace(case, target: str, patch=None) -> list:
    """The pallas_call equations of `case` traced for `target`, with pallas_call patched if asked."""
    import jax
    from jax.experimental import pallas as pl
    from jax.sharding import SingleDeviceSharding

    import model_corpus
    from vmem_lsp.compile.capture import pallas_equations, target_device

    device = target_device(target)
    sharding = SingleDeviceSharding(device)
    shapes = [jax.ShapeDtypeStruct(s, model_corpus.DTYPES[d], sharding=sharding) for s, d in case.args]
    original = pl.pallas_call
    jax.clear_caches()      # jitted library kernels would otherwise reuse the other variant's trace
    if patch is not None:
        pl.pallas_call = patch
    try:
        with jax.default_device(device):
            return pallas_equations(jax.make_jaxpr(case.make())(*shapes).jaxpr)
    finally:
        pl.pallas_call = original


def allocation_record(a) -> dict:
    return {"kind": a.kind, "operand": a.operand_index, "size": a.size, "shape": a.shape_text,
            "window": str(a.window_shape) if a.window_shape else None, "buffers": a.buffers,
            "unpadded": a.unpadded_size, "space": a.memory_space}


def listing(text: str, ballast_operand: int | None) -> tuple[int | None, list[dict]] | None:
    """(total, allocations) from a physical "Ran out" report, without the ballast's entry. The
    total is the exact sum of the entries when they add up to the printed "Used" (the list is
    complete; on v7x with a small vmem_limit_bytes "Used" can even print less than the list),
    else "Used" less the ballast (precise to the printed two decimals)."""
    report = parse_report(text)
    if report.form != "physical" or report.memory_space != "vmem":
        return None
    is_ballast = lambda a: a.kind == "input_window" and a.operand_index == ballast_operand
    ballast = sum(a.size for a in report.allocations if is_ballast(a))
    listed = sum(a.size for a in report.allocations)
    complete = listed >= report.used * (1 - PRINTED_ROUNDING)
    total = listed - ballast if complete else report.used - ballast
    return total, [allocation_record(a) for a in report.allocations if not is_ballast(a)]


def measure(case, target: str) -> list[dict]:
    """One record per pallas_call of `case` on `target`."""
    from vmem_lsp.compile.capture import compile_alone, describe, kernel_name, target_device

    device = target_device(target)
    capacity = CHIPS[target].capacity
    try:
        plain = trace(case, target)
    except Exception as error:
        return [{"case": case.id, "family": case.family, "target": target, "call": 0,
                 "status": "trace_error", "error": str(error)[:300]}]
    ballasted = trace(case, target, ballast_patch(capacity, 2 * capacity)) if plain else []
    records = []
    for n, eqn in enumerate(plain):
        started = time.perf_counter()
        fits, text, _ = compile_alone(eqn, device)
        call = CapturedCall(name=kernel_name(eqn), call_origin=None, invoke_origin=None, fits=fits,
                            compiler_text=None, compile_seconds=0.0, **describe(eqn, None))
        record = {"case": case.id, "family": case.family, "target": target, "call": n,
                  "captured": dataclasses.asdict(call), "fits": fits, "form": None, "total": None,
                  "total_source": None, "allocations": None, "status": "ok"}
        report = parse_report(text) if text else None
        if report is not None:
            record["form"] = report.form
            if report.form in ("block_shape", "unknown"):
                record.update(status="compile_error", error=text[:300])
        listed = listing(text, None) if text else None
        if listed:
            record.update(total=listed[0], allocations=listed[1], total_source="report")
        elif report is not None and report.form == "scoped" and report.used is not None:
            record.update(total=report.used, total_source="report")
        if record["allocations"] is None and record["status"] == "ok" and n < len(ballasted):
            ballast_operand = sum(1 for o in call.operands if o.role != "out")
            _, ballast_text, _ = compile_alone(ballasted[n], device)
            listed = listing(ballast_text or "", ballast_operand)
            if listed:
                record["allocations"] = listed[1]
                if record["total"] is None:
                    record.update(total=listed[0], total_source="ballast")
            elif record["total"] is None:
                record.update(tiny_limit_total(case, target, n, device))
            if ballast_text and not listed:
                record["ballast_text"] = ballast_text[:300]
        record["seconds"] = round(time.perf_counter() - started, 3)
        records.append(record)
    return records


def tiny_limit_total(case, target: str, n: int, device) -> dict:
    """E1001's 'Scoped allocation with size X' with vmem_limit_bytes=4 KiB."""
    from vmem_lsp.compile.capture import compile_alone

    eqns = trace(case, target, ballast_patch(None, TINY_LIMIT))
    _, text, _ = compile_alone(eqns[n], device)
    report = parse_report(text or "")
    if report.form == "scoped" and report.used is not None:
        return {"total": report.used, "total_source": "tiny_limit"}
    return {}


def measure_job(job: tuple[str, str]) -> list[dict]:
    import model_corpus
    case_id, target = job
    case = next(c for c in model_corpus.all_cases() if c.id == case_id)
    try:
        return measure(case, target)
    except Exception as error:     # a crash of one case must not stop the run
        return [{"case": case_id, "family": case.family, "target": target, "call": 0, "status": "harness_error",
                 "error": f"{type(error).__name__}: {error}"[:300]}]


def run(case_ids: list[str], targets: list[str], jobs: int, out: Path) -> list[dict]:
    """Compile every (case, target), writing JSON lines as they come."""
    os.environ["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    work = [(c, t) for c in case_ids for t in targets]
    records = []
    with out.open("w") as sink, ProcessPoolExecutor(jobs, initializer=worker_init) as pool:
        for i, batch in enumerate(pool.map(measure_job, work, chunksize=1)):
            for record in batch:
                sink.write(json.dumps(record) + "\n")
                records.append(record)
            sink.flush()
            print(f"[{i + 1}/{len(work)}] {work[i][0]} {work[i][1]}", file=sys.stderr, flush=True)
    return records


# ---- comparing (no jax) -------------------------------------------------------------------

def captured_call(record: dict) -> CapturedCall:
    return result_from_dict({"target": record["target"], "device_kind": None, "calls": [record["captured"]]}).calls[0]


def model_allocation(costs: list[layout.WindowCost], allocation: dict, call: CapturedCall) -> int | None:
    """The model's bytes for one allocation the compiler listed, or None when it has no counterpart."""
    kind = allocation["kind"]
    if kind in ("input_window", "output_window"):
        role = "out" if kind == "output_window" else "in"
        op = next((o for o in call.operands if o.role == role and o.operand == allocation["operand"]
                   and o.role != "prefetch"), None)
        cost = layout.find_cost(costs, kind, op.index) if op else None
        return cost.bytes if cost else None
    if kind == "scratch":
        cost = layout.match_scratch(costs, allocation["shape"] or "")
        return cost.bytes if cost else None
    return None


def compare(record: dict) -> dict:
    """The model's verdict, total and per-allocation bytes beside the compiler's."""
    call = captured_call(record)
    target = chip(record["target"])
    costs = layout.window_costs(call, record["target"])
    model_total = layout.total_estimate(call, record["target"])
    limit = min(call.vmem_limit_bytes or target.scoped_limit, target.capacity)
    result = {"model_total": model_total, "model_fits": model_total <= limit, "allocations": []}
    for a in record.get("allocations") or []:
        if a["kind"] in ("input_window", "output_window", "scratch") and a["space"] == "vmem":
            result["allocations"].append((a, model_allocation(costs, a, call)))
    return result


def same_printed(model: int | None, compiler: int) -> bool:
    """Equal as the compiler prints sizes ("3.91M"): its figures are no more precise than that."""
    return model is not None and format_size(model) == format_size(compiler)


def within(model: int, compiler: int) -> bool:
    return abs(model - compiler) <= max(TOTAL_TOLERANCE * compiler, TOTAL_SLACK)


def usable(record: dict) -> bool:
    """Records where the compiler gave a VMEM verdict (not a lowering or block-shape error)."""
    return record["status"] == "ok"


def summarize(records: list[dict]) -> tuple[list[dict], list[str]]:
    """Rows of the per-chip table, and a line per disagreement."""
    rows, disagreements = [], []
    for target in sorted({r["target"] for r in records}, key=list(CHIPS).index):
        mine = [r for r in records if r["target"] == target]
        ok = [r for r in mine if usable(r)]
        verdicts = allocs = alloc_exact = totals = total_close = 0
        for r in ok:
            c = compare(r)
            name = f"{r['case']}#{r['call']}" if r["call"] else r["case"]
            verdicts += c["model_fits"] == r["fits"]
            if c["model_fits"] != r["fits"]:
                disagreements.append(f"{target} {name}: verdict compiler={'fits' if r['fits'] else 'overflows'} "
                                     f"model={'fits' if c['model_fits'] else 'overflows'} "
                                     f"(compiler total {fmt(r['total'])}, model {fmt(c['model_total'])})")
            for a, model in c["allocations"]:
                allocs += 1
                alloc_exact += same_printed(model, a["size"])
                if not same_printed(model, a["size"]):
                    what = f"{a['kind']} {a['operand'] if a['operand'] is not None else ''} {a['window'] or a['shape']}"
                    disagreements.append(f"{target} {name}: {what.strip()} compiler={a['size']} model={model}")
            if r["total"] is not None:
                totals += 1
                total_close += within(c["model_total"], r["total"])
                if not within(c["model_total"], r["total"]):
                    disagreements.append(f"{target} {name}: total compiler={fmt(r['total'])} "
                                         f"model={fmt(c['model_total'])}")
        rows.append({"chip": target, "records": len(mine), "cases": len(ok),
                     "verdict": pct(verdicts, len(ok)), "allocations": allocs, "alloc_exact": pct(alloc_exact, allocs),
                     "totals": totals, "total_close": pct(total_close, totals)})
    return rows, disagreements


def pct(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None


def fmt(n: int | None) -> str:
    return "-" if n is None else f"{n} ({format_size(n)})"


def table(rows: list[dict]) -> str:
    lines = ["| chip | calls compiled | with a VMEM verdict | verdict agree % | allocations listed | "
             "exact bytes % | totals | total within 5% / 256K % |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['chip']} | {r['records']} | {r['cases']} | {r['verdict']} | {r['allocations']} | "
                     f"{r['alloc_exact']} | {r['totals']} | {r['total_close']} |")
    return "\n".join(lines)


def targets_met(rows: list[dict]) -> bool:
    return all((r["verdict"] or 0) >= TARGETS_MET["verdict"]
               and (r["alloc_exact"] is None or r["alloc_exact"] >= TARGETS_MET["allocations"])
               and (r["total_close"] is None or r["total_close"] >= TARGETS_MET["total"]) for r in rows)


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def select_cases(sample_size: int | None, skip_families: tuple[str, ...] = ()) -> list[str]:
    import model_corpus
    cases = [c for c in model_corpus.all_cases() if c.family not in skip_families]
    return [c.id for c in (model_corpus.sample(cases, sample_size) if sample_size else cases)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="source", type=Path, help="recompute the table from recorded JSON lines")
    parser.add_argument("--sample", type=int, help="a deterministic sample of N cases")
    parser.add_argument("--targets", default=",".join(CHIPS), help="comma-separated chips")
    parser.add_argument("--jobs", type=int, default=1, help="compile processes")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the JSON lines")
    parser.add_argument("--cases", help="comma-separated case ids (instead of --sample)")
    args = parser.parse_args(argv)
    if args.source:
        records = load(args.source)
    else:
        ids = args.cases.split(",") if args.cases else select_cases(args.sample)
        started = time.time()
        records = run(ids, [chip(t).name for t in args.targets.split(",")], args.jobs, args.out)
        print(f"# {len(ids)} cases, {time.time() - started:.0f} s, {datetime.date.today()}, "
              f"{platform.machine()} {os.cpu_count()} cores", file=sys.stderr)
    rows, disagreements = summarize(records)
    print(table(rows))
    print(f"\n{len(disagreements)} disagreements")
    for line in disagreements:
        print("  " + line)
    return 0 if targets_met(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
