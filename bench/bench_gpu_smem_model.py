"""Triton's and Mosaic GPU's shared memory: the model (vmem_lsp/gpu/layout.py,
estimated_shared_memory) against XLA's GPU compiler, kernel by kernel (issue 33, item 3).

    .venv/bin/python bench/bench_gpu_smem_model.py [--targets h100,h200,a100,l4,b200] [--verify 3]
    .venv/bin/python bench/bench_gpu_smem_model.py --from bench/gpu_smem_results.jsonl  # the model again, no compiler
    .venv/bin/python bench/bench_gpu_smem_model.py --corpus [--targets h100,a100,l4,b200]  # jax's own kernels

A grid of Pallas kernels (tests/data/kernels/gpu_smem_kernels.py: Triton matmuls with the
whole K in a block, matmuls looping over K in fori_loop slices, attention, bias, elementwise,
reductions, each over block sizes, f32/bf16/f16, num_stages 1..4 and num_warps 4/8; Mosaic GPU
copies, adds, scratch and reductions over 1..8 pipeline steps) is captured and compiled by the
project's own worker code (compile/capture.py capture_calls, the compile-only CUDA device of
compile/devices.py) and the compiler's words read by gpu/report.py.

The compiler states its request only for a kernel it refuses. So each target is compiled, in a
child process of its own (JAX_PLATFORMS=cpu; Mosaic GPU keeps the first architecture of a
process), for a copy of its GpuTargetConfig (gpus.py) whose shared_memory_per_block_optin is
1 byte: every kernel that uses shared memory is refused with "requested N, available: 1"
(Triton: XLA's check after Triton's passes; Mosaic GPU: its own while lowering, its bound set
from the device by gpu/compile.py), and one that compiles requests none. With
--verify N the route is checked: the N configs nearest the real limit on each side are
compiled again for the real target; those over it must be refused with the same N, those
under it must pass the shared-memory check.

With --corpus [DIR], the examples are instead every `# vmem:` line of DIR's files
(tests/data/gpu_corpus: jax's shipped Pallas GPU kernels as jax's tests call them), each run in
its own file's namespace; an example that reaches several kernels (a gradient: forward,
preprocess, backward) gives a row per kernel, and the family of a row is the example's
function (with the kernel's name when it reaches several). Written to
bench/gpu_corpus_results.jsonl by default.

Writes one line per kernel to --out (bench/gpu_smem_results.jsonl): the example, its call
as captured (operands, gpu_kernel) and each target's request; prints each kernel's model
against the compiler, then the error per backend and target.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vmem_lsp.compile.protocol import result_from_dict  # noqa: E402
from vmem_lsp.gpu.layout import estimated_shared_memory  # noqa: E402
from vmem_lsp.results import CapturedCall  # noqa: E402

KERNELS = ROOT / "tests" / "data" / "kernels" / "gpu_smem_kernels.py"
OUT = ROOT / "bench" / "gpu_smem_results.jsonl"
CORPUS = ROOT / "tests" / "data" / "gpu_corpus"
CORPUS_OUT = ROOT / "bench" / "gpu_corpus_results.jsonl"
TARGETS = "h100,h200,a100,l4,b200"
PROBE_LIMIT = 1  # bytes: every kernel that uses shared memory says how much
SMALL = 4096  # requests below this are judged in bytes, not relative error


def cases() -> list[str]:
    """The grid: `# vmem:`-style calls of the kernels of KERNELS."""
    found: list[str] = []
    for dt in ("f32", "bf16", "f16"):
        for bm, bn in ((32, 32), (64, 32), (32, 64), (64, 64), (128, 64), (64, 128), (128, 128), (16, 64)):
            for k in (64, 256):
                for stages, warps in ((3, 4), (1, 8)):
                    found.append(
                        f"tri_matmul({dt}[256, {k}], {dt}[{k}, 256], bm={bm}, bn={bn}, stages={stages}, warps={warps})"
                    )
        for bm, bn, bk in (
            (64, 64, 32),
            (64, 32, 32),
            (32, 64, 64),
            (128, 64, 32),
            (64, 128, 64),
            (128, 128, 32),
            (16, 64, 32),
            (64, 64, 16),
            (32, 32, 128),
            (128, 128, 64),
        ):
            for stages in (1, 2, 3, 4):
                found.append(
                    f"tri_kloop({dt}[256, 512], {dt}[512, 256], bm={bm}, bn={bn}, bk={bk}, stages={stages}, warps=4)"
                )
        for bm, bn, bk in ((64, 64, 32), (128, 128, 32)):
            found.append(f"tri_kloop({dt}[256, 512], {dt}[512, 256], bm={bm}, bn={bn}, bk={bk}, stages=3, warps=8)")
        found.append(f"tri_kloop_load({dt}[256, 512], {dt}[512, 256], bm=64, bn=64, bk=32, stages=3)")
        for bm, bn, bk in ((64, 64, 32), (128, 64, 64)):
            found.append(
                f"tri_kloop_bias({dt}[256, 512], {dt}[512, 256], {dt}[256, 256], bm={bm}, bn={bn}, bk={bk}, stages=3)"
            )
        for bm, bn in ((64, 64), (128, 64)):
            found.append(f"tri_matmul_bias({dt}[256, 128], {dt}[128, 256], {dt}[256, 256], bm={bm}, bn={bn})")
        for bm, bn, k in ((64, 32, 128), (128, 64, 256), (64, 64, 64)):
            found.append(f"tri_matmul_nt({dt}[256, {k}], {dt}[256, {k}], bm={bm}, bn={bn})")
        for bq, bkv, d, warps in ((64, 64, 64, 4), (128, 64, 128, 8), (32, 32, 64, 4), (64, 32, 64, 4)):
            for stages in (1, 3):
                found.append(
                    f"tri_attention({dt}[1024, {d}], {dt}[1024, {d}], {dt}[1024, {d}], bq={bq}, bkv={bkv}, "
                    f"stages={stages}, warps={warps})"
                )
    found += [
        "tri_add(f32[256, 256], f32[256, 256], bm=64, bn=64)",
        "tri_add(bf16[512, 512], bf16[512, 512], bm=128, bn=128, warps=8)",
        "tri_rowsum(f32[256, 256], bm=64, warps=4)",
        "tri_rowsum(f32[256, 256], bm=64, warps=8)",
        "tri_rowsum(f32[256, 1024], bm=16, warps=4)",
        "tri_rowsum(bf16[256, 1024], bm=128, warps=4)",
        "tri_rowsum(f32[1024, 64], bm=256, warps=4)",
        "tri_colsum(f32[256, 256], bn=64, warps=4)",
        "tri_colsum(f32[256, 256], bn=64, warps=8)",
        "tri_colsum(f32[1024, 256], bn=128, warps=4)",
        "tri_colsum(bf16[512, 256], bn=256, warps=8)",
        "tri_softmax(f32[256, 1024], bm=16)",
        "tri_softmax(bf16[256, 1024], bm=32, warps=8)",
        "tri_softmax(f32[256, 4096], bm=4, warps=8)",
    ]
    for dt in ("f32", "bf16"):
        for rows in (1, 8, 64, 256):
            found.append(f"mgpu_copy({dt}[4096, 128], rows={rows})")
        for rows in (64, 128):
            for steps in ("", ", steps=2, sequential=True", ", steps=3, sequential=True", ", steps=3"):
                found.append(f"mgpu_add({dt}[4096, 128], {dt}[4096, 128], rows={rows}{steps})")
        found.append(f"mgpu_scratch({dt}[4096, 128], rows=64)")
        found.append(f"mgpu_scratch({dt}[4096, 128], rows=32, steps=2, sequential=True)")
        found.append(f"mgpu_rowsum({dt}[4096, 256], rows=128, steps=2, sequential=True)")
        found.append(f"mgpu_rowsum({dt}[4096, 128], rows=64)")
    found += [
        "mgpu_add2d(f32[1024, 512], f32[1024, 512], rows=64, cols=128)",
        "mgpu_add2d(f32[1024, 512], bf16[1024, 512], rows=64, cols=128, steps=2, sequential=True)",
        "mgpu_add2d(f32[1024, 512], bf16[1024, 512], rows=64, cols=128, steps=8, sequential=True)",
        "mgpu_add2d(bf16[1024, 512], bf16[1024, 512], rows=8, cols=16, steps=2, sequential=True)",
    ]
    return found


def corpus_cases(folder: Path) -> list[str]:
    """Every `# vmem:` example of the corpus' files, as "file.py:call"."""
    from vmem_lsp.source.directives import find_examples

    found: list[str] = []
    for path in sorted(folder.glob("*.py")):
        examples, _ = find_examples(path.read_text(), str(path))
        found += [f"{path.name}:{e.text}" for e in examples]
    return found


