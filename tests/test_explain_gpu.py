"""`vmem-lsp explain` on a GPU job's log (issue 33): the GPU compiler's errors found among other
lines, in the tracebacks Python and jax print around them, explained and placed on the sources.

The compiler's texts are scripts/capture_gpu_reports.py's (tests/data/reports/gpu/<plugin>/),
never written here; what a job's log puts around them (tracebacks as jax 0.10 raises them,
timestamps, other records) is."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from support import KERNELS, ROOT, line_of, reports
from support.cli import run_cli

from vmem_lsp.explain import (
    Sources,
    Traced,
    TracedCall,
    explain_json,
    explain_text,
    find_reports,
    placing,
    source_sites,
)
from vmem_lsp.gpu.explain import best_calls
from vmem_lsp.gpu.report import parse_gpu_report
from vmem_lsp.gpu.targets import GPUS, gpu
from vmem_lsp.results import CapturedCall, Operand

CAPTURED = reports.GPU_REPORTS / "0.10.2"
GPU_KERNELS = KERNELS / "gpu_kernels.py"
STDERR = "--- stderr ---"
TPU_LOG = ROOT / "tests" / "data" / "logs" / reports.REFERENCE / "physical-breakdown-v6e.jit.log"


def captured(name: str) -> str:
    return reports.compiler_text(CAPTURED / f"{name}.txt")


def failures() -> list[str]:
    """The captured cases the compiler refused."""
    return sorted(
        p.stem for p in CAPTURED.glob("*.txt") if parse_gpu_report(reports.compiler_text(p)).form != "unknown"
    )


# ---- a job's log, as Python and jax print a failure ----------------------------------------------

USER_FRAME = ("/home/ci/repo/train.py", 40, "<module>", "loss = step(params, batch)")
JAX_FRAMES = [
    (
        "/opt/venv/lib/python3.11/site-packages/jax/_src/compiler.py",
        337,
        "backend_compile_and_load",
        "backend.compile(",
    ),
]


def frames(*entries) -> list[str]:
    return [
        line
        for file, number, fn, code in entries
        for line in (f'  File "{file}", line {number}, in {fn}', f"    {code}")
    ]


def as_logged(text: str, kernel: tuple[str, int] = ("/home/ci/repo/kernels.py", 12)) -> tuple[list[str], int]:
    """The lines a job prints for one captured failure, and which of them holds the report: an
    exception's traceback (jax.errors.JaxRuntimeError for the compiler's status); for Mosaic GPU's
    error while lowering, jax's chained pair whose first traceback is the user's pallas_call
    (`kernel`); MLIR's printed diagnostic before the exception it fails; the compiler's last words
    when it ended the process (an LLVM fatal error)."""
    if text.startswith("(process exited"):
        said = text.splitlines()[1:]
        return said, 0
    printed: list[str] = []
    if STDERR in text:
        text, below = text.split(f"\n{STDERR}\n")
        printed = below.splitlines()
    report = parse_gpu_report(text)
    traceback = ["Traceback (most recent call last):", *frames(USER_FRAME, *JAX_FRAMES)]
    if report.backend == "mosaic_gpu" and report.form == "shared_memory":
        first = [
            "Traceback (most recent call last):",
            *frames((*kernel, "f", "return pl.pallas_call(")),
            f"jax._src.source_info_util.JaxStackTraceBeforeTransformation: ValueError: {text}",
            "",
            "The preceding stack trace is the source of the JAX operation that, once transformed by JAX, "
            "triggered the following exception.",
            "",
            "--------------------",
            "",
            "The above exception was the direct cause of the following exception:",
            "",
        ]
        return [*first, *traceback, f"ValueError: {text}"], 3
    if printed:  # MLIR's diagnostic, printed while compiling: the exception after it says only that it failed
        return [*printed, *traceback, f"jax.errors.JaxRuntimeError: {text}"], 0
    return [*traceback, f"jax.errors.JaxRuntimeError: {text}"], len(traceback)


def job_log(texts: list[str], prefix: str = "", seed: int = 0, **kw) -> tuple[list[str], list[int]]:
    """Noise, each failure as logged, more noise; every line behind `prefix` (a CI runner's
    timestamp, a pod's name). The 1-based line each report starts on."""
    rng = random.Random(seed)
    lines: list[str] = []
    starts = []
    for text in texts:
        lines += [f"INFO step {rng.randint(0, 999)} loss {rng.random():.4f}" for _ in range(rng.randint(1, 4))]
        logged, at = as_logged(text, **kw)
        starts.append(len(lines) + 1 + at)
        lines += logged
    lines.append("Error: Process completed with exit code 1.")
    return [f"{prefix}{line}\n" for line in lines], starts


def signature(text: str):
    r = parse_gpu_report(text)
    return r.form, r.backend, r.requested, r.available, r.op, r.architecture, r.needs_capability, r.what, r.place


PREFIXES = ["", "2026-12-03T07:13:33.6290410Z ", "[pod/train-0] 2026-12-03 07:13:33,629 ", "| "]


@pytest.mark.parametrize("prefix", PREFIXES, ids=["bare", "github-actions", "pod-logger", "task-group"])
def test_every_captured_gpu_error_is_found_once_where_it_begins_and_read_as_captured(prefix):
    """Each refused case once (Mosaic GPU's chained repeat is not a second report), on the line it
    begins, its text parsed as the bare capture is: prefixes and exception names left out."""
    texts = [captured(name) for name in failures()]
    assert len(texts) >= 9
    lines, starts = job_log(texts, prefix)
    found = list(find_reports(lines))
    assert [f.line for f in found] == starts
    assert [signature(f.text) for f in found] == [signature(t) for t in texts]


def test_a_lowering_errors_traceback_names_the_pallas_call_and_a_new_failure_is_a_new_report():
    """jax raises Mosaic GPU's error twice, chained: one report, with the user's frame that
    made the pallas_call. The same failure again later (a retry) is reported again."""
    text = captured("mosaic-smem-h100")
    once, _ = as_logged(text, kernel=("/home/ci/repo/kernels.py", 83))
    [found] = find_reports(once)
    assert ("/home/ci/repo/kernels.py", 83) in found.frames
    assert "raised at /home/ci/repo/kernels.py:83" in explain_text(found)
    assert len(list(find_reports([*once, "INFO retrying", *once]))) == 2
    [compiled] = find_reports(as_logged(captured("triton-smem-h100"))[0])  # raised by XLA, below jax's frames
    assert "raised at /home/ci/repo/train.py:40 (the traceback's innermost frame of your code)" in explain_text(
        compiled
    )


def test_a_log_with_tpu_and_gpu_reports_explains_both():
    gpu_lines, _ = job_log([captured("triton-smem-h100"), captured("mosaic-sm80-a100")])
    log = [*TPU_LOG.read_text().splitlines(True), *gpu_lines]
    found = list(find_reports(log))
    data = [explain_json(f) for f in found]
    assert [d["platform"] for d in data] == ["tpu", "gpu", "gpu"]
    assert data[0]["allocations"] and data[1]["form"] == "shared_memory" and data[2]["form"] == "unsupported_op"
    assert not any("not understood" in explain_text(f) for f in found)


def explained(name: str, target: str | None = None) -> tuple[str, dict]:
    [found] = find_reports(as_logged(captured(name))[0])
    return explain_text(found, target, "job.log"), explain_json(found, target)


@pytest.mark.parametrize("name", [n for n in failures() if "-smem-" in n])
def test_shared_memory_is_explained_with_its_figures_the_gpus_of_its_limit_and_a_cut_that_fits(name):
    text, data = explained(name)
    owners = [g.name for g in GPUS.values() if g.shared_memory_limit == data["available"]]
    assert data["gpus"] == owners and owners
    assert data["over_by"] == data["requested"] - data["available"] > 0
    assert ("alike" in text) == (len(owners) > 1)
    cut = data["ways_out"][0]  # "... cut to 1/k ... gives about X of Y: fits with Z to spare"
    k = int(cut.split("cut to 1/")[1].split(" ")[0])
    assert -(-data["requested"] // k) <= data["available"] < -(-data["requested"] // (k // 2))
    roomier = [g for g in GPUS.values() if g.shared_memory_limit >= data["requested"]]
    assert any("as it is, it fits on" in w for w in data["ways_out"]) == bool(roomier)


def test_the_h100s_limit_is_said_as_three_gpus_alike_and_what_counts_per_backend():
    text, data = explained("triton-smem-h100")
    assert "Triton kernel needs 256.0K of shared memory, 227.0K available (over by 29.0K)" in text
    assert (
        "227.0K (232448 bytes) is what a block may use on NVIDIA H100 80GB HBM3, NVIDIA H200 and "
        "NVIDIA B200 alike (sm_90, sm_100)" in text
    )
    assert "a dot's 16-bit operands together, f32 ones one at a time" in text
    assert "the input blocks of its dots cut to 1/2 (its rows or columns ÷ 2) gives about 128.0K of 227.0K" in text
    mosaic, _ = explained("mosaic-smem-h100")
    assert "the request is the sum of the in_specs' and out_specs' blocks" in mosaic
    assert "every staged block cut to 1/4" in mosaic


def test_a_limit_of_one_gpu_names_it_and_the_gpus_it_would_fit_on():
    text, data = explained("triton-smem-64-l4")
    assert data["gpus"] == ["l4"] and f"on {gpu('l4').label} (sm_89): the job ran on it" in text
    assert "as it is, it fits on NVIDIA H100 80GB HBM3, NVIDIA H200, NVIDIA A100-SXM4-80GB and NVIDIA B200" in text
    _, a100 = explained("triton-smem-a100")
    assert a100["gpus"] == ["a100"]


def test_a_target_whose_limit_is_not_the_reports_is_said():
    text, data = explained("triton-smem-a100", "h100")
    assert data["gpus"] == ["h100"]
    assert "163.0K (166912 bytes) is not NVIDIA H100 80GB HBM3's limit (227.0K)" in text


def test_an_op_the_architecture_lacks_is_said_with_its_place_and_the_targets_that_have_it():
    text, data = explained("mosaic-sm80-a100")
    assert (data["op"], data["architecture"], data["gpus"]) == ("nvvm.cp.async.bulk.wait_group", "sm_80", ["a100"])
    assert data["have_it"] == ["h100", "h200", "b200"]
    script = ROOT / "scripts" / "capture_gpu_reports.py"
    called = line_of(script, "return pl.pallas_call(", 1)  # mosaic_copy's, the second
    assert script.read_text().splitlines()[called - 2].strip() == "n, m = x.shape"
    assert data["place"]["file"].endswith("scripts/capture_gpu_reports.py") and data["place"]["line"] == called
    assert "sm_90 and newer have it" in text and "lower it with Triton there" in text


def test_a_compute_capability_error_names_the_targets_that_have_it():
    text, data = explained("fp8-dot-a100")
    assert data["needs_capability"] == [8, 9] and data["gpus"] == ["a100"]
    assert data["have_it"] == ["l4", "h100", "h200", "b200"]
    assert "Conversion from/to f8e4m3nv needs compute capability 8.9 or newer (LLVM's fatal error" in text


def test_blackwells_tensor_memory_is_counted_in_columns():
    text, data = explained("triton-tmem-b200")
    assert (data["unit"], data["requested"], data["available"], data["gpus"]) == ("columns", 576, 512, ["b200"])
    assert "needs 576 columns of tensor memory, 512 exist (over by 64)" in text


# ---- placing, on traced calls as the worker describes gpu_kernels.py's examples ------------------


def traced_call(backend: str, *blocks: tuple[str, tuple[int, ...]], dtype: str = "f32") -> CapturedCall:
    """A traced (not compiled) call whose operands have these (role, block shape)s."""
    operands, count = [], {"in": 0, "out": 0}
    for number, (role, shape) in enumerate(blocks):
        operands.append(Operand(role, count[role], number, dtype, shape, shape, None, None, False, None))
        count[role] += 1
    return CapturedCall(
        "kernel", None, None, (1,), 0, tuple(operands), (), None, True, None, 0.0, compiled=False, backend=backend
    )


@pytest.fixture(scope="module")
def kernels() -> Sources:
    return source_sites([str(GPU_KERNELS)], trace=False)


def examples(kernels: Sources) -> list[TracedCall]:
    """gpu_kernels.py's examples as traced on a GPU: blocks of 64 and 128, rows of 256 and 32, an fp8 dot."""
    site = {s.function: (p, s) for p, s, _ in kernels.sites}

    def at(function, example, call):
        path, s = site[function]
        return TracedCall(path, s, call, f"tests/data/kernels/gpu_kernels.py:{line_of(GPU_KERNELS, example)}")

    matmul = lambda b: traced_call("triton", ("in", (b, 512)), ("in", (512, b)), ("out", (b, b)))
    copy = lambda r: traced_call("mosaic_gpu", ("in", (r, 128)), ("out", (r, 128)))
    fp8 = traced_call("triton", ("in", (64, 64)), ("in", (64, 64)), ("out", (64, 64)), dtype="f8e4m3fn")
    return [
        at("triton_matmul", "block=64)", matmul(64)),
        at("triton_matmul", "block=128)", matmul(128)),
        at("mosaic_copy", "rows=256)", copy(256)),
        at("mosaic_copy", "rows=32)", copy(32)),
        at("fp8_dot", "# vmem: fp8_dot", fp8),
    ]


@pytest.mark.parametrize(
    ("name", "function", "example"),
    [
        ("triton-smem-h100", "triton_matmul", "block=128)"),
        ("triton-smem-64-l4", "triton_matmul", "block=64)"),
        ("mosaic-smem-h100", "mosaic_copy", "rows=256)"),
        ("fp8-dot-a100", "fp8_dot", "# vmem: fp8_dot"),
        ("triton-tmem-b200", None, None),
    ],
)
def test_the_traced_call_of_the_reports_backend_nearest_its_request_is_chosen(kernels, name, function, example):
    """Triton's request here is its largest input block (f32 operands, one at a time) (block 128: 256.0K, block 64: 128.0K), Mosaic
    GPU's the sum of its blocks, nearest when no example has the job's shapes; an fp8 conversion
    is the kernel with fp8 operands; two Triton kernels a tensor-memory report fits alike are a tie."""
    chosen, why = best_calls(parse_gpu_report(captured(name)), examples(kernels))
    if function is None:
        assert len(chosen) == 2 and "alike" in why
        return
    [only] = chosen
    assert only.site.function == function and only.example.endswith(f":{line_of(GPU_KERNELS, example)}")
    assert ("nearest" in why) == (name == "mosaic-smem-h100")


class Tracer:
    """explain's Tracer, its trace given: the traced examples above, on whatever GPU is asked."""

    def __init__(self, calls):
        self.calls, self.asked = calls, []

    def on(self, target):
        from vmem_lsp.engine import SourceFiles

        self.asked.append(target.name)
        return lambda: Traced(tuple(self.calls), None, SourceFiles().sites_of)


def place_in(kernels: Sources, text: str, **kw) -> list[dict]:
    from vmem_lsp.output.formats import as_dict

    lines, _ = as_logged(text, **kw)
    [found] = find_reports(lines)
    tracer = Tracer(examples(kernels))
    diagnostics, _ = placing(found, None, "job.log", Sources(kernels.sites, tracer))
    return [as_dict(d) for d in diagnostics]


def test_a_triton_report_goes_on_its_pallas_call_and_the_input_blockspecs_it_stages(kernels):
    placed = place_in(kernels, captured("triton-smem-h100"))
    at = sorted((d["code"], d["range"]["start_line"]) for d in placed)
    calls = line_of(GPU_KERNELS, "return pl.pallas_call(")
    assert at == [
        ("VMEM050", line_of(GPU_KERNELS, "pl.BlockSpec((block, k)")),
        ("VMEM050", line_of(GPU_KERNELS, "pl.BlockSpec((k, block)")),
        ("VMEM051", calls),
    ]
    assert all(d["facts"]["log_line"] for d in placed)
    assert "input 0 block f32[128,512] = 256.0K" in placed[1]["message"]


def test_a_mosaic_report_goes_where_its_traceback_says_with_the_in_and_out_blocks(kernels):
    """Its frame names mosaic_copy's pallas_call; the example nearest the request gives the split."""
    copy = line_of(GPU_KERNELS, "return pl.pallas_call(", 1)
    placed = place_in(kernels, captured("mosaic-smem-h100"), kernel=(str(GPU_KERNELS), copy))
    at = sorted((d["code"], d["range"]["start_line"]) for d in placed)
    assert at == [
        ("VMEM050", line_of(GPU_KERNELS, "in_specs=[pl.BlockSpec((rows, m)")),
        ("VMEM050", line_of(GPU_KERNELS, "out_specs=pl.BlockSpec((rows, m)")),
        ("VMEM051", copy),
    ]
    assert placed[0]["facts"]["why"].startswith("the line the log names")


def test_an_op_written_in_a_kernels_body_goes_on_that_line(tmp_path):
    """MLIR's location is a line of the kernel's body, outside any pallas_call: VMEM052 there."""
    op_line = parse_gpu_report(captured("mosaic-sm80-a100")).place[1]
    body = ["def kernel(x_ref, o_ref):", "    o_ref[...] = x_ref[...] + 1.0"]
    call = ["def f(x):", "    return pl.pallas_call(kernel, out_shape=x)(x)"]
    head = ["from jax.experimental import pallas as pl", ""]
    padding = [""] * (op_line - len(head) - 2)
    source = tmp_path / "capture_gpu_reports.py"  # the file the captured location names
    source.write_text("\n".join([*head, *padding, *body, "", "", *call]) + "\n")
    assert source.read_text().splitlines()[op_line - 1] == body[1]
    [found] = find_reports(as_logged(captured("mosaic-sm80-a100"))[0])
    diagnostics, _ = placing(found, None, "job.log", source_sites([str(source)], trace=False))
    assert [(d.code, d.path, d.span.start_line) for d in diagnostics] == [("VMEM052", str(source), op_line)]


def test_an_op_the_compiler_places_outside_the_sources_is_not_put_on_a_kernel_of_theirs(kernels):
    """The MLIR location names the capture script, not gpu_kernels.py: its one Mosaic GPU kernel is
    not taken for it, though it is the only one the examples reach."""
    [found] = find_reports(as_logged(captured("mosaic-sm80-a100"))[0])
    diagnostics, placement = placing(found, None, "job.log", Sources(kernels.sites, Tracer(examples(kernels))))
    op_line = parse_gpu_report(captured("mosaic-sm80-a100")).place[1]
    assert diagnostics == [] and f"capture_gpu_reports.py:{op_line}, in none of the sources" in placement.why


# ---- the command ---------------------------------------------------------------------------------


def test_explain_reads_a_mixed_log_and_puts_each_gpu_error_on_the_lines_that_made_it(tmp_path):
    """`vmem-lsp explain LOG --source ... --format json`, the examples traced by the worker: the
    Triton overflow on triton_matmul and its input BlockSpecs, the fp8 dot on fp8_dot, the op
    sm_80 lacks on the line MLIR names (the capture script's pallas_call), the TPU report beside."""
    source = tmp_path / "gpu_kernels.py"
    source.write_text(GPU_KERNELS.read_text())
    script = tmp_path / "capture_gpu_reports.py"
    script.write_text((ROOT / "scripts" / "capture_gpu_reports.py").read_text())
    op_line = parse_gpu_report(captured("mosaic-sm80-a100")).place[1]
    assert "pl.pallas_call(" in script.read_text().splitlines()[op_line - 1]
    names = ["triton-smem-h100", "fp8-dot-a100", "mosaic-sm80-a100"]
    lines, starts = job_log([captured(n) for n in names], "2026-12-03T07:13:33.6290410Z ")
    log = tmp_path / "job.log"
    log.write_text(TPU_LOG.read_text() + "".join(lines))
    done = run_cli("explain", str(log), "--source", str(source), str(script), "--format", "json")
    assert done.returncode == 1, done.stderr  # it places errors on the sources' lines
    out = json.loads(done.stdout)
    assert [(r["platform"], r["form"]) for r in out["reports"]] == [
        ("tpu", "physical"),
        ("gpu", "shared_memory"),
        ("gpu", "compute_capability"),
        ("gpu", "unsupported_op"),
    ]
    shift = len(TPU_LOG.read_text().splitlines())
    on = {
        (d["facts"]["log_line"] - shift, d["code"], Path(d["path"]).name, d["range"]["start_line"])
        for d in out["diagnostics"]
        if d["facts"].get("log_line", 0) > shift
    }
    triton, fp8, op = starts
    assert on == {
        (triton, "VMEM051", "gpu_kernels.py", line_of(source, "return pl.pallas_call(")),
        (triton, "VMEM050", "gpu_kernels.py", line_of(source, "pl.BlockSpec((block, k)")),
        (triton, "VMEM050", "gpu_kernels.py", line_of(source, "pl.BlockSpec((k, block)")),
        (fp8, "VMEM052", "gpu_kernels.py", line_of(source, "return pl.pallas_call(", 2)),
        (op, "VMEM052", "capture_gpu_reports.py", op_line),
    }
