"""The compiler texts scripts/capture_reports.py captured, one folder per libtpu version
(tests/data/reports/<libtpu>/): a new libtpu words a report its own way, and the parser
must read every version the project supports. The tests that compile compare with the
folder of the libtpu they run (`here()`); the ones that only read a text use the
reference folder, the libtpu of the whole suite's environment."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from support import ROOT
from support.tiers import COMPILER, starts
from vmem_lsp import versions

REPORTS = ROOT / "tests" / "data" / "reports"
REFERENCE = versions.TESTED["0.10.2"]  # jax 0.10.2 on Python 3.11: the environment .ci/run tests in full
NO_ERROR = "(compiled: no error)"


GPU_REPORTS = REPORTS / "gpu"  # the GPU compiler's texts, one folder per CUDA plugin (capture_gpu_reports.py)
PTXAS_REPORTS = GPU_REPORTS / "ptxas"  # ptxas -v's reports of GPU kernels (capture_ptxas.py), not the compiler's


def captured_versions() -> list[str]:
    """The libtpu versions with a folder of captured texts, oldest first."""
    return sorted((p.name for p in REPORTS.iterdir() if p.is_dir() and p != GPU_REPORTS), key=versions.key)


def gpu_files() -> list[Path]:
    """Every captured GPU text of every CUDA plugin version."""
    return sorted(p for p in GPU_REPORTS.glob("*/*.txt") if p.parent != PTXAS_REPORTS)


def folder(libtpu: str = REFERENCE) -> Path:
    return REPORTS / libtpu


def here() -> Path:
    """The folder of the libtpu installed here: what this environment's compiler says."""
    return folder(versions.installed(("libtpu",))["libtpu"] or "none")


def files(libtpu: str = REFERENCE) -> list[Path]:
    return sorted(folder(libtpu).glob("*.txt"))


def every_file() -> list[Path]:
    """Every captured text of every version."""
    return [path for libtpu in captured_versions() for path in files(libtpu)]


def case_id(path: Path) -> str:
    """`0.0.42.1/physical-breakdown-v6e`: the version and the case, for test ids."""
    return f"{path.parent.name}/{path.stem}"


# Where a text names a file of this checkout ("/work/main/scripts/capture_reports.py:174"): the
# checkout's folder and the line move with every clone and edit; the compiler's words do not.
OWN_SOURCE = re.compile(r"(?:/[^\s'\"():]+)*/?((?:scripts|tests/data/kernels)/\w+\.py)(?::\d+)?")
# libtpu 0.0.32.1 prints the kernel's serialized MLIR in its XLA labels, locations (the
# checkout's paths) and all, as base64.
SERIALIZED_KERNEL = re.compile(r'"body":"[A-Za-z0-9+/=]*"')


def comparable(text: str) -> str:
    """`text` with the checkout's folder and line numbers taken out of the files it names,
    and the serialized kernel out of its labels. The kernel goes first: OWN_SOURCE's optional
    folder prefix backtracks over every `/` of a base64 body (seconds per report, 20 s for one
    log of 0.0.32.1), and no match of it can fall in a body (base64 has no `.`, `"` bounds both)."""
    return OWN_SOURCE.sub(r"\1", SERIALIZED_KERNEL.sub('"body":"<kernel>"', text))


# The GPU compiler's own lines carry glog's time and thread ("E1203 07:12:05.053920   26369 "),
# and MLIR places the lines of the capture script ("capture_gpu_reports.py":83:15 to 89:12).
GLOG_PREFIX = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ ", re.M)
MLIR_LINES = re.compile(r'(\.py)":\d+:\d+ to \d+:\d+')
# and the files of the jax it ran, in whichever venv ("/tmp/ci/.venv/lib/python3.11/site-packages/jax/...").
SITE_PACKAGES = re.compile(r'"[^"\n]*/site-packages/')


def gpu_comparable(text: str) -> str:
    return SITE_PACKAGES.sub('"<site-packages>/', MLIR_LINES.sub(r'\1":L', GLOG_PREFIX.sub("", comparable(text))))


@starts(COMPILER)
def capture_gpu(out: Path) -> None:
    """scripts/capture_gpu_reports.py run here for every case, into `out`."""
    command = [sys.executable, str(ROOT / "scripts" / "capture_gpu_reports.py"), "--out", str(out)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=900, env={**os.environ, "JAX_PLATFORMS": "cpu"}
    )
    assert done.returncode == 0, done.stderr[-3000:]


def compiler_text(path: Path) -> str:
    """The file's text after its three `#` header lines, as the exception printed it."""
    return path.read_text().split("\n", 3)[3].removesuffix("\n")


@starts(COMPILER)
def capture(out: Path, cases: tuple[str, ...]) -> None:
    """scripts/capture_reports.py run here for `cases`, into `out`."""
    command = [sys.executable, str(ROOT / "scripts" / "capture_reports.py"), "--out", str(out), *cases]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
