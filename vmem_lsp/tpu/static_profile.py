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

# An `hlo_op_estimate {` block's start; its scalar fields are read at its own depth, not in the
# messages nested in it (an estimate of 0 cycles comes with the op's whole `hlo_instruction`).
_BLOCK_START = re.compile(r"\bhlo_op_estimate\s*\{")
_FIELD = re.compile(r'(\w+)\s*:\s*("(?:[^"\\]|\\.)*"|[^\s{}]+)')
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


@dataclass(frozen=True)
class OpEstimate:
    hlo_op: str  # "matmul_kernel.1": the custom call the kernel lowered to
    cycles: int  # 0: the compiler's model gave the op no cycles (flash attention with block_b=2)
    dma: str | None = None  # its dma_instruction_type: "DMA_INSTRUCTION_TYPE_REMOTE" where it gave 0


def own_fields(text: str, start: int) -> tuple[str, int]:
    """The text of the block that opens just before `start` at its own depth (nested
    messages cut out), and where the block ends; strings are skipped whole."""
    depth, kept, at = 1, [], start
    while at < len(text) and depth:
        if text[at] == '"':
            quoted = _STRING.match(text, at)
            end = quoted.end() if quoted else len(text)
            if depth == 1:
                kept.append(text[at:end])
            at = end
            continue
        depth += {"{": 1, "}": -1}.get(text[at], 0)
        if depth == 1 and text[at] != "}":
            kept.append(text[at])
        at += 1
    return "".join(kept), at


def parse_static_profile(text: str) -> list[OpEstimate]:
    """Every op estimate in a profile's text; a block without a name or a
    whole number of cycles is left out (ProfileError when none is left)."""
    found = []
    for start in _BLOCK_START.finditer(text):
        block, _ = own_fields(text, start.end())
        fields = {name: value for name, value in _FIELD.findall(block)}
        name, cycles = fields.get("hlo_op_name", ""), fields.get("estimated_cycles", "")
        if name.startswith('"') and cycles.isdigit():
            found.append(OpEstimate(name[1:-1], int(cycles), fields.get("dma_instruction_type")))
    if not found:
        raise ProfileError(f"no hlo_op_estimate with a name and estimated_cycles in {text[:200]!r}")
    return found


class ProfileError(ValueError):
    """A profile the compiler wrote that says no estimate: a format this parser does not know."""