def family(example: str) -> str:
    """The grid's kernel function; a corpus row's example function, and its kernel when the
    example reaches several ("mha_backward/mha_backward")."""
    call = example.split(".py:", 1)[-1]
    name = call.split("(", 1)[0]
    return f"{name}/{call.rsplit(' [', 1)[1][:-1]}" if call.endswith("]") and " [" in call else name


# ---- the child: one target, in its own process --------------------------------------------------


def probe_target(name: str, limit: int) -> str:
    """Register a copy of GPU target `name` whose shared memory per block is `limit` bytes."""
    from vmem_lsp.gpu import targets as gpus

    real = gpus.gpu(name)
    optin = gpus.CAPABILITIES[real.capability].shared_per_block_optin

    @dataclasses.dataclass(frozen=True)
    class Probe(gpus.Gpu):
        def target_config(self) -> str:
            text = super().target_config()
            line = f"shared_memory_per_block_optin: {optin}\n"
            assert line in text, "gpus.py no longer writes the limit as this bench expects"
            return text.replace(line, f"shared_memory_per_block_optin: {limit}\n")

    probe = f"{name}-limit-{limit}"
    gpus.GPUS[probe] = Probe(**{**dataclasses.asdict(real), "name": probe})
    return probe


def compact(call: CapturedCall) -> dict:
    """The call as the model reads it: no origins, texts or VMEM-only analyses."""
    operands = tuple(dataclasses.replace(op, origin=None) for op in call.operands)
    scratch = tuple(dataclasses.replace(s, origin=None) for s in call.scratch)
    kept = dataclasses.replace(
        call,
        call_origin=None,
        invoke_origin=None,
        compiler_text=None,
        error_origin=None,
        operands=operands,
        scratch=scratch,
        scoped=(),
        unseen=(),
        compile_seconds=0.0,
    )
    return dataclasses.asdict(kept)


