"""GPU compiler text -> GpuReport (issue 33).

What XLA's GPU compiler and Pallas's GPU lowerings say when a kernel does not
fit or is not supported on a target, in the forms captured by
scripts/capture_gpu_reports.py (tests/data/reports/gpu/<plugin version>/):

- Triton: "Shared memory size limit exceeded: requested 262144, available: 166912"
  (the limit is the target's shared_memory_per_block_optin), and on Blackwell
  "Tensor memory size limit exceeded: requested 576, available: 512" (columns);
- Mosaic GPU: "Mosaic GPU kernel exceeds available shared memory: smem_bytes=...
  > max_smem_bytes=..." (raised while lowering, against jax's own limit);
- an op the target's architecture lacks, as an MLIR diagnostic printed beside
  "Pass pipeline failed": loc(... "file":L:C ...): error: 'op' op is not supported on sm_80;
- an LLVM fatal error that ends the process: "... is only supported on compute capability >= 89",
  or, for an op of a newer architecture (jax 0.12's Mosaic GPU: a Blackwell kernel on the H100),
  "LLVM ERROR: Cannot select: intrinsic %llvm.nvvm.tcgen05..." (the op, on the architecture it was compiled for).

Parsing is total: text no pattern knows is form "unknown", kept whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .targets import GPUS, Gpu

TRITON_SMEM = re.compile(r"Shared memory size limit exceeded: requested (\d{1,12}), available: (\d{1,12})")
TENSOR_MEMORY = re.compile(r"Tensor memory size limit exceeded: requested (\d{1,12}), available: (\d{1,12})")
MOSAIC_SMEM = re.compile(
    r"Mosaic GPU kernel exceeds available shared memory: smem_bytes=(\d{1,12}) > max_smem_bytes=(\d{1,12})"
)
UNSUPPORTED_OP = re.compile(r"error: '([\w.]{1,200})' op is not supported on (sm_\d{2,3}a?)")
# What needs the capability is up to 300 characters of its line before the phrase, taken in
# Python after the search: a pattern that starts with them tried 300 characters at every offset of
# the text, a quarter of a second on a 30 KB TPU report (explain asks every report).
CAPABILITY = re.compile(r" is only supported on compute capability >= (\d{2,3})")
# LLVM's instruction selection ends the process on an intrinsic the architecture lacks.
CANNOT_SELECT = re.compile(r"Cannot select: intrinsic %llvm\.(nvvm\.[\w.]{1,200})")
# The innermost "file":line:col of an MLIR location: where the kernel was written.
MLIR_PLACE = re.compile(r'"([^"\n]{1,1000})":(\d{1,9}):(\d{1,9})')
PROCESS_EXIT = re.compile(r"^\(process exited with (-?\d{1,4})\)", re.M)


@dataclass(frozen=True)
class GpuReport:
    form: str  # "shared_memory", "tensor_memory", "unsupported_op", "compute_capability", "unknown"
    backend: str | None  # "triton", "mosaic_gpu", None when the text does not say
    requested: int | None = None  # bytes (tensor memory: columns) the kernel asked for
    available: int | None = None  # what the compiler allowed it
    op: str | None = None  # the unsupported op: "nvvm.cp.async.bulk.wait_group"
    architecture: str | None = None  # "sm_80": what it is not supported on
    needs_capability: tuple[int, int] | None = None  # (8, 9) for ">= 89"
    what: str | None = None  # what needs that capability: "Conversion from/to f8e4m3nv"
    place: tuple[str, int, int] | None = None  # (file, line, column) the compiler named
    ended_process: bool = False  # the compiler ended the process (an LLVM fatal error)
    text: str = ""

    @property
    def over_by(self) -> int | None:
        if self.requested is None or self.available is None:
            return None
        return self.requested - self.available


def parse_gpu_report(text: str) -> GpuReport:
    ended = PROCESS_EXIT.search(text) is not None
    if found := TRITON_SMEM.search(text):
        return GpuReport("shared_memory", "triton", int(found[1]), int(found[2]), ended_process=ended, text=text)
    if found := MOSAIC_SMEM.search(text):
        return GpuReport("shared_memory", "mosaic_gpu", int(found[1]), int(found[2]), ended_process=ended, text=text)
    if found := TENSOR_MEMORY.search(text):
        return GpuReport("tensor_memory", "triton", int(found[1]), int(found[2]), ended_process=ended, text=text)
    if found := UNSUPPORTED_OP.search(text):
        line_start = text.rfind("\n", 0, found.start()) + 1
        places = MLIR_PLACE.findall(text[line_start : found.start()])
        place = (places[-1][0], int(places[-1][1]), int(places[-1][2])) if places else None
        return GpuReport(
            "unsupported_op",
            "mosaic_gpu",
            op=found[1],
            architecture=found[2],
            place=place,
            ended_process=ended,
            text=text,
        )
    if found := CANNOT_SELECT.search(text):  # the architecture is the target's: the text does not say
        return GpuReport("unsupported_op", None, op=found[1], ended_process=ended, text=text)
    if found := CAPABILITY.search(text):
        digits = found[1]
        before = text[max(text.rfind("\n", 0, found.start()) + 1, found.start() - 300) : found.start()]
        return GpuReport(
            "compute_capability",
            "triton" if "Triton" in text else None,
            needs_capability=(int(digits[:-1]), int(digits[-1])),
            what=before.rsplit(": ", 1)[-1].strip() or None,  # after "LLVM Fatal Error while ...: "
            ended_process=ended,
            text=text,
        )
    return GpuReport("unknown", None, ended_process=ended, text=text)


# ---- the ops an architecture lacks ---------------------------------------------------------------


@dataclass(frozen=True)
class OpFamily:
    """Ops an architecture has or lacks, by the prefix MLIR and LLVM name them with."""

    prefix: str
    first: tuple[int, int]  # the first compute capability with it
    last: tuple[int, int] | None  # the last (an sm_90a-only op), None for every later one
    what: str
    # The kernel-body primitives that make it (jax's Mosaic GPU): MLIR's own location names the
    # op the lowering emitted, which in a pipeline is a line of the pipeline's scope, not the
    # body's plgpu.wgmma; the worker finds the body's line by these (gpu/worker.op_origin).
    primitives: tuple[str, ...] = ()

    def on(self, capability: tuple[int, int]) -> bool:
        return self.first <= capability and (self.last is None or capability <= self.last)

    def gpus(self) -> list[Gpu]:
        return sorted((g for g in GPUS.values() if self.on(g.capability)), key=lambda g: g.capability)

    def has_it(self) -> str:
        """ "sm_90 and newer have it", "only sm_90a has it"."""
        first = f"sm_{self.first[0]}{self.first[1]}"
        return f"only {first}a has it" if self.last == self.first else f"{first} and newer have it"


# From NVIDIA's PTX ISA (each instruction's "Target ISA notes"): the Tensor Memory Accelerator's
# bulk asynchronous copies (cp.async.bulk*) and the async proxy's fence from sm_90; warpgroup MMA
# (wgmma) on sm_90a alone (the B200's compiler cannot select it either: jax 0.12, captured);
# Blackwell's tensor-core ops (tcgen05) from sm_100.
OP_FAMILIES = (
    OpFamily(
        "nvvm.cp.async.bulk",
        (9, 0),
        None,
        "a bulk asynchronous copy (TMA)",
        ("copy_gmem_to_smem", "copy_smem_to_gmem"),
    ),
    OpFamily("nvvm.wgmma", (9, 0), (9, 0), "a warpgroup MMA (wgmma)", ("wgmma",)),
    OpFamily("nvvm.fence.proxy.async", (9, 0), None, "a fence of the asynchronous proxy (TMA)"),
    OpFamily("nvvm.tcgen05", (10, 0), None, "a Blackwell tensor-core op (tcgen05)", ("tcgen05",)),
)


def op_family(op: str | None) -> OpFamily | None:
    """The op family the PTX ISA dates that `op` is of."""
    return next((family for family in OP_FAMILIES if (op or "").startswith(family.prefix)), None)
