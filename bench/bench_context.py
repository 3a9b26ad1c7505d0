"""Each pallas_call compiled alone (as the worker does) against the whole example compiled as
one program (issue 15, item 6).

For each `# vmem:` example of a corpus (examples/*.py, tests/data/kernels/*.py whose examples
trace, copies of jax's ops kernels with the examples of tests/jax_ops.py, and PROBES below) and
each chip, at the compiler's default limits:

  alone    each pallas_call compiled alone, lowered as the worker lowers it (compile_call mirrors
           vmem_lsp.compile.kernels.lower_and_compile, keeping the compiled HLO);
  context  the example function jitted as one program (`jax.jit(run).lower(*shapes).compile()`).

The figure of each side is the kernel's scoped VMEM: `used_scoped_memory_configs` (memory space 1)
of its tpu_custom_call in the compiled HLO when it compiles, else E1001's "Scoped allocation with
size X", else the physical report's "Used" (one-kernel examples only). No lowered limit, no ballast:
a ballast fills VMEM and a tiny limit makes E1001 name only the first allocation, and either would
hide what XLA does around the call (keep a whole operand in VMEM, layout S(1), so that its window
is not allocated). The HLO also says which operands and results are held so, on each side.
A third compile, alone with bench/model_harness.py's ballast (an ignored capacity-sized input,
vmem_limit_bytes at twice the capacity), lists the kernel's windows, to name what differs.

Usage (from the repository root):
    .venv/bin/python bench/bench_context.py                       # everything, all chips (~27 min)
    .venv/bin/python bench/bench_context.py --targets v5e --only add_fits
    .venv/bin/python bench/bench_context.py --from bench/context_results.jsonl   # the tables again
    .venv/bin/python bench/bench_context.py --child FILE --out OUT.jsonl          # one file, no table

Each file runs in its own process (a time limit; user kernels may misbehave). Compiles run one at
a time. Results: bench/context_results.jsonl, one line per (example, kernel, chip).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "context_results.jsonl"
TARGETS = ("v4", "v5e", "v5p", "v6e", "v7x")
# Examples in tests/data/kernels that misbehave on purpose (hang, exit, crash, hoard memory).
MISBEHAVING = ("hangs(", "exits(", "segfaults(", "allocates(", "floods(", "spin(")
FILE_TIMEOUT = 1500


# ---- the corpus ---------------------------------------------------------------------------

# Constructed cases: what the program around a call could change. One add kernel, f32[512, 2048]
# blocks (4 MiB a window, 8 MiB double buffered, 24 MiB in all: over 16 MiB of scoped VMEM on
# v5e/v5p and of physical VMEM on v4, within 32 MiB on v6e/v7x), fed by XLA producers, constants,
# slices, aliasing, with and without allow_input_fusion (which lets XLA fuse a producer into the
# call's operand), its result consumed by XLA; arrays of 64 MiB and of 16 MiB.
PROBES = '''"""bench_context.py's constructed cases (written to a temporary folder)."""
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...].astype(o_ref.dtype) + y_ref[...].astype(o_ref.dtype)


def add(x, y, rows=512, fusion=None, alias=None):
    n, m = y.shape
    return pl.pallas_call(
        add_kernel,
        out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype),
        grid=(n // rows,),
        in_specs=[pl.BlockSpec((rows, m), lambda i: (i, 0))] * 2,
        out_specs=pl.BlockSpec((rows, m), lambda i: (i, 0)),
        input_output_aliases=alias or {},
        compiler_params=pltpu.CompilerParams(allow_input_fusion=fusion) if fusion else None,
    )(x, y)


# vmem: plain(f32[8192, 2048], f32[8192, 2048])
def plain(x, y):
    return add(x, y)


# vmem: produced(f32[8192, 2048])
def produced(x):
    return add(x * 2 + 1, x)


# vmem: constant_input(f32[8192, 2048])
def constant_input(x):
    return add(jnp.zeros_like(x), x)