def call_of(d: dict) -> CapturedCall:
    # Any GPU target decodes the call: its family reads family_facts back as a GpuKernel (with
    # no target, they stayed a dict and the model failed on them: --from was broken since
    # CapturedCall.gpu_kernel became family_facts).
    return result_from_dict({"target": "h100", "device_kind": None, "calls": [d]}).calls[0]


def said_of(call: CapturedCall) -> dict:
    from vmem_lsp.gpu.report import parse_gpu_report

    report = parse_gpu_report(call.compiler_text or "")
    if report.form == "shared_memory":
        return {"requested": report.requested, "available": report.available, "form": report.form}
    if call.fits:
        return {"requested": 0, "available": None, "form": "fits"}
    return {"requested": None, "available": None, "form": report.form, "text": (call.compiler_text or "")[:300]}


def calls_of(case: str, namespaces: dict, target: str, compile: bool = True) -> list[tuple[str, CapturedCall]]:
    """Each kernel a case reaches, named as its row: the case itself, or with the kernel's
    name in brackets when it reaches several."""
    from vmem_lsp.compile.capture import capture_calls

    file, _, call_text = case.partition(":") if ".py:" in case else ("", "", case)
    calls = capture_calls(call_text, namespaces[file], target, compile=compile)
    return [(case if len(calls) == 1 else f"{case} [{c.name}]", c) for c in calls]


def namespaces_of(corpus: Path | None) -> dict:
    """Each case's namespace by its file ("" for the grid's KERNELS)."""
    import runpy

    if corpus is None:
        return {"": runpy.run_path(str(KERNELS))}
    return {path.name: runpy.run_path(str(path)) for path in sorted(corpus.glob("*.py"))}


