"""Kernels that ask jax which chip they run on are traced as that chip: in
check, the server, sweep and vmem_lsp.fits (tests/data/kernels/chip_aware.py:
4096-row blocks on v5e, 8 rows anywhere else, the CPU included). Traced as a
CPU, every verdict here would be "fits"."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from support import KERNELS
from support.cli import run_json
from support.lsp_client import Editor, compiler_tier, running_server, wait_for

CHIPS = ("v5e", "v6e", "v7x")


@pytest.fixture
def kernels(tmp_path):
    shutil.copy(KERNELS / "chip_aware.py", tmp_path / "chip_aware.py")
    return tmp_path


def chips_with_errors(diagnostics: list[dict], code: str = "VMEM002") -> dict[int, set[str]]:
    """Line of each pallas_call -> the chips its error names."""
    found: dict[int, set[str]] = {}
    for d in diagnostics:
        if d["code"] == code:
            found.setdefault(d["range"]["start_line"], set()).update(d["target"].split(","))
    return found


def test_check_traces_each_chip_down_the_branch_it_takes(kernels):
    """One worker serves every chip in turn (--jobs 1): `scale`'s block size is asked once
    and kept by functools.cache, so its module is imported again for each chip it asked on."""
    done, report = run_json("check", "chip_aware.py", "--target", ",".join(CHIPS), "--jobs", "1", cwd=kernels)
    assert done.returncode == 1, done.stderr
    errors = chips_with_errors(report["diagnostics"])
    assert len(errors) == 3 and all(chips == {"v5e"} for chips in errors.values()), errors
    windows = [d for d in report["diagnostics"] if d["code"] == "VMEM001"]
    assert windows and all("f32[4096,4096]" in d["message"] for d in windows)
    fits = [d for d in report["diagnostics"] if d["code"] == "VMEM007"]
    assert sorted(d["range"]["start_line"] for d in fits) == sorted(errors)
    assert all(d["target"] == "v6e,v7x" and "f32[8,4096]" in d["message"] for d in fits), fits
    interpreted = [d for d in report["diagnostics"] if d["code"] == "VMEM014"]
    assert [(d["severity"], d["target"]) for d in interpreted] == [("warning", "v5e,v6e,v7x")], interpreted


TUNER = """
import sys
sys.path.insert(0, {folder!r})
import jax, jax.numpy as jnp
import vmem_lsp
from chip_aware import add_one

if __name__ == "__main__":
    x = jax.ShapeDtypeStruct((8192, 4096), jnp.float32)
    compiled = [vmem_lsp.fits(add_one, x, target=t).fits for t in {chips!r}]
    traced = [vmem_lsp.fits(add_one, x, target=t, compile=False).fits for t in {chips!r}]
    print(repr((compiled, traced)))
"""


def test_fits_answers_for_the_chip_it_is_asked_about(kernels):
    (kernels / "tune.py").write_text(TUNER.format(folder=str(kernels), chips=CHIPS))
    done = subprocess.run([sys.executable, "tune.py"], cwd=kernels, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    compiled, traced = eval(done.stdout.strip().splitlines()[-1])
    assert compiled == [False, True, True] and traced == [False, True, True]


def test_a_sweep_traces_each_config_as_the_chip(kernels):
    done, report = run_json(
        "sweep", "chip_aware.py:scale(f32[8192, 4096], factor=[2, 3])", "--target", ",".join(CHIPS), cwd=kernels
    )
    assert done.returncode == 0, done.stderr
    verdicts = {(c["target"], c["params"]["factor"]): c["fits"] for c in report["configs"]}
    assert verdicts == {(t, f): t != "v5e" for t in CHIPS for f in (2, 3)}, verdicts


@pytest.mark.asyncio
async def test_the_server_checks_each_chip_down_its_branch(kernels):
    (kernels / "pyproject.toml").write_text('[tool.vmem-lsp]\ntargets = ["v5e", "v6e"]\ncache-dir = ".cache"\n')
    async with running_server(kernels) as client:
        editor = Editor(client, kernels / "chip_aware.py")
        editor.open()
        found = await wait_for(
            lambda: [d for d in compiler_tier(editor.diagnostics()) if d.code == "VMEM002"] or None,
            what="the compiler's verdict",
        )
        assert found and all("TPU v5e" in d.message and "TPU v6e" not in d.message for d in found), [
            d.message for d in found
        ]


def test_devices_answer_as_the_target_only_while_the_example_runs(tmp_path):
    """In the worker: jax.devices() and friends give the target's devices inside
    `seen_as` when user code asks, jax's own outside it, for another backend named,
    and to jax's own machinery (which puts constants on a real device)."""
    code = """
import jax
from vmem_lsp.compile import chip_view, devices
chip_view.install()
tpu = devices.target_devices("v6e")
with chip_view.seen_as(tpu):
    inside = (jax.devices()[0].device_kind, jax.default_backend(), jax.device_count(),
              jax.local_devices()[0].platform, jax.devices("tpu")[0].device_kind, jax.devices("cpu")[0].platform)
    machinery = jax.numpy.asarray([1, 2]).devices().pop().platform
asked = chip_view.take_asked()
print(repr((inside, machinery, jax.devices()[0].platform, jax.default_backend(), asked, chip_view.take_asked())))
"""
    (tmp_path / "ask.py").write_text(code)
    done = subprocess.run([sys.executable, "ask.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    inside, machinery, outside, backend, asked, again = eval(done.stdout.strip().splitlines()[-1])
    assert inside == ("TPU v6 lite", "tpu", 4, "tpu", "TPU v6 lite", "cpu")
    assert (machinery, outside, backend, asked, again) == ("cpu", "cpu", "cpu", True, False)