# vmem: same_twice(f32[8192, 2048])
def same_twice(x):
    return add(x, x)


# vmem: aliased(f32[8192, 2048], f32[8192, 2048])
def aliased(x, y):
    return add(x, y, alias={0: 0})


# vmem: in_a_row(f32[8192, 2048], f32[8192, 2048])
def in_a_row(x, y):
    return add(add(x, y), y)


# vmem: fused_producer(f32[8192, 2048])
def fused_producer(x):
    return add(x * 2 + 1, x, fusion=[True, False])


# vmem: fused_constant(f32[8192, 2048])
def fused_constant(x):
    return add(jnp.zeros_like(x), x, fusion=[True, False])


# vmem: fused_broadcast(f32[1, 2048], f32[8192, 2048])
def fused_broadcast(b, y):
    return add(jnp.broadcast_to(b, y.shape), y, fusion=[True, False])


# vmem: fused_transpose(f32[2048, 8192], f32[8192, 2048])
def fused_transpose(x, y):
    return add(x.T, y, fusion=[True, False])


# vmem: fused_convert(bf16[8192, 2048], f32[8192, 2048])
def fused_convert(x, y):
    return add(x.astype(jnp.float32), y, fusion=[True, False])


# vmem: fused_slices(f32[8192, 4096])
def fused_slices(x):
    return add(x[:, :2048], x[:, 2048:], fusion=[True, True])


# vmem: consumed(f32[8192, 2048], f32[8192, 2048])
def consumed(x, y):
    return add(x, y) * 2


# Arrays of 16 MiB (the same 4 MiB windows, 24 MiB in all): small enough to be held whole
# in the VMEM of every chip but v4.
# vmem: small_plain(f32[2048, 2048], f32[2048, 2048])
def small_plain(x, y):
    return add(x, y)


# vmem: small_produced(f32[2048, 2048])
def small_produced(x):
    return add(x * 2 + 1, x)


# vmem: small_consumed(f32[2048, 2048], f32[2048, 2048])
def small_consumed(x, y):
    return add(x, y) * 2


# vmem: small_in_a_row(f32[2048, 2048], f32[2048, 2048])
def small_in_a_row(x, y):
    return add(add(x, y), y)