def child(target: str, only: list[str], verify: int, trace: bool = False, corpus: Path | None = None) -> None:
    from vmem_lsp.compile import capture
    from vmem_lsp.gpu.targets import gpu

    namespaces = namespaces_of(corpus)
    todo = only or (corpus_cases(corpus) if corpus else cases())
    if trace:  # the calls only, as the worker captures them now: no compiler
        for case in todo:
            for example, call in calls_of(case, namespaces, target, compile=False):
                print(json.dumps({"example": example, "call": compact(call)}), flush=True)
        return
    probe = probe_target(target, PROBE_LIMIT)
    measured = []
    for case in todo:
        for example, call in calls_of(case, namespaces, probe):
            said = said_of(call)
            measured.append((case, example, said))
            print(json.dumps({"example": example, "target": target, **said, "call": compact(call)}), flush=True)
    if not verify:
        return
    capture.VERDICTS.clear()  # the probe's verdicts are kept under the same device kind
    limit = gpu(target).shared_memory_limit
    known = [(c, e, s["requested"]) for c, e, s in measured if s["requested"]]
    over = sorted((x for x in known if x[2] > limit), key=lambda x: x[2])[:verify]
    under = sorted((x for x in known if x[2] <= limit), key=lambda x: -x[2])[:verify]
    for case, example, requested in over + under:
        said = next(said_of(c) for e, c in calls_of(case, namespaces, target) if e == example)
        agrees = said["requested"] == requested if requested > limit else said["form"] != "shared_memory"
        print(
            json.dumps(
                {"verify": example, "target": target, "probe": requested, "real": said, "limit": limit, "ok": agrees}
            ),
            flush=True,
        )


# ---- the parent: every target, then the table ---------------------------------------------------


