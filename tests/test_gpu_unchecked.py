"""Never a fit that was not checked, on GPUs (issue 41, item 2): with no GPU compiler here, and
with `check --no-compile`, a GPU target never passes what nothing compiled.

No compiler: a real Python environment in which jax's CUDA plugin is not installed. jax finds
its plugins in two places (jax/_src/xla_bridge.py, discover_pjrt_plugins): modules of the
`jax_plugins` namespace package, and the `jax_plugins` entry-point group of the installed
distributions' metadata. The environment made here (`plugin_free`) is a venv whose
site-packages links every entry of this interpreter's but the plugin's (`jax_plugins/`, the
`jax_cuda12_plugin` and `jax_cuda12_pjrt` distributions): jax imports as usual and finds no
plugin, as after `pip install 'jax[tpu]'` alone. It takes a fraction of a second and no
download (a venv made by pip would need the network). vmem-lsp runs there as its own
interpreter, and as the project's interpreter (`--python`, the tool install: docs/tool-install.md)
of a vmem-lsp that has the plugin; the language server and the tuner API are asked too.

--no-compile: jax's own Triton kernels (tests/data/kernels/jax_gpu_ops.py) compiled here first,
directly through a worker (deviceless: a compile-only CUDA device), for the compiler's verdict;
then `check --no-compile` may call none of the kernels the compiler refuses a fit, and no
VMEM007 of its is the compiler's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from importlib.metadata import version
from pathlib import Path

import pytest
from lsprotocol import types
from support import EXAMPLES, KERNELS, ROOT
from support.cli import run_cli, run_json
from support.lsp_client import Editor, compiler_tier, running_server, wait_for
from support.tiers import COMPILER, starts

from vmem_lsp.compile.client import CheckRequest
from vmem_lsp.gpu.report import parse_gpu_report
from vmem_lsp.source.directives import find_examples

OPS = KERNELS / "jax_gpu_ops.py"
GPU_KERNELS = KERNELS / "gpu_kernels.py"
INSTALL = "pip install 'vmem-lsp[gpu]'"
# Entries of site-packages that make jax's CUDA plugin, or vmem-lsp itself (loaded from the
# checkout through PYTHONPATH instead).
LEFT_OUT = ("jax_plugins", "jax_cuda12_plugin", "jax_cuda12_pjrt", "vmem_lsp", "__editable__", "__pycache__")
PROBE = (
    "import importlib.util, json\n"
    "from importlib.metadata import entry_points\n"
    "print(json.dumps({'namespace': importlib.util.find_spec('jax_plugins') is not None,"
    " 'entry_points': [e.value for e in entry_points(group='jax_plugins')],"
    " 'jax': importlib.util.find_spec('jax') is not None, 'libtpu': importlib.util.find_spec('libtpu') is not None}))\n"
)


def linked_venv(folder: Path, left_out: tuple[str, ...]) -> tuple[Path, dict]:
    """The python of a venv whose site-packages links this one's entries but `left_out`'s,
    and what it finds of jax, libtpu and the CUDA plugin."""
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    [site] = venv.glob("lib/python*/site-packages")
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(left_out):
            (site / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    python = venv / "bin" / "python"
    said = json.loads(subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, timeout=60).stdout)
    return python, said


@pytest.fixture(scope="module")
@starts(COMPILER)
def plugin_free(tmp_path_factory) -> Path:
    """The python of a venv with this one's packages but jax's CUDA plugin."""
    python, said = linked_venv(tmp_path_factory.mktemp("no-cuda-plugin"), LEFT_OUT)
    assert said == {"namespace": False, "entry_points": [], "jax": True, "libtpu": True}, said
    return python


@starts(COMPILER)
def run_in(python: Path, *args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """vmem-lsp from this checkout, run by `python` (its own interpreter: its worker too)."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    return subprocess.run(
        [str(python), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def project(folder: Path, *files: Path, targets: str = '["h100"]') -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy(f, folder / f.name)
    (folder / "pyproject.toml").write_text(f"[tool.vmem-lsp]\ntargets = {targets}\ncache-dir = '.cache'\n")
    return folder


def not_checked(diagnostic: dict) -> bool:
    return diagnostic["code"] == "VMEM012" and diagnostic["severity"] == "error" and INSTALL in diagnostic["message"]


# ---- no GPU compiler here ------------------------------------------------------------------------


def test_without_the_plugin_check_fails_with_vmem012_saying_what_to_install(plugin_free, tmp_path):
    work = project(tmp_path / "p", EXAMPLES / "copy_whole.py")
    done = run_in(plugin_free, "-m", "vmem_lsp", "check", "copy_whole.py", "--target", "h100", "--no-cache", cwd=work)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "error VMEM012 example not checked on NVIDIA H100 80GB HBM3: no GPU compiler for h100" in done.stdout
    assert INSTALL in done.stdout and "1 error in 1 example" in done.stdout and "0 compiled" in done.stdout
    assert "VMEM007" not in done.stdout


def test_a_project_python_without_the_plugin_fails_the_gpu_and_still_compiles_the_tpu(plugin_free, tmp_path):
    """Installed as a tool: vmem-lsp has the plugin, the project's interpreter (--python) has not.
    The TPU chip's fit does not hide that the GPU was not checked."""
    work = project(tmp_path / "p", EXAMPLES / "add_fits.py")
    done, report = run_json(
        "check", "add_fits.py", "--target", "v5e,h100", "--python", str(plugin_free), "--no-cache", cwd=work
    )
    assert done.returncode == 1, done.stderr
    [unchecked] = [d for d in report["diagnostics"] if d["code"] == "VMEM012"]
    assert (
        not_checked(unchecked) and unchecked["target"] == "h100" and unchecked["facts"]["error_kind"] == "no_compiler"
    )
    fits = [d for d in report["diagnostics"] if d["code"] == "VMEM007"]
    assert [(d["target"], d["origin"]) for d in fits] == [("v5e", "compiler")]


def test_a_gpu_only_project_python_compiles_its_gpu_targets_and_is_refused_for_a_tpu_one(tmp_path):
    """A GPU user's own venv (jax and its CUDA plugin, no libtpu) as --python: the H100 is
    compiled there (the overflow is the compiler's VMEM051, exit 1), where it was refused
    for the missing libtpu (exit 2); a TPU chip still is, saying what to install."""
    python, said = linked_venv(tmp_path, ("libtpu", "vmem_lsp", "__editable__", "__pycache__"))
    assert said["jax"] and not said["libtpu"] and said["entry_points"], said
    work = project(tmp_path / "p", GPU_KERNELS)
    done, report = run_json(
        "check", GPU_KERNELS.name, "--target", "h100", "--python", str(python), "--no-cache", cwd=work
    )
    assert done.returncode == 1, done.stderr
    refused = [d for d in report["diagnostics"] if d["code"] == "VMEM051"]
    assert refused and all(d["origin"] == "compiler" and d["target"] == "h100" for d in refused), refused
    tpu = run_cli("check", GPU_KERNELS.name, "--target", "v5e", "--python", str(python), "--no-cache", cwd=work)
    assert tpu.returncode == 2 and "has no libtpu" in tpu.stderr, (tpu.returncode, tpu.stderr)


def test_a_sweep_without_the_plugin_decides_nothing_and_exits_1(plugin_free, tmp_path):
    work = project(tmp_path / "p", GPU_KERNELS)
    spec = "gpu_kernels.py:triton_matmul(f32[1024, 512], f32[512, 1024], block=[32, 64])"
    done = run_in(
        plugin_free, "-m", "vmem_lsp", "sweep", spec, "--target", "a100", "--format", "json", "--no-cache", cwd=work
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert [c["fits"] for c in report["configs"]] == [None, None]
    assert report["compiles"] == 0 and INSTALL in report["no_compiler"]["a100"]
    assert "vmem-lsp sweep: a100: not checked: no GPU compiler for a100" in done.stderr


TUNER = """
import json
import jax
import jax.numpy as jnp
import vmem_lsp
from gpu_kernels import triton_matmul
from jax_gpu_ops import attention

if __name__ == "__main__":
    f32 = jnp.float32
    x, y = jax.ShapeDtypeStruct((1024, 512), f32), jax.ShapeDtypeStruct((512, 1024), f32)
    qkv = [jax.ShapeDtypeStruct((1, 2048, 2, 128), f32)] * 3
    said = {
        "compiled": vmem_lsp.fits(triton_matmul, x, y, target="h100", block=64),
        "traced": vmem_lsp.fits(attention, *qkv, target="h100", block_q=128, block_k=128, compile=False),
    }
    print(json.dumps({k: {"fits": v.fits, "decided_by": v.decided_by, "error": v.error} for k, v in said.items()}))
"""


def test_the_tuner_api_without_the_plugin_never_says_fits(plugin_free, tmp_path):
    """fits() asks the compiler: there is none, so undecided with why. fits(compile=False) of jax's
    attention, which the compiler refuses (262144 bytes of the H100's 232448, compiled in
    test_no_compile_calls_no_kernel_the_compiler_finds_over_its_shared_memory_a_fit): the model,
    which follows its k tile through the transpose (gpu/kernel.py), says it does not fit; never True."""
    work = project(tmp_path / "p", GPU_KERNELS, OPS)
    (work / "tune.py").write_text(TUNER)
    done = run_in(plugin_free, "tune.py", cwd=work)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["compiled"]["fits"] is None and said["compiled"]["decided_by"] == "error"
    assert INSTALL in said["compiled"]["error"]
    assert said["traced"]["fits"] is False and said["traced"]["decided_by"] == "model"


@pytest.mark.asyncio
async def test_the_language_server_shows_vmem012_as_an_error(plugin_free, tmp_path):
    work = project(tmp_path / "p", EXAMPLES / "copy_whole.py")
    async with running_server(work, options={"python": str(plugin_free)}) as client:
        statuses: list = []
        client.feature("vmemLsp/status")(lambda params: statuses.append(params))
        editor = Editor(client, work / "copy_whole.py")
        editor.open()
        [found] = await wait_for(
            lambda: [d for d in compiler_tier(editor.diagnostics()) if d.code == "VMEM012"], what="VMEM012"
        )
        [status] = await wait_for(lambda: [s for s in statuses if s.state == "no_compiler"], what="the status")
    assert found.severity == types.DiagnosticSeverity.Error
    assert INSTALL in found.message and "NVIDIA H100" in found.message
    assert INSTALL in status.message  # the status item says it too, not "compiled 1 pair"


# ---- --no-compile: the shared-memory model's verdict -------------------------------------------


def examples_of(path: Path) -> list[str]:
    found, errors = find_examples(path.read_text(), str(path))
    assert not errors
    return [e.text for e in found]


@pytest.fixture(scope="module")
def compiler_says(worker) -> dict:
    """(example, target) -> what XLA's GPU compiler says of it: "fits" (every kernel compiles),
    else the form of its first refusal ("shared_memory": an overflow; "unsupported_op": Mosaic
    GPU's bulk copies on the A100). Each example of jax_gpu_ops.py and gpu_kernels.py's Mosaic
    GPU copies compiled here, deviceless, for the H100 and the A100."""
    said = {}
    cases = [(OPS, e) for e in examples_of(OPS)]
    cases += [(GPU_KERNELS, e) for e in examples_of(GPU_KERNELS) if e.startswith("mosaic_copy")]
    for target in ("h100", "a100"):
        for path, example in cases:
            result = worker.check(CheckRequest(example, target, path=str(path)), 300)
            assert result.error is None and result.calls, (example, target, result.error)
            assert all(c.compiled for c in result.calls)
            refused = [parse_gpu_report(c.compiler_text or "") for c in result.calls if not c.fits]
            said[(example, target)] = refused[0].form if refused else "fits"
    return said


@pytest.fixture(scope="module")
def no_compile(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    work = project(tmp_path_factory.mktemp("no-compile"), OPS, GPU_KERNELS)
    return run_json(
        "check", OPS.name, GPU_KERNELS.name, "--target", "h100,a100", "--no-compile", "--no-cache", cwd=work
    )


def covered(report: dict) -> dict:
    """(example, target) -> the codes of the diagnostics said of it, by their related examples."""
    said: dict = {}
    for d in report["diagnostics"]:
        examples = [r["message"].removeprefix("example ") for r in d["related"] if r["message"].startswith("example ")]
        for example in examples:
            for target in (d["target"] or "").split(","):
                said.setdefault((example, target), []).append(d)
    return said


def test_no_compile_calls_no_kernel_the_compiler_finds_over_its_shared_memory_a_fit(compiler_says, no_compile):
    done, report = no_compile
    assert done.returncode == 1 and "traced (layout model only)" in report["summary"], done.stderr
    said = covered(report)
    over = [pair for pair, verdict in compiler_says.items() if verdict == "shared_memory"]
    assert len(over) == 8, compiler_says  # three attentions and the big Mosaic GPU copy, on both GPUs
    for pair in over:
        codes = {d["code"] for d in said.get(pair, [])}
        assert "VMEM007" not in codes, (pair, said.get(pair))
        assert codes & {"VMEM051", "VMEM006"}, (pair, said.get(pair))
    for pair in (p for p, verdict in compiler_says.items() if verdict == "fits"):  # never above the compiler
        assert not [d for d in said.get(pair, []) if d["severity"] == "error"], (pair, said[pair])


def test_an_attention_the_compiler_refuses_is_an_overflow_by_the_model_with_the_compilers_figure(
    compiler_says, no_compile
):
    """jax's mha transposes its key tiles before the dot; the model follows the tile through it
    (it once had no rule for it and put this at 192 KiB, a lower bound): 256 KiB, the compiler's
    own request, over the H100's 227 KiB, an error by the model."""
    example = "attention(f32[1, 2048, 2, 128], f32[1, 2048, 2, 128], f32[1, 2048, 2, 128], block_q=128, block_k=128)"
    assert compiler_says[(example, "h100")] == "shared_memory"
    [total] = [d for d in covered(no_compile[1])[(example, "h100")] if d["code"] == "VMEM051"]
    assert total["severity"] == "error" and total["origin"] == "model"
    assert "needs ~256.0K of shared memory" in total["message"], total["message"]


def test_an_overflow_the_model_sees_is_an_error_marked_as_its_estimate(no_compile):
    example = (
        "attention(f32[1, 2048, 2, 256], f32[1, 2048, 2, 256], f32[1, 2048, 2, 256], block_q=128, block_k=128, "
        "num_stages=3)"
    )
    [total] = [d for d in covered(no_compile[1])[(example, "h100")] if d["code"] == "VMEM051"]
    assert total["severity"] == "error" and total["origin"] == "model"
    assert "Triton kernel mha_forward needs ~" in total["message"]
    assert "layout model estimate, not compiled" in total["message"]


def test_no_compile_says_no_kernel_compiles_and_its_fits_are_the_models(no_compile):
    report = no_compile[1]
    fits = [d for d in report["diagnostics"] if d["code"] == "VMEM007"]
    assert {f["message"].split(" fits ")[0] for f in fits} >= {
        "pallas_call _vmappable_softmax_kernel",
        "pallas_call layer_norm_forward_kernel",
        "pallas_call add_one",
    }
    assert all(f["origin"] == "model" and "fits by the layout model" in f["message"] for f in fits), fits
    assert not [d for d in report["diagnostics"] if "compiles" in d["message"]]
    assert not [d for d in report["diagnostics"] if d["origin"] == "compiler" and d["code"] != "VMEM015"]


def test_with_the_compiler_the_same_kernels_are_its_own(tmp_path):
    """The contrast: compiled, a kernel that fits is the compiler's VMEM007 ("compiles")."""
    work = project(tmp_path / "p", OPS)
    done, report = run_json("check", OPS.name, "--target", "h100", "--no-cache", cwd=work)
    assert done.returncode == 1, done.stderr
    fits = [d for d in report["diagnostics"] if d["code"] == "VMEM007"]
    assert fits and all(d["origin"] == "compiler" and " compiles: " in d["message"] for d in fits)
    assert not [d for d in report["diagnostics"] if d["code"] == "VMEM006"]


@pytest.mark.skipif(
    tuple(int(p) for p in version("jax").split(".")[:2]) < (0, 10), reason="plgpu.kernel lowers through mpmd_map"
)
def test_no_compile_never_calls_a_plgpu_kernel_a_fit(tmp_path):
    """jax's own plgpu.kernel matmuls and attentions (tests/data/kernels/gpu_mosaic_kernels.py): the
    model counts what their bodies allocate, not what their ops take; under the limit a lower bound."""
    work = project(tmp_path / "p", KERNELS / "gpu_mosaic_kernels.py")
    done, report = run_json(
        "check", "gpu_mosaic_kernels.py", "--target", "h100", "--no-compile", "--no-cache", cwd=work
    )
    assert done.returncode == 1, done.stderr
    said = covered(report)
    examples = examples_of(KERNELS / "gpu_mosaic_kernels.py")
    for example in examples:
        codes = {d["code"] for d in said.get((example, "h100"), [])}
        assert "VMEM007" not in codes and codes & {"VMEM006", "VMEM051"}, (example, codes)
    lower = [d for d in report["diagnostics"] if d["code"] == "VMEM006"]
    assert lower and all("what a plgpu.kernel's body allocates" in d["message"] for d in lower)
    assert all(d["origin"] == "model" for d in report["diagnostics"]), report["diagnostics"]
