"""What compiling an example tells, as plain data: the pallas_calls it
reached (`CapturedCall`), their operands, scratch and scoped buffers with the
user lines that made them, and the compiler's verdict on each
(`ExampleResult`). Every layer reads these (mapping, layout, budget, the fix
search, the faces); the worker fills them, and `compile/protocol.py` carries
them across the process boundary. `PhaseLimits` is here too: a setting that
travels with each request.

No jax and nothing of the worker here: the editor side imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PhaseLimits:
    """Seconds each step of a request may take. The user's Python (importing
    the module, running the example) hangs in ways a compile does not: a
    `while True` should be reported in a minute, not after the five minutes a
    large kernel may rightly spend in libtpu."""

    trace: float = 60.0  # "import" and "trace": the user's Python
    compile: float = 300.0  # "lower" and "compile": one kernel, in jax and libtpu

    def of(self, phase: str | None) -> float:
        return self.compile if phase in ("lower", "compile") else self.trace


@dataclass(frozen=True)
class Origin:
    """Where a Python object was made: the innermost frame of user (or jax ops) code."""

    file: str
    line: int
    col: int | None = None


@dataclass(frozen=True)
class Operand:
    role: str  # "prefetch" | "in" | "out"
    index: int  # index within its role (in_specs[index], out_specs[index])
    operand: int  # the custom call's operand number ("operator input N")
    dtype: str  # compiler spelling: "f32", "bf16"
    full_shape: tuple[int, ...]
    block_shape: tuple[int, ...] | None  # None: whole array (no BlockSpec)
    memory_space: str | None  # "vmem", "smem", "any", None (default: vmem)
    buffer_count: int | None  # pl.Buffered(n) when given
    constant_index: bool  # the index map ignores the grid
    origin: Origin | None  # where its BlockSpec was made
    path: str | None = None  # jax's name for it in its errors: "args[2]", "args[0]['k']", "outputs[0]"


@dataclass(frozen=True)
class Scratch:
    index: int
    dtype: str | None
    shape: tuple[int, ...]
    memory_space: str | None  # "vmem", "smem", "semaphore"...
    origin: Origin | None


@dataclass(frozen=True)
class Scoped:
    """A VMEM buffer the kernel body allocates for a while: a window of a
    pipeline (pltpu.emit_pipeline allocates its blocks' buffers with
    run_scoped) or an entry of the user's own pl.run_scoped."""

    kind: str  # "pipeline_in" | "pipeline_out" | "run_scoped"
    index: int  # its number among the kernel's scoped buffers, in trace order
    dtype: str
    shape: tuple[int, ...]  # the allocation: (buffers, *block) for a pipeline window
    buffers: int  # 1 for a run_scoped entry
    memory_space: str | None
    origin: Origin | None  # the inner BlockSpec of a pipeline window; the VMEM(...) of an entry
    scope: int  # which run_scoped made it (its number in the kernel, trace order)
    parent: int  # the run_scoped that encloses that one; -1: the kernel body
    window: int | None = None  # a pipeline window's N: its pipeline's in_specs[N] or out_specs[N]
    caller: Origin | None = None  # where user code called the helper that made its inner BlockSpec

    @property
    def block_shape(self) -> tuple[int, ...]:
        """One buffer's shape: a pipeline window is (buffers, *block), even
        single-buffered (pipeline-buffered1-v6e: f32[1,2048,8192]), but a rank-1
        block's buffers are laid end to end (buffers * block,)."""
        if self.kind != "run_scoped" and len(self.shape) > 1:
            return self.shape[1:]
        return self.shape


@dataclass(frozen=True)
class Unseen:
    """What the kernel body computes beyond the vector registers: the
    compiler keeps it in VMEM (internal scratch, spill slots) where no
    BlockSpec, scratch or run_scoped entry says so, and the layout model can
    only bound it. "staged": one value a dot or transpose makes; "live": the
    body's values live at once across an op that reads a whole value (a
    reduction, a dot, a roll), at their peak; "held": one of those values, on the line that
    makes it (the body account: what the compiler's internal scratch is made of); "kept": the
    same for a chip whose compiler keeps each step of an unrolled loop's chain until it ends
    (TPU v4, v5e, v5p: tpu/layout.account_kind says when it is the account)."""

    what: str  # "f32[1024,1024] from dot_general"
    bytes: int
    origin: Origin | None  # the user's line that computes it
    kind: str = "staged"  # "staged" | "live" | "held" | "kept"
    shape: tuple[int, ...] = ()  # a held value's dimensions, to tell which block sizes it grows with
    across: Origin | None = None  # a held value: the line of the op it is live across (the peak)
    start: Origin | None = None  # a held value: the line its elementwise chain began at (p = exp(s): s's dot)


