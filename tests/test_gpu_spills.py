"""Register spills as ptxas reports them (`check --spills`, issue 33): the `ptxas -v` parser on
ptxas's real reports (tests/data/reports/gpu/ptxas/, made by scripts/capture_ptxas.py through
vmem-lsp's own worker), and the CLI on tests/data/kernels/gpu_spills.py, where a Triton matmul
held by one warp spills on the A100 (VMEM054 on its pallas_call) and the same with four warps
does not; without --spills nothing is said. Mosaic GPU's own printed report is read too."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest
from support import KERNELS, line_of
from support.cli import run_json
from support.reports import PTXAS_REPORTS

from vmem_lsp.cli.check import report_unmeasured_spills
from vmem_lsp.compile.backend import CheckRequest, runner_for
from vmem_lsp.compile.cache import ResultCache
from vmem_lsp.config import Settings
from vmem_lsp.engine import request_for
from vmem_lsp.gpu import ptxas as gpu_spills
from vmem_lsp.gpu.ptxas import NO_PTXAS, Measure, find_ptxas, kernel_functions, parse_ptxas
from vmem_lsp.gpu.targets import gpu
from vmem_lsp.results import CapturedCall, ExampleResult
from vmem_lsp.source.directives import find_examples

SPILLS_FILE = KERNELS / "gpu_spills.py"
GPU_KERNELS = KERNELS / "gpu_kernels.py"
CAPTURED = sorted(PTXAS_REPORTS.glob("*.txt"))

# What each captured report says of its kernel: (entry function, whether it spills). A new
# capture is added here.
EXPECTED = {
    "triton-one-warp-a100": ("matmul_kernel", True),
    "triton-one-warp-h100": ("matmul_kernel", True),
    "triton-one-warp-l4": ("matmul_kernel", True),
    "triton-one-warp-b200": ("matmul_kernel", True),
    "triton-four-warps-a100": ("roomy_kernel", False),
    "triton-matmul-64-a100": ("matmul_kernel", True),
    "triton-matmul-64-h100": ("matmul_kernel", True),
    "mosaic-copy-h100": ("add_one_mosaic_gpu_kernel", False),
}


def report(path) -> str:
    """The captured report without its three `#` header lines."""
    return path.read_text().split("\n", 3)[3]


def target_of(path) -> str:
    """The target the header names: "# target: a100 (NVIDIA A100-SXM4-80GB), sm_80"."""
    return path.read_text().split("\n", 1)[0].split()[2]


def test_every_captured_report_is_expected():
    assert CAPTURED, "no captured ptxas reports: run scripts/capture_ptxas.py"
    assert sorted(p.stem for p in CAPTURED) == sorted(EXPECTED)


@pytest.mark.parametrize("path", CAPTURED, ids=lambda p: p.stem)
def test_each_report_parses_to_its_kernel_with_ptxas_own_figures(path):
    [function] = parse_ptxas(report(path))
    name, spills = EXPECTED[path.stem]
    assert (function.name, function.spills) == (name, spills)
    # ptxas compiles for the target's architecture, Hopper's and Blackwell's with their "a" features
    assert function.architecture is not None and function.architecture.removesuffix("a") == gpu(target_of(path)).sm
    assert function.registers is not None and 0 < function.registers <= 255  # a thread's registers at most
    # Every figure read is in a line of ptxas's, kept whole.
    assert f"{function.spill_stores} bytes spill stores, {function.spill_loads} bytes spill loads" in function.text
    assert f"{function.stack_frame} bytes stack frame" in function.text
    assert f"Used {function.registers} registers" in function.text
    assert all(line.strip() in report(path) for line in function.text.splitlines())


def test_a_kernel_is_found_by_its_name_among_the_functions_of_several_reports():
    triton, mosaic = (PTXAS_REPORTS / f"{name}.txt" for name in ("triton-one-warp-a100", "mosaic-copy-h100"))
    functions = parse_ptxas(report(triton) + report(mosaic))
    assert [f.name for f in functions] == ["matmul_kernel", "add_one_mosaic_gpu_kernel"]
    assert [f.name for f in kernel_functions(functions, "add_one")] == ["add_one_mosaic_gpu_kernel"]
    assert [f.name for f in kernel_functions(functions, "matmul_kernel")] == ["matmul_kernel"]
    assert len(kernel_functions(functions, "renamed")) == 2  # no entry of its name: every entry


def test_cut_and_shuffled_reports_never_raise():
    for path in CAPTURED:
        text = report(path)
        for cut in range(0, len(text), max(1, len(text) // 30)):
            parse_ptxas(text[:cut])
            parse_ptxas(text[cut:])
        parse_ptxas("\n".join(reversed(text.splitlines())))


def test_ptxas_is_the_wheels_here_and_none_without_it(monkeypatch, tmp_path):
    found = find_ptxas()
    assert found is not None and found.endswith("nvidia/cuda_nvcc/bin/ptxas"), found
    monkeypatch.delenv("CUDA_ROOT", raising=False)
    monkeypatch.setattr(gpu_spills, "_package_folders", lambda name: [])
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_ptxas() is None


def test_without_ptxas_a_kernel_has_one_clear_reason_and_the_cli_says_it_once(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(gpu_spills, "find_ptxas", lambda: None)
    # A PTX module as XLA dumps one (ptxas is never run: only its .target and .entry are read).
    (tmp_path / "module_0001.jit_k.1.ptx").write_text(".version 8.8\n.target sm_80\n.visible .entry k()\n{\nret;\n}\n")
    measure = Measure(str(tmp_path))
    measure.finish("")
    assert (measure.text, measure.missing) == (None, NO_PTXAS)
    call = CapturedCall("k", None, None, (), 0, (), (), None, True, None, 0.1, no_ptxas=NO_PTXAS)
    outcome = SimpleNamespace(results=[(None, None, ExampleResult("a100", None, calls=(call, call)))] * 2)
    report_unmeasured_spills(outcome)
    assert capsys.readouterr().err.splitlines() == [f"vmem-lsp: --spills: {NO_PTXAS}"]


def test_spills_are_asked_of_gpu_targets_only_and_keyed_only_when_asked(tmp_path):
    (example,), _ = find_examples(SPILLS_FILE.read_text().split("def roomy_kernel")[0], str(SPILLS_FILE))

    def asked(target: str) -> CheckRequest:
        return request_for(example, target, Settings(), spills=True)

    def plain(target: str) -> CheckRequest:
        return request_for(example, target, Settings())

    assert asked("a100").spills and not plain("a100").spills
    assert not asked("v5e").spills  # a TPU: --spills says nothing, and its key is unchanged
    cache = ResultCache(str(tmp_path))
    assert cache.key(asked("v5e")) == cache.key(plain("v5e"))
    assert cache.key(asked("a100")) != cache.key(plain("a100"))
    # Unasked, the key is the one a request without the field had.
    before = SimpleNamespace(**{k: v for k, v in vars(plain("a100")).items() if k != "spills"})
    assert cache.key(before) == cache.key(plain("a100"))  # type: ignore[arg-type]


# ---- the worker and the CLI, with the GPU compiler ------------------------------------------


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> tuple[dict, dict]:
    """gpu_spills.py on the A100 with --spills, then without (no cache)."""
    work = tmp_path_factory.mktemp("spills")
    shutil.copy(SPILLS_FILE, work / SPILLS_FILE.name)
    done, spills = run_json("check", SPILLS_FILE.name, "--target", "a100", "--spills", "--no-cache", cwd=work)
    assert done.returncode == 0, done.stderr  # a warning: the kernels compile
    done, plain = run_json("check", SPILLS_FILE.name, "--target", "a100", "--no-cache", cwd=work)
    assert done.returncode == 0, done.stderr
    return spills, plain


def test_the_kernel_that_spills_gets_vmem054_on_its_pallas_call_with_ptxas_words(checked):
    spills, _ = checked
    [warning] = [d for d in spills["diagnostics"] if d["code"] == "VMEM054"]
    assert warning["range"]["start_line"] == line_of(SPILLS_FILE, "return pl.pallas_call(")  # the one-warp kernel
    assert warning["severity"] == "warning" and warning["target"] == "a100"
    facts = warning["facts"]
    assert facts["kernel"] == "matmul_kernel" and facts["architecture"] == "sm_80"
    assert facts["spill_stores"] > 0 and facts["spill_loads"] > 0 and facts["registers"] == 255
    assert f"{facts['spill_stores']} bytes spill stores" in facts["text"]  # ptxas's own words
    assert warning["message"] == (
        f"matmul_kernel spills {facts['spill_stores']} bytes to local memory (stores), {facts['spill_loads']} "
        f"(loads) on NVIDIA A100-SXM4-80GB (sm_80); registers: 255 per thread"
    )


def test_the_four_warp_kernel_and_a_check_without_spills_say_nothing_of_spills(checked):
    spills, plain = checked
    four_warps = line_of(SPILLS_FILE, "return pl.pallas_call(", nth=1)
    assert not [d for d in spills["diagnostics"] if d["code"] == "VMEM054" and d["range"]["start_line"] == four_warps]
    assert not [d for d in plain["diagnostics"] if d["code"] == "VMEM054"]
    assert len([d for d in plain["diagnostics"] if d["code"] == "VMEM007"]) == 2  # both still compile


@pytest.mark.compiler
def test_mosaic_gpus_own_report_is_read_and_a_kernel_it_compiled_unasked_says_why_it_has_none():
    settings = Settings(jobs=1)
    runner = runner_for(settings)

    def copy(rows: int, spills: bool = True) -> CapturedCall:
        request = CheckRequest(f"mosaic_copy(f32[4096, 128], rows={rows})", "h100", str(GPU_KERNELS), spills=spills)
        [call] = runner.check(request, settings.limits()).calls
        return call

    try:
        asked = copy(64)
        copy(32, spills=False)
        again, refused = copy(32), copy(256)
    finally:
        runner.stop()
    [function] = parse_ptxas(asked.ptxas or "")
    assert function.name == "add_one_mosaic_gpu_kernel" and function.architecture == "sm_90a"
    assert not function.spills and asked.no_ptxas is None
    # Mosaic GPU keeps what it compiled by its hash: unasked the first time, it prints nothing again.
    assert again.fits and again.ptxas is None and "Mosaic GPU compiled it before" in (again.no_ptxas or "")
    assert not refused.fits and refused.ptxas is None and refused.no_ptxas is None  # over shared memory: no ptxas


def test_a_worker_the_compiler_ends_mid_compile_leaves_no_ptx_dump_behind(tmp_path):
    """The fp8 dot ends the A100 worker while its PTX dump folder and its GPU compile's
    files exist: the client removes them."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    shutil.copy(KERNELS / "gpu_kernels.py", tmp_path / "gpu_kernels.py")
    done, report = run_json(
        "check", "gpu_kernels.py", "--target", "a100", "--spills", "--no-cache", cwd=tmp_path, env={"TMPDIR": str(temp)}
    )
    assert [d for d in report["diagnostics"] if d["code"] == "VMEM052" and "compute capability" in d["message"]]
    assert not [p.name for p in temp.iterdir() if p.name.startswith(("vmem-lsp-ptx-", "vmem-lsp-gpu-compile-"))]
