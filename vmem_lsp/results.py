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
    reduction, a dot, a roll), at their peak."""

    what: str  # "f32[1024,1024] from dot_general"
    bytes: int
    origin: Origin | None  # the user's line that computes it
    kind: str = "staged"  # "staged" | "live"


@dataclass(frozen=True)
class GpuDot:
    """One dot_general of a GPU kernel's body, as gpu_layout.py's shared-memory model
    reads it. Each operand comes from "block" (an input's whole block, read outside any
    loop), "slice" (part of an input's block, outside any loop), "loop" (read from an
    input inside a loop: Triton pipelines it over num_stages) or "value" (computed)."""

    lhs: tuple[int, ...]  # the operands' shapes as the dot takes them
    rhs: tuple[int, ...]
    dtype: str  # the lhs's dtype, compiler spelling ("bf16")
    m: int  # the result's rows: the lhs's non-contracting size
    in_loop: bool  # a loop of the body (fori_loop) runs it
    lhs_from: str = "value"
    rhs_from: str = "value"
    lhs_input: int | None = None  # which input (in_specs index) it reads, when it reads one
    rhs_input: int | None = None
    rhs_dtype: str | None = None  # the rhs's dtype when it is not the lhs's
    rhs_transposed: bool = False  # the rhs contracts its last dimension (x @ y.T)


@dataclass(frozen=True)
class GpuKernel:
    """What a GPU kernel's compiler params and body tell gpu_layout.py's model of its
    shared memory (compile/gpu_kernel.py fills it on a GPU target)."""

    stages: int  # Triton num_stages (jax's default on CUDA: 3); Mosaic GPU max_concurrent_steps (1)
    warps: int  # Triton num_warps (4); Mosaic GPU: 4 (a warpgroup)
    sequential: tuple[int, ...] = ()  # Mosaic GPU: the grid axes it pipelines over ("sequential")
    reduction_scratch: int = 0  # Mosaic GPU: reduction_scratch_bytes, reserved when the body reduces
    reduced: int = 0  # the most elements a reduction of the body keeps (a row sum of (64, 256): 64)
    dots: tuple[GpuDot, ...] = ()


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
    gpu_backend: str | None = None  # on a GPU target: "triton" or "mosaic_gpu", as it lowers
    steps_vary: bool = False  # the body does its matrix work under a condition (causal attention skips blocks)
    estimated_cycles: int | None = None  # the compiler's static estimate (a worker started with --estimate)
    no_estimate: str | None = None  # why such a worker has none for this kernel
    # "gpu" or "tpu": its compiler params are for that platform, not the target's, so it was
    # not compiled for this target (a Triton kernel checked on a TPU chip). None: it was.
    other_platform: str | None = None
    ptxas: str | None = None  # ptxas -v's words on this GPU kernel: registers, spills (check --spills)
    no_ptxas: str | None = None  # why --spills has none for it: no ptxas here, ptxas failed
    gpu_kernel: GpuKernel | None = None  # on a GPU target: its stages, warps and dots (gpu_layout.py)


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
