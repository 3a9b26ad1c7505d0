"""The compiler's static schedule estimate of a kernel: libtpu, started with
`--xla_jf_dump_static_llo_profile_to=DIR`, writes one
`DIR/<hlo op>_static_llo_profile.textproto` per compiled program, with an
`hlo_op_estimate { hlo_op_name: "..." estimated_cycles: N ... }` block per
op: the whole op, every grid step. Cycles of one chip compare with each
other only: the clock is not published.

Pure: text in, estimates out; the worker reads the files (capture.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PROFILE_SUFFIX = "_static_llo_profile.textproto"
PROFILE_FLAG = "--xla_jf_dump_static_llo_profile_to"

# One `hlo_op_estimate { ... }` block: its fields are scalars, no nested message.
_BLOCK = re.compile(r"hlo_op_estimate\s*\{([^{}]*)\}", re.S)
_FIELD = re.compile(r'(\w+)\s*:\s*("(?:[^"\\]|\\.)*"|[^\s]+)')


@dataclass(frozen=True)
class OpEstimate:
    hlo_op: str  # "matmul_kernel.1": the custom call the kernel lowered to
    cycles: int


def parse_static_profile(text: str) -> list[OpEstimate]:
    """Every op estimate in a profile's text; a block without a name or a
    whole number of cycles is left out (ProfileError when none is left)."""
    found = []
    for block in _BLOCK.findall(text):
        fields = {name: value for name, value in _FIELD.findall(block)}
        name, cycles = fields.get("hlo_op_name", ""), fields.get("estimated_cycles", "")
        if name.startswith('"') and cycles.isdigit():
            found.append(OpEstimate(name[1:-1], int(cycles)))
    if not found:
        raise ProfileError(f"no hlo_op_estimate with a name and estimated_cycles in {text[:200]!r}")
    return found


class ProfileError(ValueError):
    """A profile the compiler wrote that says no estimate: a format this parser does not know."""