'''


def corpus(folder: Path, probes: bool = True) -> list[Path]:
    sys.path.insert(0, str(ROOT / "tests"))
    from support.jax_ops import EXAMPLES, copy_with_example

    files = sorted((ROOT / "examples").glob("*.py")) + sorted((ROOT / "tests/data/kernels").glob("*.py"))
    files += [copy_with_example(name, example, folder) for name, example in EXAMPLES.items()]
    if probes:
        (folder / "probes.py").write_text(PROBES)
        files.append(folder / "probes.py")
    return files


# ---- inside the child: one file, every example and chip -------------------------------------


def ballast_patch(capacity: int):
    """pl.pallas_call with an extra ignored input of `capacity` bytes (f32, Buffered(1), constant
    index map) and vmem_limit_bytes=2*capacity."""
    import jax.numpy as jnp
    from jax._src.pallas import core as pallas_core
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    original = pl.pallas_call
    limit = 2 * capacity
    shape = (capacity // 512, 128)

    def with_limit(params):
        if params is None:
            return pltpu.CompilerParams(vmem_limit_bytes=limit)
        if isinstance(params, dict):
            return {k: with_limit(v) for k, v in params.items()}
        return dataclasses.replace(params, vmem_limit_bytes=limit)

    def pallas_call(kernel, out_shape=None, *, grid_spec=None, in_specs=pallas_core.no_block_spec, **kwargs):
        kwargs["compiler_params"] = with_limit(kwargs.get("compiler_params"))
        spec = pl.BlockSpec(shape, lambda *ids: (0, 0), pipeline_mode=pl.Buffered(1))

        def invoke(*args):
            position = len(args)

            def kernel_without_ballast(*refs, **kw):
                return kernel(*refs[:position], *refs[position + 1 :], **kw)

            kernel_without_ballast.__name__ = getattr(kernel, "__name__", "kernel")
            prefetch = getattr(grid_spec, "num_scalar_prefetch", 0) if grid_spec is not None else 0

            def with_ballast(specs):
                if specs is pallas_core.no_block_spec:
                    specs = [pl.BlockSpec()] * (len(args) - prefetch)
                return (*specs, spec)

            if grid_spec is not None:
                grid = pltpu.PrefetchScalarGridSpec(
                    num_scalar_prefetch=prefetch,
                    grid=grid_spec.grid,
                    in_specs=with_ballast(grid_spec.in_specs),
                    out_specs=grid_spec.out_specs,
                    scratch_shapes=grid_spec.scratch_shapes,
                )
                call = original(kernel_without_ballast, out_shape, grid_spec=grid, **kwargs)
            else:
                call = original(kernel_without_ballast, out_shape, in_specs=with_ballast(in_specs), **kwargs)
            return call(*args, jnp.zeros(shape, jnp.float32))

        return invoke

    return pallas_call, shape


@contextlib.contextmanager
def patched(patch):
    import jax
    from jax.experimental import pallas as pl

    original = pl.pallas_call
    jax.clear_caches()  # jitted kernels (matmul's) would reuse the other variant's trace
    pl.pallas_call = patch
    try:
        yield
    finally:
        pl.pallas_call = original
        jax.clear_caches()


def compile_whole(call_text: str, namespace: dict, device) -> tuple[bool, str | None, str | None, float]:
    """The example function jitted as one program and compiled for `device`:
    (fits, compiler error text, compiled HLO text, seconds)."""
    import jax

    from vmem_lsp.compile.tracing import example_function

    run, shapes = example_function(call_text, namespace, device)
    return _compiled(lambda: jax.jit(run).lower(*shapes), device)


def compile_call(eqn, device) -> tuple[bool, str | None, str | None, float]:
    """One pallas_call alone, lowered exactly as kernels.lower_and_compile lowers it (the worker's way),
    keeping the compiled HLO (the worker keeps only the verdict)."""
    import jax
    from jax.sharding import SingleDeviceSharding

    from vmem_lsp.compile.capture import pallas_call_p
    from vmem_lsp.compile.kernels import kernel_name, named

    sharding = SingleDeviceSharding(device)
    args = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype, sharding=sharding) for v in eqn.invars]
    params = eqn.params
    return _compiled(
        lambda: jax.jit(named(kernel_name(eqn), lambda *a: pallas_call_p.bind(*a, **params))).lower(*args), device
    )


def _compiled(lower, device):
    import jax

    started = time.perf_counter()
    try:
        with jax.default_device(device):
            compiled = lower().compile()
        return True, None, compiled.as_text(), time.perf_counter() - started
    except Exception as error:  # the compiler's verdict, whatever its type
        return False, str(error), None, time.perf_counter() - started


# ---- reading what the compiler did -------------------------------------------------------------

CUSTOM_CALL = re.compile(
    r"^\s*(?:ROOT )?%([\w.\-]+) = (\(.*?\)|\S+) custom-call\(([^)]*)\).*?custom_call_target=\"tpu_custom_call\"", re.S
)
COMMENT = re.compile(r"/\*.*?\*/")
INSTRUCTION_START = re.compile(r"\n(?=\s*(?:ROOT )?%[\w.\-]+ = |\}[ \t]*(?:\n|$))")
DEFINITION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (\([^=]*?\)|\S+) ")
USED_SCOPED = re.compile(r'"used_scoped_memory_configs":\[(.*?)\]')
SCOPED_CONFIG = re.compile(r'"memory_space":"(\d+)","offset":"\d+","size":"(\d+)"')
BODY = re.compile(r'"body":"([^"]*)"')
CONSTRAINTS = re.compile(r"operand_layout_constraints=\{(.*?)\}, ")
E1001_CALL = re.compile(r"allocating on stack for %([\w.\-]+) = (\S+) custom-call\(([^)]*)\)")
TYPE = re.compile(r"^(\w+\[[\d,]*\])")


def custom_calls(hlo: str) -> list[dict]:
    """Each tpu_custom_call of a compiled module: its scoped VMEM (used_scoped_memory_configs,
    memory space 1), which operands and whether its result live in VMEM (layout S(1): XLA placed
    the whole array there), and a key to match it with the same kernel compiled elsewhere."""
    # One chunk per instruction: a custom call's attributes (kernel_metadata) may span lines.
    chunks = INSTRUCTION_START.split(hlo)
    layouts = {}
    for line in chunks:
        m = DEFINITION.match(line)
        if m:
            layouts[m[1]] = m[2]
    calls = []
    for line in chunks:
        m = CUSTOM_CALL.match(line)
        if not m:
            continue
        used = USED_SCOPED.search(line)
        scoped = sum(int(size) for space, size in SCOPED_CONFIG.findall(used[1]) if space == "1") if used else None
        operands = [COMMENT.sub("", o).strip().lstrip("%") for o in m[3].split(",") if o.strip()]
        body = BODY.search(line)
        constraints = CONSTRAINTS.search(line)
        calls.append(
            {
                "instruction": m[1],
                "scoped": scoped,
                "operands": operands,
                "operands_in_vmem": [i for i, o in enumerate(operands) if "S(1)" in layouts.get(o, "")],
                "result_in_vmem": "S(1)" in m[2],
                "key": hashlib.sha256(body[1].encode()).hexdigest()[:16] if body else None,
                "signature": signature(m[2], constraints[1] if constraints else ""),
            }
        )
    return calls


def signature(result: str, constraints: str) -> str:
    t = TYPE.match(result)
    return f"{t[1] if t else result} <- {constraints}"


def side(fits: bool, error: str | None, hlo: str | None) -> dict:
    """A compile's verdict and the figure it gives: the kernel's scoped VMEM when it compiled
    (used_scoped_memory_configs), E1001's "Scoped allocation with size X", or the physical
    report's "Used" (the program's)."""
    from vmem_lsp.tpu.parse import parse_report

    if fits:
        return {"verdict": "fits", "calls": custom_calls(hlo or "")}
    report = parse_report(error or "")
    out = {
        "verdict": {"scoped": "over scoped", "physical": "over physical", "single_allocation": "over physical"}.get(
            report.form, report.form
        ),
        "used": report.used,
        "limit": report.limit,
    }
    if report.form == "scoped":
        m = E1001_CALL.search(report.text)
        constraints = CONSTRAINTS.search(report.text)
        if m:
            out["instruction"], out["operands"] = m[1], [o.strip().lstrip("%") for o in m[3].split(",")]
            out["signature"] = signature(m[2], constraints[1] if constraints else "")
    if report.form in ("unknown", "block_shape"):
        out["text"] = (error or "")[:400]
    return out


def identity(alone: dict) -> tuple[str | None, str | None]:
    """(Mosaic body key, signature) of a call from its alone compile, as far as it tells."""
    if alone["verdict"] == "fits":
        calls = alone.get("calls") or []
        return (calls[0]["key"], calls[0]["signature"]) if len(calls) == 1 else (None, None)
    return None, alone.get("signature")


def figure(s: dict, alone: dict | None, calls: int, rank: int = 0) -> tuple[int | None, dict | None]:
    """The kernel's scoped VMEM on one side, and the custom call it was read from. On the whole
    program's side the call is the one with the alone call's key (its Mosaic body), else its
    signature (result and operand types), the rank-th of those when the example calls the same
    kernel several times; a physical "Used" counts only for one-kernel examples."""
    if s["verdict"] == "fits":
        if alone is None:
            return (s["calls"][0]["scoped"], s["calls"][0]) if len(s["calls"]) == 1 else (None, None)
        key, sig = identity(alone)
        same = [c for c in s["calls"] if key and c["key"] == key] or [
            c for c in s["calls"] if sig and c["signature"] == sig
        ]
        if not same and calls == 1 and len(s["calls"]) == 1:
            same = s["calls"]
        found = same[min(rank, len(same) - 1)] if same else None
        return (found["scoped"], found) if found else (None, None)
    if s["verdict"] == "over scoped":
        if calls == 1 or alone is None:
            return s.get("used"), None
        _, sig = identity(alone)
        return (s.get("used"), None) if sig and sig == s.get("signature") and rank == 0 else (None, None)
    if s["verdict"] == "over physical" and (calls == 1 or alone is None):
        return s.get("used"), None
    return None, None


def derive(records: list[dict]) -> list[dict]:
    """The figures and what differs, from each record's compiles (kept raw in the results)."""
    seen: dict[tuple, int] = {}
    for r in records:
        if r.get("status") != "ok":
            continue
        rank_key = (r["file"], r["line"], r["chip"], identity(r["alone"]))
        rank = seen.get(rank_key, 0)
        seen[rank_key] = rank + 1
        r["alone_figure"], _ = figure(r["alone"], None, 1)
        r["whole_figure"], r["whole_call"] = figure(r["whole"], r["alone"], r["calls"], rank)
        r["differs"] = explain(r)
    return records


def windows(fits: bool, error: str | None, ballast_shape) -> list[dict] | None:
    """The kernel's allocations compiled alone with the ballast (the physical listing), ballast out."""
    from vmem_lsp.tpu.parse import parse_report

    if fits:
        return None
    report = parse_report(error or "")
    if report.form != "physical":
        return None
    out = []
    for a in report.allocations:
        if (
            a.kind == "input_window"
            and a.window_shape is not None
            and tuple(a.window_shape.dims) == tuple(ballast_shape)
        ):
            continue
        out.append(
            {
                "kind": a.kind,
                "operand": a.operand_index,
                "size": a.size,
                "window": str(a.window_shape) if a.window_shape else None,
                "buffers": a.buffers,
            }
        )
    return out


def held(call: dict | None, allocations: list[dict], prefetch: int) -> dict[str, int]:
    """{"input N" / "output": the window bytes it has in the ballast listing} for each operand (and
    the result) that a compiled program holds whole in VMEM (layout S(1)), so needs no window."""
    found = {}
    for i in (call or {}).get("operands_in_vmem", []):
        if i >= prefetch:
            found[f"input {i - prefetch}"] = sum(
                a["size"] for a in allocations if a["kind"] == "input_window" and a["operand"] == i - prefetch
            )
    if (call or {}).get("result_in_vmem"):
        found["output"] = sum(a["size"] for a in allocations if a["kind"] == "output_window")
    return found


def explain(record: dict) -> list[str]:
    """What differs: the operands (and result) XLA held whole in VMEM in context and not alone,
    with the window each has in the ballast listing; those held on both sides; or, when the
    program did not compile, the operands the E1001 text names from a copy-done (an operand XLA
    prefetched into VMEM)."""
    allocations = record.get("alone_allocations") or []
    prefetch = record.get("prefetch", 0)
    alone_calls = record["alone"].get("calls") or []
    alone = held(alone_calls[0] if alone_calls else None, allocations, prefetch)
    whole = held(record.get("whole_call"), allocations, prefetch)
    words = [f"{k} held in VMEM in context only (window {mib(v)})" for k, v in whole.items() if k not in alone]
    words += [f"{k} held in VMEM alone only (window {mib(v)})" for k, v in alone.items() if k not in whole]
    both = [f"{k} ({mib(v)})" for k, v in alone.items() if k in whole]
    if both:
        words.append("held in VMEM on both sides: " + ", ".join(both))
    for name, s in (("alone", record["alone"]), ("in context", record["whole"])):
        if s.get("verdict") == "over scoped" and s.get("operands"):
            named = [
                f"input {i - prefetch}" for i, o in enumerate(s["operands"]) if i >= prefetch and o.startswith("copy")
            ]
            if named:
                words.append(f"{name}, E1001 names {', '.join(named)} as copied into VMEM")
    return words


def measure_example(example, namespace: dict, target: str) -> list[dict]:
    from vmem_lsp.compile.devices import target_device
    from vmem_lsp.compile.kernels import kernel_name
    from vmem_lsp.compile.tracing import trace_example
    from vmem_lsp.tpu.chips import chip

    device = target_device(target)
    path = os.path.abspath(example.path)
    base = {
        "file": os.path.relpath(path, ROOT)
        if path.startswith(str(ROOT) + os.sep)
        else ("probes.py" if os.path.basename(path) == "probes.py" else "jax_ops/" + os.path.basename(path)),
        "line": example.line,
        "example": example.text,
        "chip": target,
    }
    started = time.perf_counter()
    try:
        eqns = trace_example(example.text, namespace, device)
    except Exception as error:
        return [{**base, "status": "no_trace", "error": f"{type(error).__name__}: {error}"[:300]}]
    if not eqns:
        return [{**base, "status": "no_kernel"}]
    alone = [compile_call(e, device) for e in eqns]
    whole = compile_whole(example.text, namespace, device)
    patch, shape = ballast_patch(chip(target).capacity)
    with patched(patch):
        try:
            eqns_b = trace_example(example.text, namespace, device)
        except Exception:
            eqns_b = []
        listed = [compile_call(e, device) for e in eqns_b]
    whole_side = side(*whole[:3])
    records = []
    for n, eqn in enumerate(eqns):
        alone_side = side(*alone[n][:3])
        record = {
            **base,
            "status": "ok",
            "kernel": kernel_name(eqn),
            "call": n,
            "calls": len(eqns),
            "prefetch": eqn.params["grid_mapping"].num_index_operands,
            "alone": alone_side,
            "whole": whole_side,
            "alone_allocations": windows(*listed[n][:2], shape) if n < len(listed) else None,
            "alone_seconds": round(alone[n][3], 2),
            "whole_seconds": round(whole[3], 2),
        }
        records.append(record)
    records[-1]["seconds"] = round(time.perf_counter() - started, 2)
    return records


def child(path: str, targets: list[str], out: str, only: str | None) -> None:
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from vmem_lsp.compile.worker import Worker
    from vmem_lsp.source.directives import find_examples

    worker = Worker()  # installs provenance before the user module is imported
    examples, _ = find_examples(Path(path).read_text(), path)
    examples = [
        e for e in examples if not e.text.startswith(MISBEHAVING) and (only is None or only in e.text or only in path)
    ]
    if not examples:
        return
    try:
        namespace = vars(worker.load_module(path, None, None))
    except BaseException as error:
        with open(out, "a") as stream:
            stream.write(json.dumps({"file": path, "status": "no_import", "error": str(error)[:300]}) + "\n")
        return
    for example in examples:
        for target in targets:
            try:
                records = measure_example(example, namespace, target)
            except Exception as error:
                records = [
                    {
                        "file": path,
                        "line": example.line,
                        "example": example.text,
                        "chip": target,
                        "status": "harness_error",
                        "error": f"{type(error).__name__}: {error}"[:300],
                    }
                ]
            with open(out, "a") as stream:
                for r in records:
                    stream.write(json.dumps(r) + "\n")


# ---- the table ------------------------------------------------------------------------------


def mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.2f}M"


def flips(r: dict) -> bool:
    return r["alone"]["verdict"] != r["whole"]["verdict"]


def diff(r: dict) -> int | None:
    a, w = r.get("alone_figure"), r.get("whole_figure")
    return a - w if a is not None and w is not None else None


def table(records: list[dict]) -> str:
    rows = [r for r in records if r.get("status") == "ok"]
    lines = [
        "| example | kernel | chip | alone | in context | alone - in context | what differs |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        d = diff(r)
        lines.append(
            f"| {Path(r['file']).name}:{r['line']} {r['example'].split('(')[0]} | {r['kernel']} | {r['chip']} "
            f"| {r['alone']['verdict']} {mib(r['alone_figure'])} | {r['whole']['verdict']} {mib(r['whole_figure'])} "
            f"| {mib(d) if d is not None else '-'}{' FLIP' if flips(r) else ''} | {'; '.join(explain(r))} |"
        )
    return "\n".join(lines)


def per_chip(records: list[dict]) -> str:
    rows = [r for r in records if r.get("status") == "ok"]
    lines = [
        "| chip | cases | verdict flips | both figures | differ | diff min / median / max (alone - in context) | largest relative |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for target in TARGETS:
        mine = [r for r in rows if r["chip"] == target]
        if not mine:
            continue
        both = [r for r in mine if diff(r) is not None]
        diffs = [diff(r) for r in both]
        rel = max((diff(r) / r["alone_figure"] for r in both if r["alone_figure"]), default=None)
        spread = f"{mib(min(diffs))} / {mib(int(statistics.median(diffs)))} / {mib(max(diffs))}" if diffs else "-"
        lines.append(
            f"| {target} | {len(mine)} | {sum(map(flips, mine))} | {len(both)} | {sum(1 for d in diffs if d)} "
            f"| {spread} | {'-' if rel is None else f'{100 * rel:.0f}%'} |"
        )
    return "\n".join(lines)


def others(records: list[dict]) -> str:
    bad = [r for r in records if r.get("status") != "ok"]
    return "\n".join(
        f"- {r.get('file')}:{r.get('line', '')} {r.get('chip', '')} {r['status']}: {(r.get('error') or '')[:120]}"
        for r in bad
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--only", help="examples whose text or file contains this")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--from", dest="source", type=Path, help="print the table of a results file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    targets = args.targets.split(",")
    if args.child:
        child(args.child, targets, str(args.out), args.only)
        return 0
    if args.source:
        records = derive([json.loads(line) for line in args.source.read_text().splitlines() if line.strip()])
    else:
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="vmem-context-") as folder:
            partial = Path(folder) / "results.jsonl"
            for path in corpus(Path(folder)):
                print(f"{path.name} ...", file=sys.stderr, flush=True)
                try:
                    subprocess.run(
                        [
                            sys.executable,
                            __file__,
                            "--child",
                            str(path),
                            "--targets",
                            args.targets,
                            "--out",
                            str(partial),
                        ]
                        + (["--only", args.only] if args.only else []),
                        timeout=FILE_TIMEOUT,
                        cwd=ROOT,
                        stdout=subprocess.DEVNULL,
                    )
                except subprocess.TimeoutExpired:
                    with open(partial, "a") as stream:
                        stream.write(json.dumps({"file": str(path), "status": "timeout"}) + "\n")
            records = [json.loads(line) for line in partial.read_text().splitlines()] if partial.exists() else []
        derive(records)
        args.out.write_text("".join(json.dumps(r) + "\n" for r in records))
        print(f"{len(records)} records in {time.perf_counter() - started:.0f} s -> {args.out}", file=sys.stderr)
    print(table(records))
    print()
    print("All cases:")
    print(per_chip(records))
    for name, keep in (
        ("The corpus (no probes):", lambda r: r.get("file") != "probes.py"),
        ("The probes:", lambda r: r.get("file") == "probes.py"),
    ):
        print()
        print(name)
        print(per_chip([r for r in records if keep(r)]))
    if others(records):
        print()
        print(others(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
