"""The dtypes vmem-lsp knows: one table, and the three views the rest reads.

Plain data with no jax import: the editor process (directives, the layout
model) reads it without jax, and the worker (capture) with it.

- DIRECTIVE_DTYPES: a `# vmem:` shape's spelling -> the jax dtype name
  (`bf16[8, 128]` becomes a bfloat16 array); README lists these spellings.
- COMPILER_DTYPES: a jax dtype name -> the compiler's spelling, as the worker
  names an operand's dtype.
- ITEM_BITS: the compiler's spelling -> bits per value, for the layout model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dtype:
    name: str  # the compiler's spelling: bf16 in "bf16[8,128]"; also a directive's
    jax: str  # numpy/jax dtype name
    bits: int  # bits per value
    aliases: tuple[str, ...] = ()  # other spellings a `# vmem:` shape accepts
    # False: the worker reports this dtype by its jax name, as it did before the tables were one
    # (capture's table never had it), so the layout model counts it at its 32-bit fallback.
    # Naming it is a change of behaviour to make with a measured case.
    named_by_worker: bool = True


TABLE = (
    Dtype("f64", "float64", 64),
    Dtype("f32", "float32", 32),
    Dtype("bf16", "bfloat16", 16),
    Dtype("f16", "float16", 16),
    Dtype("f8e4m3fn", "float8_e4m3fn", 8),
    Dtype("f8e5m2", "float8_e5m2", 8),
    Dtype("f8e4m3b11fnuz", "float8_e4m3b11fnuz", 8, named_by_worker=False),
    Dtype("s64", "int64", 64),
    Dtype("s32", "int32", 32, aliases=("i32",)),
    Dtype("s16", "int16", 16, aliases=("i16",)),
    Dtype("s8", "int8", 8, aliases=("i8",)),
    Dtype("s4", "int4", 4),
    Dtype("u64", "uint64", 64),
    Dtype("u32", "uint32", 32),
    Dtype("u16", "uint16", 16),
    Dtype("u8", "uint8", 8),
    Dtype("u4", "uint4", 4),
    Dtype("pred", "bool", 8, aliases=("bool",)),
)

DIRECTIVE_DTYPES = {spelling: d.jax for d in TABLE for spelling in (d.name, *d.aliases)}
COMPILER_DTYPES = {d.jax: d.name for d in TABLE if d.named_by_worker}
ITEM_BITS = {d.name: d.bits for d in TABLE}
