"""jax's own Mosaic GPU kernels as jax writes them (issue 41): `plgpu.kernel`, which lowers
through mpmd_map and not pallas_call, checked by `vmem-lsp check` as a subprocess for the H100
and the A100, each verdict held against a direct deviceless compile of the same example made
here (support/gpu_direct.py): the errors on the lines that allocate the shared memory (the
pipelines' BlockSpecs, the plgpu.SMEM scratch), with the compiler's figures, exit 1; Hopper's
wgmma said as unsupported on the A100's sm_80."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version

import pytest
from support import KERNELS, ROOT
from support.cli import run_json
from support.gpu_direct import in_a_process

from vmem_lsp.gpu.targets import gpu

# In the range step too, where its venv has jax's CUDA plugin (scripts/check_range.py's +gpu):
# plgpu.kernel lowers through mpmd_map from jax 0.10 on.
pytestmark = pytest.mark.range
pytest.importorskip("jax_cuda12_plugin", reason="this venv has no CUDA plugin (check_range's +gpu adds it)")
JAX = tuple(int(p) for p in version("jax").split(".")[:2])
if JAX < (0, 10):
    pytest.skip("plgpu.kernel lowers through mpmd_map from jax 0.10 on", allow_module_level=True)

KERNEL_FILE = KERNELS / "gpu_mosaic_kernels.py"
OPS = "jax/experimental/pallas/ops/gpu/"

# (function, its args, kwargs) as the file's `# vmem:` lines give them, and the line of that example
EXAMPLES = [
    ("grouped", [[[4096, 2048], "float16"], [[16, 2048, 4096], "float16"], [[16], "int32"]], {}),
    (
        "grouped",
        [[[4096, 2048], "float16"], [[16, 2048, 4096], "float16"], [[16], "int32"]],
        {"block_m": 192, "block_n": 192, "steps": 6},
    ),
    ("fa3", [[[1, 4096, 16, 128], "float16"]] * 3, {}),
    ("fa3", [[[1, 4096, 16, 256], "float16"]] * 3, {"block_kv": 256}),
    ("fa3_emitter", [[[1, 4096, 16, 128], "float16"]] * 3, {}),
    ("fa3_emitter", [[[1, 4096, 16, 256], "float16"]] * 3, {"block_kv": 256, "steps": 4}),
    ("hopper", [[[4096, 4096], "float16"], [[4096, 8192], "float16"], [[4096, 8192], "float16"]], {}),
    (
        "hopper",
        [[[4096, 4096], "float16"], [[4096, 8192], "float16"], [[4096, 8192], "float16"]],
        {"tile_m": 256, "tile_n": 256, "steps": 6},
    ),
    ("blackwell", [[[4096, 4096], "float16"], [[4096, 8192], "float16"]], {}),
    ("blackwell", [[[4096, 4096], "float16"], [[4096, 8192], "float16"]], {"tile_n": 256, "steps": 8}),
]
TARGETS = ("h100", "a100", "b200")


def example_lines() -> list[int]:
    lines = KERNEL_FILE.read_text().splitlines()
    return [n for n, line in enumerate(lines, 1) if line.startswith("# vmem: ")]


def direct(target: str) -> list[dict]:
    """Each of EXAMPLES compiled directly for `target`, in one process; an example whose
    compile ends that process (an LLVM fatal error) is refused, and the rest go on in another."""
    verdicts: list[dict] = []
    while len(verdicts) < len(EXAMPLES):
        calls = [{"function": f, "args": a, "kwargs": k} for f, a, k in EXAMPLES[len(verdicts) :]]
        request = {"file": str(KERNEL_FILE), "target": target, "calls": calls}
        done = subprocess.run(
            [sys.executable, "-m", "support.gpu_direct", json.dumps(request)],
            capture_output=True,
            text=True,
            cwd=ROOT / "tests",
            env={**os.environ, "PYTHONPATH": str(ROOT / "tests")},
            timeout=900,
        )
        if done.returncode < 0:  # the one compiling ended the process: refused, no figure
            said = done.stdout.count("\n")  # each verdict is printed as it comes (gpu_direct's main)
            verdicts += [json.loads(line) for line in done.stdout.splitlines()[:said]]
            verdicts.append({"fits": False, "requested": None, "available": None, "error": done.stderr[-2000:]})
            continue
        assert done.returncode == 0, done.stderr[-3000:]
        verdicts += [json.loads(line) for line in done.stdout.strip().splitlines()]
    return verdicts


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    work = tmp_path_factory.mktemp("mgpu")
    shutil.copy(KERNEL_FILE, work / KERNEL_FILE.name)
    return run_json("check", KERNEL_FILE.name, "--target", ",".join(TARGETS), "--no-cache", cwd=work)


def on(report: dict, code: str, target: str) -> list[dict]:
    """The diagnostics of `code` that hold for `target` (merged over targets or not)."""
    found = []
    for d in report["diagnostics"]:
        facts = d["facts"].get("targets", {d.get("target"): d["facts"]})
        if d["code"] == code and target in facts:
            found.append({**d, "facts": facts[target]})
    return found


def verdict_of(report: dict, line: int, target: str) -> tuple[bool, int | None]:
    """(fits, the compiler's requested bytes) the tool gave the example on `line`."""
    example = f"{KERNEL_FILE.name}:{line}"
    refused = [d for d in on(report, "VMEM051", target) if d["facts"]["example"].endswith(example)]
    if refused:
        return False, refused[0]["facts"]["requested"]
    # VMEM004: refused by the compiler; VMEM010 as an error: jax refused it while tracing (jax 0.12's
    # emit_pipeline on an A100); VMEM052 on the body's line: the compiler ended the worker over an
    # op the architecture lacks (jax 0.12's tcgen05 on the H100); either way not a fit
    failed = [
        d for d in on(report, "VMEM004", target) + on(report, "VMEM010", target) if d["range"]["start_line"] == line
    ] + [d for d in on(report, "VMEM052", target) if d["facts"].get("example", "").endswith(example)]
    assert all(d["severity"] == "error" for d in failed)
    return not failed, None


def test_plgpu_kernels_are_compiled_and_each_verdict_is_the_direct_compiles(checked):
    done, report = checked
    assert done.returncode == 1, done.stderr[-2000:]
    assert not on(report, "VMEM010", "h100"), "every example is checked on the H100"
    for target in TARGETS:
        for line, (function, _, kwargs), expected in zip(example_lines(), EXAMPLES, direct(target), strict=True):
            fits, requested = verdict_of(report, line, target)
            assert fits == expected["fits"], (function, kwargs, target, expected["error"])
            if expected["requested"] is not None:
                assert requested == expected["requested"], (function, kwargs, target)


def test_the_pipeline_buffers_over_the_h100_are_errors_on_their_blockspec_lines(checked):
    _, report = checked
    buffers = [d for d in on(report, "VMEM050", "h100") if d["path"].endswith("ragged_dot_mgpu.py")]
    lines = {d["range"]["start_line"] for d in buffers}
    text = open(buffers[0]["abs_path"]).read().splitlines()
    assert all("plgpu.BlockSpec(" in text[n - 1] for n in lines) and len(lines) == 2, [text[n - 1] for n in lines]
    for d in buffers:
        assert d["severity"] == "error"
        assert "pipeline buffers 6 x f16[" in d["message"] and "227.0K available on NVIDIA H100" in d["message"]
        assert d["facts"]["available"] == gpu("h100").shared_memory_limit
    [total] = [d for d in on(report, "VMEM051", "h100") if d["path"].endswith("ragged_dot_mgpu.py")]
    assert "Mosaic GPU kernel body needs 288.0K of shared memory" in total["message"]
    assert "return kernel(group_sizes, lhs, rhs)" in text[total["range"]["start_line"] - 1]


def test_the_warp_specialized_pipelines_k_and_v_blockspecs_are_marked(checked):
    _, report = checked
    marked = [d for d in on(report, "VMEM050", "h100") if d["path"].endswith("attention_mgpu.py")]
    text = open(marked[0]["abs_path"]).read().splitlines()
    said = {text[d["range"]["start_line"] - 1].strip() for d in marked}
    assert {"plgpu.BlockSpec(  # k", "plgpu.BlockSpec(  # v"} <= said, said


def test_hoppers_wgmma_is_unsupported_on_the_a100_on_a_line_of_the_kernel_body(checked):
    _, report = checked
    if JAX >= (0, 11):  # jax refuses the kernel itself on pre-Hopper GPUs, before any wgmma is emitted
        refused = [d for d in on(report, "VMEM010", "a100") if "pre-Hopper" in d["message"]]
        assert refused and all(d["severity"] == "error" for d in refused), on(report, "VMEM010", "a100")
        return
    [unsupported] = [d for d in on(report, "VMEM052", "a100") if "ragged_dot_mgpu.py" in d["path"]]
    assert "'nvvm.wgmma" in unsupported["message"] and "sm_80" in unsupported["message"]
    assert OPS in unsupported["abs_path"]
    text = open(unsupported["abs_path"]).read().splitlines()
    assert "plgpu.wgmma(" in text[unsupported["range"]["start_line"] - 1]  # not MLIR's line of the pipeline


def test_blackwells_tcgen05_on_the_h100_is_said_on_the_line_of_the_kernel_body_that_makes_it(checked):
    """jax 0.10's Mosaic GPU says 'nvvm.tcgen05.alloc' is not supported on sm_90a; jax 0.12's
    ends the compiler's process in LLVM (Cannot select: intrinsic %llvm.nvvm.tcgen05...), read
    from what the worker noted before compiling. Either way VMEM052, an error, on the body's
    tcgen05 op, not a worker crash (VMEM010)."""
    _, report = checked
    line = example_lines()[[f for f, _, _ in EXAMPLES].index("blackwell")]
    example = f"{KERNEL_FILE.name}:{line}"
    [said] = [d for d in on(report, "VMEM052", "h100") if d["facts"]["example"].endswith(example)]
    assert said["severity"] == "error" and "tcgen05" in said["message"], said["message"]
    assert said["abs_path"].endswith(OPS + "blackwell_matmul_mgpu.py"), said["abs_path"]
    text = open(said["abs_path"]).read().splitlines()
    assert "tcgen05" in text[said["range"]["start_line"] - 1], text[said["range"]["start_line"] - 1]


def test_what_fits_is_said_with_the_shared_memory_it_allocates(checked):
    _, report = checked
    fits = [d for d in on(report, "VMEM007", "h100") if "ragged_dot_mgpu.py" in d["path"]]
    assert fits and "shared memory f16[4,128,64], f16[4,64,128]" in fits[0]["message"], fits


MOSAIC_PALLAS_CALL = """import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu


def add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


# vmem: copy(f32[4096, 128])
def copy(x, rows=64):
    n, m = x.shape
    return pl.pallas_call(
        add_one,
        out_shape=jax.ShapeDtypeStruct((n, m), jnp.float32),
        grid=(n // rows,),
        in_specs=[pl.BlockSpec((rows, m), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((rows, m), lambda i: (i, 0)),
        compiler_params=plgpu.CompilerParams(),
    )(x)
"""


def test_a_pallas_call_with_mosaic_gpu_params_is_what_this_jax_makes_of_it(tmp_path):
    """jax 0.10 lowers it with Mosaic GPU (it fits); jax 0.12 registers no pallas_call lowering for
    Mosaic GPU's params and fails on a bare assert: the tool says which, and why, never an empty
    'the compiler rejected this kernel: '. The direct compile in the test decides which."""
    (tmp_path / "mosaic_call.py").write_text(MOSAIC_PALLAS_CALL)
    [direct] = in_a_process(
        str(tmp_path / "mosaic_call.py"),
        "h100",
        [{"function": "copy", "args": [[[4096, 128], "float32"]], "kwargs": {}}],
    )
    done, report = run_json("check", "mosaic_call.py", "--target", "h100", "--no-cache", cwd=tmp_path)
    rejected = [d for d in report["diagnostics"] if d["code"] == "VMEM011"]
    if direct["fits"]:
        assert done.returncode == 0 and not rejected, report["diagnostics"]
        return
    assert "AssertionError" in direct["error"] or not direct["error"].strip(), direct
    [said] = rejected
    assert (
        done.returncode == 1
        and said["range"]["start_line"] == MOSAIC_PALLAS_CALL.splitlines().index("    return pl.pallas_call(") + 1
    )
    assert f"jax {version('jax')} has no pallas_call lowering for Mosaic GPU's CompilerParams" in said["message"]
    assert "plgpu.kernel" in said["message"]
