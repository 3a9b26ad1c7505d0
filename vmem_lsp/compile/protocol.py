"""What crosses the worker boundary: JSON lines of plain dataclasses.

The editor side never imports jax; the worker side fills these from traced
pallas_calls and compiler output.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

PROTOCOL_VERSION = 6  # 2: phase messages, per-phase limits, the scoped VMEM limit; 3: scoped buffers (emit_pipeline); 4: constant_index over extent-1 grid axes; 5: a compile error's body line; 6: in_program


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


def phase_words(phase: str | None, kernel: str | None, target: str | None, seconds: float) -> str:
    """What ran too long, in the user's terms."""
    on = f" for {target}" if target else ""
    if phase == "import":
        return f"importing the module did not finish within {seconds:g} s"
    if phase == "lower":
        return f"lowering kernel {kernel!r}{on} did not finish within {seconds:g} s"
    if phase == "compile":
        return f"the TPU compiler did not finish kernel {kernel!r}{on} within {seconds:g} s"
    return f"the example's Python did not return within {seconds:g} s"


def phase_doing(phase: str | None, kernel: str | None, target: str | None) -> str:
    """The step a worker was in, for a crash message: "while ..."."""
    on = f" for {target}" if target else ""
    return {
        "import": "importing the module",
        "trace": "running the example's Python",
        "lower": f"lowering kernel {kernel!r}{on}",
        "compile": f"compiling kernel {kernel!r}{on} in libtpu",
    }.get(phase, "starting")


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
    """A value of the kernel body too big for the vector registers: the
    compiler keeps it in VMEM (internal scratch) where no BlockSpec, scratch
    or run_scoped entry says so, and the layout model cannot size it."""

    what: str  # "f32[1024,1024] from dot_general"
    bytes: int
    origin: Origin | None  # the user's line that computes it


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


@dataclass(frozen=True)
class ExampleResult:
    """The worker's answer for one example on one target."""

    target: str
    device_kind: str | None
    calls: tuple[CapturedCall, ...] = ()
    error: str | None = None  # the example could not be traced or compiled
    error_kind: str | None = None  # "import" | "raised" | "timeout" | "crashed" | "no_compiler" | "no_kernel"
    error_origin: Origin | None = None
    deps: dict[str, str] = field(default_factory=dict)  # user source files reached -> sha256


def to_json(obj: Any) -> str:
    return json.dumps(dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj)


def _origin(d: dict | None) -> Origin | None:
    return Origin(**d) if d else None


def result_from_dict(d: dict) -> ExampleResult:
    calls = tuple(
        CapturedCall(
            **{
                **c,
                "call_origin": _origin(c["call_origin"]),
                "invoke_origin": _origin(c["invoke_origin"]),
                "grid": tuple(c["grid"]),
                "operands": tuple(
                    Operand(
                        **{
                            **o,
                            "origin": _origin(o["origin"]),
                            "full_shape": tuple(o["full_shape"]),
                            "block_shape": tuple(o["block_shape"]) if o["block_shape"] is not None else None,
                        }
                    )
                    for o in c["operands"]
                ),
                "scratch": tuple(
                    Scratch(**{**s, "origin": _origin(s["origin"]), "shape": tuple(s["shape"])}) for s in c["scratch"]
                ),
                "scoped": tuple(
                    Scoped(**{**s, "origin": _origin(s["origin"]), "shape": tuple(s["shape"])})
                    for s in c.get("scoped", ())
                ),
                "unseen": tuple(Unseen(**{**u, "origin": _origin(u["origin"])}) for u in c.get("unseen", ())),
                "error_origin": _origin(c.get("error_origin")),
                "in_program": tuple(tuple(x) for x in c.get("in_program", ())),
            }
        )
        for c in d.get("calls", ())
    )
    return ExampleResult(**{**d, "calls": calls, "error_origin": _origin(d.get("error_origin"))})
