"""A compiler VMEM report as structured data. The original text is always kept."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """A typed shape as the compiler prints it, e.g. f32[4096,4096]."""

    dtype: str
    dims: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"


@dataclass(frozen=True)
class Allocation:
    size: int  # bytes the compiler allocated (padded)
    size_text: str | None  # as printed, e.g. "64.00M"; None when given in bytes
    kind: str  # "input_window" | "output_window" | "scratch" | "spill" | "smem_prefetch" | "other"
    operand_index: int | None  # N of "operator input N" / "output N" / "scratch operand N"
    window_shape: Shape | None
    full_shape: Shape | None
    unpadded_size: int | None
    buffers: int | None  # 1 single buffered, 2 for "2 buffering levels"
    memory_space: str  # "vmem" | "smem"
    op_name: str | None
    source_file: str | None
    source_line: int | None
    tag: str | None  # the Tag text, verbatim
    label: str | None  # the XLA label text, verbatim
    allocation_type: str | None  # "scoped", ...
    shape_text: str | None = None  # the Shape as printed, with its layout: "bf16[8,100]{1,0:T(8,128)(2,1)}"


@dataclass(frozen=True)
class Report:
    form: str  # "physical" | "scoped" | "single_allocation" | "block_shape" | "unknown"
    memory_space: str | None  # "vmem" | "smem"
    used: int | None  # bytes (from printed sizes, 1M = 2**20)
    used_text: str | None  # as printed: "128.00M"
    limit: int | None
    limit_text: str | None
    exceeded_by: int | None
    exceeded_by_text: str | None
    limit_kind: str | None  # "physical" | "scoped"
    error_code: str | None  # "E1001", ...
    op_name: str | None
    allocations: tuple[Allocation, ...]
    text: str  # the whole compiler text, never dropped
    operand_kind: str | None = None  # block_shape: the operand the error names: "input" (jax's args[N], the
    # call's operands, scalar prefetch first), "window_input" (Mosaic's
    # "window params for input N": the Nth in_spec) or "output"
    operand_index: int | None = None  # block_shape: its index ("args[0]", "input 0"); None for a pytree path
    operand_path: str | None = None  # block_shape: jax's name for it, as written ("args[2]", "args[0]['k']"):
    # a path in the call's arguments, which a pytree argument makes other
    # than the operand's number
