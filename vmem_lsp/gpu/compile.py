"""Compiling for a GPU target: its shared-memory limit held to by Mosaic
GPU's own check, and the MLIR diagnostics the compiler prints beside its
exception kept with it.

Mosaic GPU refuses a kernel over `max_smem_bytes` while lowering, with the
limit taken from a real device (`shared_memory_per_block_optin`) or 227 KiB
when there is none, whatever the target says: compiled for an A100 (163 KiB)
without a GPU, it would pass kernels the A100 refuses. jax 0.9 and later keep
a bound for tests (`_SMEM_SIZE_BOUND`, the smaller of the two is checked):
set to the target's limit while its kernels lower. jax 0.8 has none; there the
check stays at 227 KiB (said in docs/gpu.md).

Mosaic GPU says which op an architecture lacks ("error: 'nvvm.cp.async.bulk.
wait_group' op is not supported on sm_80", with the kernel's source place) on
fd 2, and raises only "Pass pipeline failed": fd 2 is read while a GPU kernel
compiles, and its "error:" lines are added to the compiler's text.

Imports jax; only the worker process loads this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile

STDERR = "--- stderr ---"  # as scripts/capture_gpu_reports.py writes it: gpu/report.py reads either


def mosaic_gpu_core():
    """jax's Mosaic GPU module, or None where it does not import (its deps missing)."""
    try:
        from jax.experimental.mosaic.gpu import core
    except Exception:  # Triton kernels still compile without it
        return None
    return core


@contextlib.contextmanager
def mosaic_gpu_limit(limit: int | None):
    """While the block runs, Mosaic GPU refuses more than `limit` bytes of shared memory."""
    core = mosaic_gpu_core() if limit is not None else None
    if core is None or not hasattr(core, "_SMEM_SIZE_BOUND"):
        yield
        return
    before = core._SMEM_SIZE_BOUND
    core._SMEM_SIZE_BOUND = limit
    try:
        yield
    finally:
        core._SMEM_SIZE_BOUND = before


def printed_path(pid: int) -> str:
    """Where worker `pid` keeps what a GPU compile prints: a compile that ends the
    process (an LLVM fatal error) leaves its last words there for the client."""
    return os.path.join(tempfile.gettempdir(), f"vmem-lsp-gpu-compile-{pid}.stderr")


@contextlib.contextmanager
def printed_errors(found: list[str]):
    """While the block runs, fd 2 goes to a file (printed_path); after, what was
    printed is written to the real fd 2 again, its MLIR "error:" lines go in
    `found`, and the file is removed."""
    sys.stderr.flush()
    saved = os.dup(2)
    path = printed_path(os.getpid())
    with open(path, "w+b") as printed:
        os.dup2(printed.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            printed.seek(0)
            text = printed.read()
            os.write(2, text)
            found.extend(line for line in text.decode(errors="replace").splitlines() if " error: " in line)
    os.unlink(path)


def compiling_path(pid: int) -> str:
    """Where worker `pid` says which kernel it is compiling for a GPU, and the
    lines that may end the compiler's process: read by the client when it does."""
    return os.path.join(tempfile.gettempdir(), f"vmem-lsp-gpu-compile-{pid}.where")


@contextlib.contextmanager
def compiling_where(where: dict):
    """While the block runs, `where` is in the file compiling_path names: an
    LLVM fatal error (an fp8 dot below sm_89) ends the process with no Python
    frame, so this is how the client learns the kernel and the body line."""
    path = compiling_path(os.getpid())
    with open(path, "w") as out:
        json.dump(where, out)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def with_printed(text: str, printed: list[str]) -> str:
    return f"{text}\n{STDERR}\n" + "\n".join(printed) if printed else text


# The architecture ("9.0") of the first Mosaic GPU kernel this process compiled. Mosaic GPU's
# C++ pipeline keeps the first architecture it compiled for: after an sm_80 kernel, an sm_90
# one fails in ptxas ("SM version specified by .target is higher than default SM version
# assumed"), while sm_90 then sm_80 works. A request for another architecture after it
# asks for a fresh worker (worker.py), measured with jax 0.10.2.
MOSAIC_ARCH: list[str | None] = [None]


def lowers_with_mosaic_gpu(compiler_params) -> bool:
    """Whether a GPU kernel goes to Mosaic GPU: its params say so, or it gives none and
    jax's default is Mosaic GPU (jax 0.10: jax_pallas_use_mosaic_gpu)."""
    import jax

    if compiler_params:
        module = type(compiler_params).__module__
        return ".mosaic_gpu." in f"{module}." or (isinstance(compiler_params, dict) and "mosaic_gpu" in compiler_params)
    return bool(getattr(jax.config, "jax_pallas_use_mosaic_gpu", False))


def compiled_mosaic_for(arch: str) -> None:
    if MOSAIC_ARCH[0] is None:
        MOSAIC_ARCH[0] = arch


def needs_fresh_process(arch: str) -> bool:
    """A Mosaic GPU kernel for another architecture was compiled here first."""
    return MOSAIC_ARCH[0] is not None and MOSAIC_ARCH[0] != arch
