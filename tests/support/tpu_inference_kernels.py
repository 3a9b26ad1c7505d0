"""tpu-inference's quantized matmul, as its own files, without its package.

The wheel on PyPI (tpu-inference, vllm-project/tpu-inference) pins jax 0.11.2, torch and vllm,
and its package `__init__` and logger import vllm: no test environment can install it. The
kernel itself needs only jax. So the wheel is downloaded without its dependencies (once, kept
in the old compilers' cache folder), and the kernel's four files are laid out under a folder a
test names, as the package they import from; the package's `__init__` files are left empty
and its `logger` is a stand-in on Python's logging (the only thing the kernel takes from
vllm). Nothing of theirs is kept in this repository."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from support.old_compilers import root

WHEEL = "tpu-inference==0.32.0"
KERNEL = "tpu_inference/kernels/quantized_matmul"
FILES = ("kernel.py", "tuned_block_sizes.py", "util.py")
LOGGER = '''"""vmem-lsp's tests: a stand-in for tpu_inference.logger, which imports vllm's."""
import logging


def init_logger(name):
    logger = logging.getLogger(name)
    logger.warning_once = logger.warning
    logger.info_once = logger.info
    return logger
'''


def wheel() -> Path:
    """tpu-inference's wheel from the package registry, downloaded once (no dependencies)."""
    folder = root() / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "tpu-inference.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = sorted(folder.glob("tpu_inference-0.32.0-*.whl"))
        if not found:
            command = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                "--no-input",
                "--progress-bar",
                "off",
                "-d",
                str(folder),
                WHEEL,
            ]
            done = subprocess.run(command, capture_output=True, text=True, timeout=600)
            found = sorted(folder.glob("tpu_inference-0.32.0-*.whl"))
            if done.returncode or not found:
                pytest.fail(f"cannot download {WHEEL}: {done.stderr[-2000:]}", pytrace=False)
    return found[0]


def quantized_matmul(folder: Path) -> Path:
    """Lay `tpu_inference.kernels.quantized_matmul` out under `folder` (put it on sys.path, or
    write the example beside it); returns kernel.py."""
    with zipfile.ZipFile(wheel()) as archive:
        for name in FILES:
            target = folder / KERNEL / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(f"{KERNEL}/{name}"))
    for package in ("tpu_inference", "tpu_inference/kernels", KERNEL):
        (folder / package / "__init__.py").touch()
    (folder / "tpu_inference" / "logger.py").write_text(LOGGER, encoding="utf-8")
    return folder / KERNEL / "kernel.py"