@dataclass(frozen=True)
class CapturedCall:
    """One pallas_call reached by an example, compiled alone for one target."""

    name: str
    call_origin: Origin | None  # where pallas_call(...) was written
    invoke_origin: Origin | None  # where its result was called
    grid: tuple[int, ...]
    num_scalar_prefetch: int
    operands: tuple[Operand, ...]
    scratch: tuple[Scratch, ...]
    vmem_limit_bytes: int | None
    fits: bool
    compiler_text: str | None  # the compiler's error text, verbatim
    compile_seconds: float
    compiled: bool = True  # False: traced only, `fits` says nothing
    scoped_limit: int | None = None  # the scoped VMEM limit the compile ran under, when not the chip's default
    scoped_limit_source: str | None = None  # where that limit was set: "pyproject.toml", "LIBTPU_INIT_ARGS", ...
    reused: bool = False  # the worker had compiled this very kernel before: its verdict, not a compile
    scoped: tuple[Scoped, ...] = ()  # VMEM the body allocates: pipeline windows, run_scoped entries
    unseen: tuple[Unseen, ...] = ()  # values of the body the layout model cannot place in VMEM
    error_origin: Origin | None = None  # the kernel-body line a compile error names (or whose op it names)
    in_program: tuple = ()  # (role, index) of operands the program makes, results it uses
    interpret: bool = False  # traced with interpret=True: it runs on the CPU, so it was not compiled for the TPU
    flops_per_step: int | None = None  # the body's matrix work per grid step (2*M*N*K of its dots)
    loops_unknown: bool = False  # the body loops a number of times known only at run time (a while loop)
    backend: str | None = None  # how the target's family lowers it, where it has several: "triton", "mosaic_gpu"
    steps_vary: bool = False  # the body does its matrix work under a condition (causal attention skips blocks)
    estimated_cycles: int | None = None  # the compiler's static estimate (a worker started with --estimate)
    no_estimate: str | None = None  # why such a worker has none for this kernel
    # Its loops of run-time length, counted from the example's values and added to the estimate
    # (tpu/trips.py, tpu/loops.py): "line 658: 168 trips at ~990 cycles"; or why they were not.
    loops_counted: str | None = None
    loops_uncounted: str | None = None
    # The platform its compiler params are for ("gpu", "tpu": a Family.platform), when not the
    # target's: it was not compiled for this target (a Triton kernel checked on a TPU chip). None: it was.
    other_platform: str | None = None
    ptxas: str | None = None  # the compiler's words on its registers and spills (check --spills: ptxas -v)
    no_ptxas: str | None = None  # why --spills has none for it: no ptxas here, ptxas failed
    # What the target's family read of the kernel for its model (a GPU kernel's stages, warps and
    # dots: gpu/layout.GpuKernel); the family decodes it from the worker's JSON (Family.decode_facts).
    family_facts: Any = None


@dataclass(frozen=True)
class ExampleResult:
    """The worker's answer for one example on one target."""

    target: str
    device_kind: str | None
    calls: tuple[CapturedCall, ...] = ()
    error: str | None = None  # the example could not be traced or compiled
    # "import" | "raised" | "timeout" | "crashed" | "no_compiler" | "no_kernel" | "internal" (a bug of ours)
    error_kind: str | None = None
    error_origin: Origin | None = None
    deps: dict[str, str] = field(default_factory=dict)  # user source files reached -> sha256
    losses: tuple[str, ...] = ()  # what the worker's jax lacks, in the user's words (compile/jax_compat.py)
    libtpu: str | None = None  # the worker's libtpu (its hello): whose chip figures apply
    # The cycles the compiler's estimate gave before the compile killed the worker (libtpu can
    # abort after writing it): read by the client from the dead worker's folder
    estimate_left: int | None = None
    estimate_left_steps: int | None = None  # the grid steps of the compile that left it


@dataclass(frozen=True)
class CheckRequest:
    """One example to run on one target: what the faces ask of a worker."""

    example: str
    target: str
    path: str | None = None  # the file holding the example
    module: str | None = None  # or a dotted module (pyproject examples)
    root: str | None = None  # put on sys.path first (the project root)
    source: str | None = None  # run this text as the file at `path` (verifying a fix)
    compile: bool = True  # False: trace only, to read block shapes
    scoped_vmem_limit: int | None = None  # bytes: the compiler's scoped VMEM limit for this target
    scoped_vmem_limit_source: str | None = None  # where it was set, for messages
    origins: bool = True  # False: the result names no spec's line (vmem_lsp.fits, trace only)
    estimate: bool = False  # the compiler's cycle estimate too: only a worker started with --estimate gives it
    spills: bool = False  # the compiler's words on each kernel's register spills (check --spills; GPU targets)