def run_target(
    target: str, only: list[str], verify: int, trace: bool = False, corpus: Path | None = None
) -> tuple[list[dict], list[dict]]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    command = [
        sys.executable,
        __file__,
        "--child",
        target,
        "--verify",
        str(verify),
        *(["--trace"] if trace else []),
        *(["--corpus", str(corpus)] if corpus else []),
        *(["--only", *only] if only else []),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0:
        tail = "\n".join(done.stderr.splitlines()[-15:])
        raise SystemExit(f"the child for {target} ended with {done.returncode}:\n{tail}")
    return [r for r in rows if "verify" not in r], [r for r in rows if "verify" in r]


def merged(rows: list[dict]) -> list[dict]:
    """One record per example: its call (the same on every target) and each target's words."""
    by: dict[str, dict] = {}
    for r in rows:
        record = by.setdefault(r["example"], {"example": r["example"], "call": r["call"], "compiler": {}})
        record["compiler"][r["target"]] = {k: r[k] for k in ("requested", "available", "form", "text") if k in r}
    return list(by.values())


def relative(model: int, compiler: int) -> float:
    return (model - compiler) / compiler


def report(records: list[dict], quiet: bool = False) -> list[dict]:
    """Print each kernel's model against the compiler and the summaries; return the rows."""
    rows = []
    for record in records:
        call = call_of(record["call"])
        for target, said in record["compiler"].items():
            if said.get("requested") is None:
                rows.append({"example": record["example"], "target": target, "error": said.get("form")})
                continue
            model = estimated_shared_memory(call, call.backend, target)
            rows.append(
                {
                    "example": record["example"],
                    "family": family(record["example"]),
                    "backend": call.backend,
                    "target": target,
                    "compiler": said["requested"],
                    "model": model,
                }
            )
    if not quiet:
        print(f"{'target':6}  {'backend':10}  {'compiler':>8}  {'model':>8}  {'error':>8}  kernel")
        for r in rows:
            if "error" in r:
                print(
                    f"{r['target']:6}  {'':10}  {'':>8}  {'':>8}  {'':>8}  {r['example']}: not measured ({r['error']})"
                )
                continue
            error = (
                f"{relative(r['model'], r['compiler']):+8.1%}"
                if r["compiler"] >= SMALL
                else f"{r['model'] - r['compiler']:+7d}B"
            )
            print(
                f"{r['target']:6}  {r['backend']:10}  {r['compiler']:8d}  {r['model']:8d}  {error:>8}  {r['example']}"
            )
    summary(rows)
    return rows


def summary(rows: list[dict]) -> None:
    measured = [r for r in rows if "error" not in r]
    print(f"\n{len(measured)} kernel x target pairs measured, {len(rows) - len(measured)} not")
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in measured:
        groups.setdefault((r["backend"], "all"), []).append(r)
        groups.setdefault((r["backend"], r["target"]), []).append(r)
        groups.setdefault((r["backend"], r["family"]), []).append(r)
    print(
        f"\n{'backend':10}  {'group':15}  {'n':>4}  {'n>=4K':>5}  {'median':>7}  {'max |err|':>9}  "
        f"{'within 10%':>10}  {'small: max |err|':>16}"
    )
    for (backend, group), members in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1] != "all", g[0][1])):
        big = [relative(r["model"], r["compiler"]) for r in members if r["compiler"] >= SMALL]
        small = [abs(r["model"] - r["compiler"]) for r in members if r["compiler"] < SMALL]
        median = f"{statistics.median(big):+7.1%}" if big else ""
        worst = f"{max(abs(e) for e in big):9.1%}" if big else ""
        close = f"{sum(abs(e) <= 0.10 for e in big) / len(big):10.0%}" if big else ""
        print(
            f"{backend:10}  {group:15}  {len(members):4d}  {len(big):5d}  {median:>7}  {worst:>9}  {close:>10}  "
            f"{(str(max(small)) + ' B') if small else '':>16}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default=TARGETS)
    parser.add_argument("--out", type=Path, help="default bench/gpu_smem_results.jsonl (--corpus: gpu_corpus_results)")
    parser.add_argument("--from", dest="source", type=Path, help="report on a results file, no compiler")
    parser.add_argument("--verify", type=int, default=0, help="check the route on N configs each side of the limit")
    parser.add_argument("--only", nargs="*", default=[], help="these examples instead of the grid")
    parser.add_argument(
        "--corpus",
        nargs="?",
        type=Path,
        const=CORPUS,
        help="the `# vmem:` examples of this folder's files instead of the grid (default tests/data/gpu_corpus)",
    )
    parser.add_argument("--quiet", action="store_true", help="the summaries only")
    parser.add_argument(
        "--retrace", action="store_true", help="with --from: capture the calls again (no compiler), keep the figures"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.only, args.verify, args.trace, args.corpus)
        return
    args.out = args.out or (CORPUS_OUT if args.corpus else OUT)
    if args.source:
        records = [json.loads(line) for line in args.source.read_text().splitlines() if line.strip()]
        if args.retrace:  # a corpus's records are recaptured whole: a row per kernel, named as measured
            cases = [r["example"] for r in records] if not args.corpus else []
            calls = {r["example"]: r["call"] for r in run_target("h100", cases, 0, True, args.corpus)[0]}
            records = [{**r, "call": calls[r["example"]]} for r in records]
            args.source.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
        report(records, args.quiet)
        return
    print(f"jax {version('jax')}, jax-cuda12-plugin {version('jax-cuda12-plugin')}; probe limit {PROBE_LIMIT} B")
    rows, checks = [], []
    for target in args.targets.split(","):
        found, verified = run_target(target, args.only, args.verify, corpus=args.corpus)
        rows += found
        checks += verified
        print(f"{target}: {len(found)} kernels compiled", flush=True)
    records = merged(rows)
    args.out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}\n")
    report(records, args.quiet)
    if checks:
        print(f"\nthe route checked at the real limit: {sum(c['ok'] for c in checks)} of {len(checks)} agree")
        for c in checks:
            real = c["real"]
            print(
                f"  {c['target']:5} probe {c['probe']:7d}  real {real.get('requested')} ({real['form']}) "
                f"limit {c['limit']}  {'ok' if c['ok'] else 'DIFFERS'}  {c['verify']}"
            )


if __name__ == "__main__":
    main()
