"""What crosses the worker boundary: JSON lines of plain dataclasses.

The editor side never imports jax; the worker side fills these from traced
pallas_calls and compiler output.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

PROTOCOL_VERSION = 1


@dataclass(frozen=True)
class Origin:
    """Where a Python object was made: the innermost frame of user (or jax ops) code."""
    file: str
    line: int
    col: int | None = None


@dataclass(frozen=True)
class Operand:
    role: str                       # "prefetch" | "in" | "out"
    index: int                      # index within its role (in_specs[index], out_specs[index])
    operand: int                    # the custom call's operand number ("operator input N")
    dtype: str                      # compiler spelling: "f32", "bf16"
    full_shape: tuple[int, ...]
    block_shape: tuple[int, ...] | None     # None: whole array (no BlockSpec)
    memory_space: str | None        # "vmem", "smem", "any", None (default: vmem)
    buffer_count: int | None        # pl.Buffered(n) when given
    constant_index: bool            # the index map ignores the grid
    origin: Origin | None           # where its BlockSpec was made


@dataclass(frozen=True)
class Scratch:
    index: int
    dtype: str | None
    shape: tuple[int, ...]
    memory_space: str | None        # "vmem", "smem", "semaphore"...
    origin: Origin | None


@dataclass(frozen=True)
class CapturedCall:
    """One pallas_call reached by an example, compiled alone for one target."""
    name: str
    call_origin: Origin | None      # where pallas_call(...) was written
    invoke_origin: Origin | None    # where its result was called
    grid: tuple[int, ...]
    num_scalar_prefetch: int
    operands: tuple[Operand, ...]
    scratch: tuple[Scratch, ...]
    vmem_limit_bytes: int | None
    fits: bool
    compiler_text: str | None       # the compiler's error text, verbatim
    compile_seconds: float
    compiled: bool = True           # False: traced only, `fits` says nothing


@dataclass(frozen=True)
class ExampleResult:
    """The worker's answer for one example on one target."""
    target: str
    device_kind: str | None
    calls: tuple[CapturedCall, ...] = ()
    error: str | None = None        # the example could not be traced or compiled
    error_kind: str | None = None   # "import" | "raised" | "timeout" | "crashed" | "no_compiler" | "no_kernel"
    error_origin: Origin | None = None
    deps: dict[str, str] = field(default_factory=dict)   # user source files reached -> sha256


def to_json(obj: Any) -> str:
    return json.dumps(dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj)


def _origin(d: dict | None) -> Origin | None:
    return Origin(**d) if d else None


def result_from_dict(d: dict) -> ExampleResult:
    calls = tuple(
        CapturedCall(
            **{**c,
               "call_origin": _origin(c["call_origin"]),
               "invoke_origin": _origin(c["invoke_origin"]),
               "grid": tuple(c["grid"]),
               "operands": tuple(Operand(**{**o, "origin": _origin(o["origin"]),
                                             "full_shape": tuple(o["full_shape"]),
                                             "block_shape": tuple(o["block_shape"]) if o["block_shape"] is not None else None})
                                 for o in c["operands"]),
               "scratch": tuple(Scratch(**{**s, "origin": _origin(s["origin"]), "shape": tuple(s["shape"])})
                                for s in c["scratch"])})
        for c in d.get("calls", ()))
    return ExampleResult(**{**d, "calls": calls, "error_origin": _origin(d.get("error_origin"))})
