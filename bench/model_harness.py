"""Measure the layout model against the real TPU compiler, per chip.

    python bench/model_harness.py [--sample N] [--targets v5e,v6e] [--jobs 2] [--out FILE]
    python bench/model_harness.py --families pipeline,manual_dma --per-family 8 --merge
    python bench/model_harness.py --from bench/model_results.jsonl      # recompute, no compiling
    python bench/model_harness.py --from bench/model_results.jsonl --retrace   # describe again, no compiling

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
import math
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import families

from vmem_lsp.compile.protocol import result_from_dict
from vmem_lsp.render import size as format_size
from vmem_lsp.results import CapturedCall
from vmem_lsp.tpu import layout
from vmem_lsp.tpu.chips import CHIPS, chip
from vmem_lsp.tpu.parse import parse_report

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "model_results.jsonl"
TINY_LIMIT = 4096
PRINTED_ROUNDING = 0.0001  # "128.02M": two decimals of the unit
TOTAL_TOLERANCE = 0.05
TOTAL_SLACK = 256 * 1024
TARGETS_MET = {"verdict": 98.0, "allocations": 99.0, "total": 95.0}


# ---- in the compile worker --------------------------------------------------------------


def worker_init() -> None:
    """Before any kernel is traced: let several libtpu loads coexist, and have jax's run_scoped
    record what each allocation is (a pipeline window and its buffers, or a run_scoped entry), as
    the language server's worker does (provenance.install_provenance)."""
    os.environ["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    from vmem_lsp.compile.provenance import install_provenance

    install_provenance()


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
            position = len(args)  # the kernel's refs: inputs (top level), ballast, outputs, scratch

            def kernel_without_ballast(*refs, **kw):
                return kernel(*refs[:position], *refs[position + 1 :], **kw)

            kernel_without_ballast.__name__ = getattr(kernel, "__name__", "kernel")
            prefetch = grid_spec.num_scalar_prefetch if hasattr(grid_spec, "num_scalar_prefetch") else 0

            def specs_with_ballast(specs):
                if specs is pallas_core.no_block_spec:
                    specs = [pl.BlockSpec()] * (len(args) - prefetch)
                return (*specs, ballast_spec)

            if grid_spec is not None:
                spec = pltpu.PrefetchScalarGridSpec(
                    num_scalar_prefetch=prefetch,
                    grid=grid_spec.grid,
                    in_specs=specs_with_ballast(grid_spec.in_specs),
                    out_specs=grid_spec.out_specs,
                    scratch_shapes=grid_spec.scratch_shapes,
                )
                call = original(kernel_without_ballast, out_shape, grid_spec=spec, **kwargs)
            else:
                call = original(kernel_without_ballast, out_shape, in_specs=specs_with_ballast(in_specs), **kwargs)
            return call(*args, jnp.zeros(ballast.shape, ballast.dtype))

        return invoke

    return pallas_call


def trace(case, target: str, patch=None) -> list:
    """The pallas_call equations of `case` traced for `target`, with pallas_call patched if asked."""
    import jax
    import model_corpus
    from jax.experimental import pallas as pl
    from jax.sharding import SingleDeviceSharding

    from vmem_lsp.compile.devices import target_device
    from vmem_lsp.compile.tracing import pallas_equations

    device = target_device(target)
    sharding = SingleDeviceSharding(device)
    shapes = [jax.ShapeDtypeStruct(s, model_corpus.DTYPES[d], sharding=sharding) for s, d in case.args]
    original = pl.pallas_call
    jax.clear_caches()  # jitted library kernels would otherwise reuse the other variant's trace
    if patch is not None:
        pl.pallas_call = patch
    try:
        with jax.default_device(device):
            return pallas_equations(jax.make_jaxpr(case.make())(*shapes).jaxpr)
    finally:
        pl.pallas_call = original


def allocation_record(a) -> dict:
    return {
        "kind": a.kind,
        "operand": a.operand_index,
        "size": a.size,
        "shape": a.shape_text,
        "window": str(a.window_shape) if a.window_shape else None,
        "buffers": a.buffers,
        "unpadded": a.unpadded_size,
        "space": a.memory_space,
    }


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


def verdict_of(result) -> tuple[bool, str | None]:
    """(fits, compiler text) of capture.compile_alone's answer: a Verdict, or the
    (fits, text, seconds) tuple of earlier versions."""
    if isinstance(result, tuple):
        return result[0], result[1]
    return result.fits, result.text


def family(record: dict) -> str:
    """The record's kernel family, from its case id (older records carry coarser names)."""
    return families.family_of(record["case"])


def measure(case, target: str) -> list[dict]:
    """One record per pallas_call of `case` on `target`."""
    from vmem_lsp.compile.capture import compile_alone, describe
    from vmem_lsp.compile.devices import target_device
    from vmem_lsp.compile.kernels import kernel_name
    from vmem_lsp.families import family_of

    device = target_device(target)
    side = family_of(target).worker()
    capacity = CHIPS[target].capacity
    try:
        plain = trace(case, target)
    except Exception as error:
        return [
            {
                "case": case.id,
                "family": case.family,
                "target": target,
                "call": 0,
                "status": "trace_error",
                "error": str(error)[:300],
            }
        ]
    ballasted = trace(case, target, ballast_patch(capacity, 2 * capacity)) if plain else []
    records = []
    for n, eqn in enumerate(plain):
        started = time.perf_counter()
        fits, text = verdict_of(compile_alone(eqn, device, side))
        call = CapturedCall(
            name=kernel_name(eqn),
            call_origin=None,
            invoke_origin=None,
            fits=fits,
            compiler_text=None,
            compile_seconds=0.0,
            **describe(eqn, None),
            **side.call_facts(eqn),
        )
        record = {
            "case": case.id,
            "family": case.family,
            "target": target,
            "call": n,
            "captured": dataclasses.asdict(call),
            "fits": fits,
            "form": None,
            "total": None,
            "total_source": None,
            "allocations": None,
            "status": "ok",
        }
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
            _, ballast_text = verdict_of(compile_alone(ballasted[n], device, side))
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
    from vmem_lsp.families import family_of

    eqns = trace(case, target, ballast_patch(None, TINY_LIMIT))
    _, text = verdict_of(compile_alone(eqns[n], device, family_of(target).worker()))
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
    except Exception as error:  # a crash of one case must not stop the run
        return [
            {
                "case": case_id,
                "family": case.family,
                "target": target,
                "call": 0,
                "status": "harness_error",
                "error": f"{type(error).__name__}: {error}"[:300],
            }
        ]


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
        op = next(
            (
                o
                for o in call.operands
                if o.role == role and o.operand == allocation["operand"] and o.role != "prefetch"
            ),
            None,
        )
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
    result = {
        "model_total": model_total,
        "model_fits": model_total <= limit,
        "allocations": [],
        "warned": layout.unseen_could_overflow(call, model_total, limit, record["target"]) is not None,
    }
    for a in record.get("allocations") or []:
        if a["kind"] in ("input_window", "output_window", "scratch") and a["space"] == "vmem":
            result["allocations"].append((a, model_allocation(costs, a, call)))
    if call.scoped:
        # What the body allocates (emit_pipeline windows, run_scoped entries) is listed as "scoped
        # memory for <kernel>", u8[n], with nothing that says which buffer it is: the listing and
        # the model's scoped costs are compared largest to largest.
        listed = sorted(
            (a for a in record.get("allocations") or [] if a["kind"] == "other" and a["space"] == "vmem"),
            key=lambda a: -a["size"],
        )
        modelled = sorted((c.bytes for c in costs if c.kind in layout.SCOPED_KINDS), reverse=True)
        if listed:
            result["allocations"] += [(a, modelled[n] if n < len(modelled) else None) for n, a in enumerate(listed)]
    return result


def same_printed(model: int | None, compiler: int) -> bool:
    """Equal as the compiler prints sizes ("3.91M"): its figures are no more precise than that."""
    return model is not None and format_size(model) == format_size(compiler)


def within(model: int, compiler: int) -> bool:
    return abs(model - compiler) <= max(TOTAL_TOLERANCE * compiler, TOTAL_SLACK)


def compiler_total(record: dict) -> int | None:
    """The compiler's VMEM total for `record`. E1001's "Scoped allocation with size X" is one
    scoped allocation, not always the kernel's total: with scopes inside the body it is the
    allocation that crossed the limit (pipeline-nested-f32-8192x4096-*: 64.00M, the outer
    pipeline, beside a ballast listing of 80.00M; v5e's pipeline-scoped-*-r2048: 32.00M of 96.00M
    listed, where v6e printed 96.00M; manualdma-f32-b1024x4096-c4 on v5e: 32.00M, the scratch alone,
    beside a 64.00M output window). When E1001's size falls short of what every compile must hold
    (the windows, scratch and scoped buffers the ballast run listed, spill slots aside) by more than
    the tolerance, the listing's sum is the total."""
    total = record["total"]
    listed = record.get("allocations")
    if record.get("form") == "scoped" and listed and total is not None:
        held = sum(a["size"] for a in listed if a["kind"] != "spill")
        if total < held and not within(total, held):
            return sum(a["size"] for a in listed)
    return total


def usable(record: dict) -> bool:
    """Records where the compiler gave a VMEM verdict (not a lowering or block-shape error)."""
    return record["status"] == "ok"


def summarize(records: list[dict], temporaries: bool = False) -> tuple[list[dict], list[str]]:
    """Rows of the per-chip table, and a line per disagreement: of issue 15's families, or with
    `temporaries` of issue 31's (families.BODY_TEMPORARIES), whose spills the model only bounds."""
    records = [r for r in records if (family(r) in families.BODY_TEMPORARIES) == temporaries]
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
                disagreements.append(
                    f"{target} {name}: verdict compiler={'fits' if r['fits'] else 'overflows'} "
                    f"model={'fits' if c['model_fits'] else 'overflows'} "
                    f"(compiler total {fmt(r['total'])}, model {fmt(c['model_total'])})"
                )
            for a, model in c["allocations"]:
                allocs += 1
                alloc_exact += same_printed(model, a["size"])
                if not same_printed(model, a["size"]):
                    what = f"{a['kind']} {a['operand'] if a['operand'] is not None else ''} {a['window'] or a['shape']}"
                    disagreements.append(f"{target} {name}: {what.strip()} compiler={a['size']} model={model}")
            total = compiler_total(r)
            if total is not None:
                totals += 1
                total_close += within(c["model_total"], total)
                if not within(c["model_total"], total):
                    disagreements.append(f"{target} {name}: total compiler={fmt(total)} model={fmt(c['model_total'])}")
        rows.append(
            {
                "chip": target,
                "records": len(mine),
                "cases": len(ok),
                "verdict": pct(verdicts, len(ok)),
                "allocations": allocs,
                "alloc_exact": pct(alloc_exact, allocs),
                "totals": totals,
                "total_close": pct(total_close, totals),
            }
        )
    return rows, disagreements


def pct(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None


def fmt(n: int | None) -> str:
    return "-" if n is None else f"{n} ({format_size(n)})"


def table(rows: list[dict]) -> str:
    lines = [
        "| chip | calls compiled | with a VMEM verdict | verdict agree % | allocations listed | "
        "exact bytes % | totals | total within 5% / 256K % |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['chip']} | {r['records']} | {r['cases']} | {r['verdict']} | {r['allocations']} | "
            f"{r['alloc_exact']} | {r['totals']} | {r['total_close']} |"
        )
    return "\n".join(lines)


def targets_met(rows: list[dict]) -> bool:
    return all(
        (r["verdict"] or 0) >= TARGETS_MET["verdict"]
        and (r["alloc_exact"] is None or r["alloc_exact"] >= TARGETS_MET["allocations"])
        and (r["total_close"] is None or r["total_close"] >= TARGETS_MET["total"])
        for r in rows
    )


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def select_cases(
    sample_size: int | None,
    skip_families: tuple[str, ...] = (),
    only: tuple[str, ...] = (),
    per_family: int | None = None,
) -> list[str]:
    """Case ids: all, `only` some families, a spread of `sample_size` over the families, or
    `per_family` of each (evenly strided within it)."""
    import model_corpus

    cases = [c for c in model_corpus.all_cases() if c.family not in skip_families and (not only or c.family in only)]
    if per_family:
        groups: dict[str, list] = {}
        for c in cases:
            groups.setdefault(c.family, []).append(c)
        cases = [c for members in groups.values() for c in model_corpus.sample(members, per_family)]
    return [c.id for c in (model_corpus.sample(cases, sample_size) if sample_size else cases)]


# ---- describing recorded calls again (no compiling) ------------------------------------


def retrace_job(job: tuple[str, str]) -> list[dict] | str:
    """The captured description of each pallas_call of one case on one target, traced again
    with today's capture (scoped buffers, unseen values, constant index maps)."""
    import model_corpus

    from vmem_lsp.compile.capture import describe
    from vmem_lsp.compile.kernels import kernel_name
    from vmem_lsp.families import family_of

    case_id, target = job
    case = next(c for c in model_corpus.all_cases() if c.id == case_id)
    try:
        eqns = trace(case, target)
    except Exception as error:
        return f"{type(error).__name__}: {error}"[:300]
    return [
        {
            "name": kernel_name(eqn),
            **dataclasses.asdict(
                CapturedCall(
                    name=kernel_name(eqn),
                    call_origin=None,
                    invoke_origin=None,
                    fits=False,
                    compiler_text=None,
                    compile_seconds=0.0,
                    **describe(eqn, None),
                    **family_of(target).worker().call_facts(eqn),
                )
            ),
        }
        for eqn in eqns
    ]


def retrace(records: list[dict], jobs: int) -> list[dict]:
    """Records with `captured` made again from a fresh trace; the compiler's facts (fits, total,
    allocations) and the recorded `fits`/`compiled` of each call are kept."""
    os.environ["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    work = sorted({(r["case"], r["target"]) for r in records if r.get("captured")})
    fresh = {}
    with ProcessPoolExecutor(jobs, initializer=worker_init) as pool:
        for i, (job, calls) in enumerate(zip(work, pool.map(retrace_job, work, chunksize=4))):
            fresh[job] = calls
            if i % 100 == 0:
                print(f"[{i + 1}/{len(work)}] retraced", file=sys.stderr, flush=True)
    out = []
    for r in records:
        calls = fresh.get((r["case"], r["target"]))
        if r.get("captured") and isinstance(calls, list) and r["call"] < len(calls):
            old = r["captured"]
            r = {
                **r,
                "captured": {
                    **calls[r["call"]],
                    **{k: old[k] for k in ("fits", "compiler_text", "compile_seconds", "compiled") if k in old},
                },
            }
        out.append(r)
    return out


# ---- held-out honesty: per family, leave one family out ----------------------------------
# The constants of internal_estimate were fitted by hand (families.FITTED_ON). Here they are
# fitted again by code, on the records of the families the model was written against, so that
# each of those families can be measured with constants fitted without it; the attention rule
# (one f32 score block, no constant to fit) was derived from flash alone, so holding flash out
# means holding out the rule. The families added after the model (families.HELD_OUT) are
# measured as they are: nothing was fitted on them.


def spill_bytes(record: dict) -> int:
    return sum(a["size"] for a in record.get("allocations") or [] if a["kind"] == "spill")


def spill_points(records: list[dict]) -> list[tuple[str, str, int, int]]:
    """(chip, family, accumulator bytes, spill bytes) of each record with a narrow dot into a 32-bit
    accumulator and a listing; attention kernels aside (their score block is another rule)."""
    points = []
    for r in records:
        if usable(r) and r.get("allocations") is not None:
            call = captured_call(r)
            acc = layout.accumulator_bytes(call)
            if acc and not layout.attention_scores_bytes(call):
                points.append((r["target"], family(r), acc, spill_bytes(r)))
    return points


def refit(
    records: list[dict] | None = None, points: list | None = None, without: str | None = None
) -> tuple[dict[str, float], dict[str, int]]:
    """SPILL_SHARE and NO_SPILL_UP_TO per chip, fitted on `records` (or their spill_points, less
    family `without`) the way layout.py's comments describe the hand fit: the largest accumulator
    that did not spill below every one that did; above it, spill = share * accumulator - the vector
    registers, share by least squares (the big accumulators weigh most, as they did by hand)."""
    points = spill_points(records) if points is None else points
    share, quiet = {}, {}
    for target in CHIPS:
        mine = [(acc, spill) for t, fam, acc, spill in points if t == target and fam != without]
        floor = min((acc for acc, spill in mine if spill), default=None)
        quiet[target] = max((acc for acc, spill in mine if not spill and (floor is None or acc < floor)), default=0)
        above = [(acc, spill) for acc, spill in mine if acc > quiet[target]]
        fitted = (
            sum((spill + layout.VREG_FILE_BYTES) * acc for acc, spill in above) / sum(acc * acc for acc, _ in above)
            if above
            else 0.0
        )
        share[target] = round(fitted, 2)
    return share, {t: q for t, q in quiet.items() if q}


# Live peaks below this say little about the share spilled (a few vregs more or less).
LIVE_POINT_FLOOR = 1 << 20


def live_points(records: list[dict]) -> list[tuple[str, str, int, int]]:
    """(chip, family, live peak, spill bytes) of each listed record whose body has values live
    across a whole-value op (capture.live_values) of at least LIVE_POINT_FLOOR, attention kernels
    aside (their score block is another rule)."""
    points = []
    for r in records:
        if usable(r) and r.get("allocations") is not None:
            call = captured_call(r)
            peak = layout.live_bytes(call)
            if peak >= LIVE_POINT_FLOOR and not layout.attention_scores_bytes(call):
                points.append((r["target"], family(r), peak, spill_bytes(r)))
    return points


# The chips every case of issue 31's families was compiled for; the other three ran a sample.
LIVE_FITTED_ON = ("v5e", "v6e")


def refit_live(points: list, without: str | None = None) -> tuple[float, float]:
    """LIVE_SPILL_LEAST and LIVE_SPILL_MOST the way layout.py's comments say they were read: the
    least share of the live peak spilled on LIVE_FITTED_ON, rounded down to a tenth, and the most
    on any chip, rounded up, over the fitted families' points but `without`'s."""
    least = [spill / peak for chip_, fam, peak, spill in points if fam != without and chip_ in LIVE_FITTED_ON]
    most = [spill / peak for _, fam, peak, spill in points if fam != without]
    if not most:
        return 0.0, 0.0
    return math.floor(min(least or most) * 10) / 10, math.ceil(max(most) * 10) / 10


class constants:
    """layout's fitted constants replaced for a while: `with constants(share, quiet, attention=False):`."""

    def __init__(
        self,
        share: dict | None = None,
        quiet: dict | None = None,
        attention: bool = True,
        live: tuple[float, float] | None = None,
    ):
        self.values = {
            "SPILL_SHARE": share,
            "NO_SPILL_UP_TO": quiet,
            "attention_scores_bytes": None if attention else (lambda call: 0),
            "LIVE_SPILL_LEAST": live[0] if live else None,
            "LIVE_SPILL_MOST": live[1] if live else None,
        }

    def __enter__(self):
        self.saved = {k: getattr(layout, k) for k in self.values}
        for k, v in self.values.items():
            if v is not None:
                setattr(layout, k, v)

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            setattr(layout, k, v)


def verdicts(records: list[dict]) -> dict:
    """Verdict agreement, and the model's "fits" that the compiler overturned: silent (no
    lower-bound warning from layout.unseen_could_overflow) or warned; and `noise`, the warnings
    on kernels the compiler fits."""
    n = agree = silent = warned = noise = totals = close = 0
    for r in records:
        if not usable(r):
            continue
        c = compare(r)
        n += 1
        agree += c["model_fits"] == r["fits"]
        if c["model_fits"] and not r["fits"]:
            warned += c["warned"]
            silent += not c["warned"]
        noise += c["model_fits"] and r["fits"] and c["warned"]
        if compiler_total(r) is not None:
            totals += 1
            close += within(c["model_total"], compiler_total(r))
    return {
        "cases": n,
        "agree": agree,
        "verdict": pct(agree, n),
        "silent": silent,
        "warned": warned,
        "noise": noise,
        "totals": totals,
        "total_close": pct(close, totals),
    }


def family_rows(records: list[dict]) -> list[dict]:
    """Per chip and family: verdicts with the constants as shipped and, for the families the model
    was written against, with the constants fitted without that family (leave one family out):
    the spill constants (`lofo`) and, for issue 31's fitted families, the live shares (`lofo_live`)."""
    points = spill_points([r for r in records if families.role(family(r)) != "held out"])
    fits = {fam: refit(points=points, without=fam) for fam in families.FAMILIES if families.role(fam) != "held out"}
    body = [r for r in records if family(r) in families.BODY_TEMPORARIES and families.role(family(r)) == "fitted"]
    shares = live_points(body)
    rows = []
    for target in sorted({r["target"] for r in records}, key=list(CHIPS).index):
        for fam in families.FAMILIES:
            mine = [r for r in records if r["target"] == target and family(r) == fam]
            if not mine:
                continue
            row = {
                "chip": target,
                "family": fam,
                "role": families.role(fam),
                **verdicts(mine),
                "lofo": None,
                "lofo_live": None,
            }
            if row["role"] != "held out":
                share, quiet = fits[fam]
                with constants(share, quiet, attention=fam != "flash"):
                    row["lofo"] = verdicts(mine)
            if row["role"] == "fitted" and fam in families.BODY_TEMPORARIES:
                with constants(live=refit_live(shares, without=fam)):
                    row["lofo_live"] = verdicts(mine)
            rows.append(row)
    return rows


def chip_summary(rows: list[dict], temporaries: bool = False) -> list[dict]:
    """Per chip: the families the model was written against with the shipped constants (training),
    the same families each measured with constants fitted without it (leave one family out), and
    the families added afterwards (held out); of issue 15's families, or with `temporaries` of
    issue 31's (their leave-one-family-out refits the live shares, where they were fitted)."""
    rows = [r for r in rows if (r["family"] in families.BODY_TEMPORARIES) == temporaries]
    out = []
    for target in dict.fromkeys(r["chip"] for r in rows):
        mine = [r for r in rows if r["chip"] == target]
        train = [r for r in mine if r["role"] != "held out"]
        held = [r for r in mine if r["role"] == "held out"]

        def pooled(parts):
            n, agree = sum(p["cases"] for p in parts), sum(p["agree"] for p in parts)
            return {
                "cases": n,
                "verdict": pct(agree, n),
                "silent": sum(p["silent"] for p in parts),
                "warned": sum(p["warned"] for p in parts),
                "noise": sum(p["noise"] for p in parts),
            }

        out.append(
            {
                "chip": target,
                "training": pooled(train),
                "lofo": pooled([r["lofo_live"] or r["lofo"] for r in train]),
                "held_out": pooled(held),
            }
        )
    return out


def temporaries_table(summary: list[dict]) -> str:
    """Issue 31's families per chip: verdicts, "fits" overturned silently or warned, and warnings
    on kernels that fit (the rule's noise)."""
    return summary_table(summary, noise=True)


def summary_table(summary: list[dict], noise: bool = False) -> str:
    """Per chip: the fitted families, leave-one-family-out and the held-out ones; with `noise`,
    the warnings on kernels that fit too."""
    warned = " | warned that fit" if noise else ""
    lines = [
        f"| chip | {'fitted' if noise else 'training'}: cases | verdict % | silent fits (warned){warned} | "
        f"leave-one-family-out: verdict % | silent fits (warned) | held out: cases | verdict % | "
        f"silent fits (warned){warned} |",
        "|" + " --- |" * (11 if noise else 9),
    ]
    for s in summary:
        t, lo, h = s["training"], s["lofo"], s["held_out"]
        extra = (lambda part: f" | {part['noise']}") if noise else (lambda part: "")
        lines.append(
            f"| {s['chip']} | {t['cases']} | {t['verdict']} | {t['silent']} ({t['warned']}){extra(t)} | "
            f"{lo['verdict']} | {lo['silent']} ({lo['warned']}) | {h['cases']} | {h['verdict']} | "
            f"{h['silent']} ({h['warned']}){extra(h)} |"
        )
    return "\n".join(lines)


def family_table(rows: list[dict]) -> str:
    """Families down, chips across: "verdict % of cases (totals within 5% / 256K %), silent/warned",
    and the leave-one-family-out verdict % where it differs."""
    chips = list(dict.fromkeys(r["chip"] for r in rows))
    lines = [
        "| family | role | " + " | ".join(chips) + " |",
        "| --- | --- | " + " | ".join("---" for _ in chips) + " |",
    ]
    for fam in dict.fromkeys(r["family"] for r in rows):
        cells = []
        for target in chips:
            r = next((r for r in rows if r["chip"] == target and r["family"] == fam), None)
            if r is None or not r["cases"]:
                cells.append("-")
                continue
            cell = f"{r['verdict']} of {r['cases']} (totals {r['total_close']})"
            if r["silent"] or r["warned"]:
                cell += f", {r['silent']} silent / {r['warned']} warned"
            if r["noise"] and fam in families.BODY_TEMPORARIES:
                cell += f", {r['noise']} warned that fit"
            lofo = r["lofo_live"] or r["lofo"]
            if lofo and (lofo["verdict"], lofo["silent"]) != (r["verdict"], r["silent"]):
                cell += f" (LOFO {lofo['verdict']}, {lofo['silent']} silent / {lofo['warned']} warned)"
            cells.append(cell)
        lines.append(f"| {fam} | {families.role(fam)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def overturned(records: list[dict]) -> list[str]:
    """Every model "fits" the compiler overturned, with what the model missed."""
    lines = []
    for r in records:
        if not usable(r):
            continue
        c = compare(r)
        if c["model_fits"] and not r["fits"]:
            call = captured_call(r)
            limit = min(call.vmem_limit_bytes or chip(r["target"]).scoped_limit, chip(r["target"]).capacity)
            unseen = layout.unseen_could_overflow(call, c["model_total"], limit, r["target"])
            lines.append(
                f"{r['target']} {r['case']} [{family(r)}]: model {fmt(c['model_total'])} <= limit {fmt(limit)}, "
                f"compiler {fmt(compiler_total(r))}, spill {fmt(spill_bytes(r))}; "
                + (f"warned: {unseen.what}" if unseen else "SILENT")
            )
    return lines


def held_out_met(summary: list[dict], rows: list[dict]) -> bool:
    """Issue 15's target: >= 99% verdict agreement per chip on held-out families, no silent fit."""
    return all(
        (s["held_out"]["verdict"] or 0) >= HELD_OUT_TARGET for s in summary if s["held_out"]["cases"]
    ) and not any(r["silent"] for r in rows if r["role"] == "held out")


HELD_OUT_TARGET = 99.0


def without_live(record: dict) -> dict:
    """`record` as the capture before issue 31 described it: no live values of the body."""
    if not record.get("captured"):
        return record
    unseen = [u for u in record["captured"].get("unseen", ()) if u.get("kind") != "live"]
    return {**record, "captured": {**record["captured"], "unseen": unseen}}


def merge(old: list[dict], new: list[dict]) -> list[dict]:
    """`old` with every (case, target) that `new` measured replaced by its new records."""
    done = {(r["case"], r["target"]) for r in new}
    return [r for r in old if (r["case"], r["target"]) not in done] + new


def write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="source", type=Path, help="recompute the table from recorded JSON lines")
    parser.add_argument("--sample", type=int, help="a deterministic sample of N cases")
    parser.add_argument("--per-family", type=int, help="a deterministic sample of N cases of each family")
    parser.add_argument("--families", help="comma-separated families (bench/families.py)")
    parser.add_argument("--targets", default=",".join(CHIPS), help="comma-separated chips")
    parser.add_argument("--jobs", type=int, default=1, help="compile processes")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the JSON lines")
    parser.add_argument(
        "--merge", action="store_true", help="keep --out's other records: replace only the (case, chip) pairs run now"
    )
    parser.add_argument(
        "--retrace",
        action="store_true",
        help="with --from: describe every recorded call again from a fresh trace, no compiling; writes --out",
    )
    parser.add_argument("--cases", help="comma-separated case ids (instead of --sample)")
    parser.add_argument(
        "--no-live",
        action="store_true",
        help="the model as it was before issue 31: the body's live values (capture.live_values) unseen",
    )
    args = parser.parse_args(argv)
    if args.source:
        records = load(args.source)
        if args.retrace:
            started = time.time()
            records = retrace(records, args.jobs)
            write(args.out, records)
            print(f"# retraced {len(records)} records, {time.time() - started:.0f} s", file=sys.stderr)
    else:
        only = tuple(args.families.split(",")) if args.families else ()
        ids = args.cases.split(",") if args.cases else select_cases(args.sample, only=only, per_family=args.per_family)
        started = time.time()
        out = args.out.with_suffix(".run.jsonl") if args.merge else args.out
        records = run(ids, [chip(t).name for t in args.targets.split(",")], args.jobs, out)
        print(
            f"# {len(ids)} cases, {time.time() - started:.0f} s, {datetime.date.today()}, "
            f"{platform.machine()} {os.cpu_count()} cores",
            file=sys.stderr,
        )
        if args.merge:
            records = merge(load(args.out) if args.out.exists() else [], records)
            write(args.out, records)
            out.unlink()
    if args.no_live:
        records = [without_live(r) for r in records]
    rows, disagreements = summarize(records)
    print(table(rows))
    print(f"\n{len(disagreements)} disagreements")
    for line in disagreements:
        print("  " + line)
    fam_rows = family_rows(records)
    summary = chip_summary(fam_rows)
    share, quiet = refit([r for r in records if families.role(family(r)) != "held out"])
    print("\n" + summary_table(summary))
    print("\n" + family_table(fam_rows))
    print(
        f"\nconstants fitted by code on the training families: SPILL_SHARE {share}, NO_SPILL_UP_TO {quiet}"
        f"\n  (layout.py, by hand: SPILL_SHARE {layout.SPILL_SHARE}, NO_SPILL_UP_TO {layout.NO_SPILL_UP_TO})"
    )
    body_rows, _ = summarize(records, temporaries=True)
    body = chip_summary(fam_rows, temporaries=True)
    if body_rows:
        least, most = refit_live(live_points([r for r in records if families.role(family(r)) == "fitted"]))
        print("\nBody temporaries (issue 31: families.BODY_TEMPORARIES)\n" + table(body_rows))
        print("\n" + temporaries_table(body))
        print(
            f"\nlive shares fitted by code on the fitted families: LIVE_SPILL_LEAST {least}, LIVE_SPILL_MOST {most}"
            f"\n  (layout.py, by hand: {layout.LIVE_SPILL_LEAST}, {layout.LIVE_SPILL_MOST})"
        )
    lines = overturned(records)
    print(f"\n{len(lines)} model fits the compiler overturned")
    for line in lines:
        print("  " + line)
    never_silent = not any(r["silent"] for r in fam_rows)
    return 0 if targets_met(rows) and held_out_met(summary, fam_rows) and never_silent else 1


if __name__ == "__main__":
    sys.exit(main())
