"""One diagnostic of a failing TPU kernel before it is linked to the kernel and the example:
what the mapping of a report (tpu/mapping.py) and the body account's split (tpu/body_parts.py)
both make."""

from __future__ import annotations

from dataclasses import dataclass

from ..correlate import Anchor
from ..diagnostics import Related
from ..render import Wording


@dataclass
class Part:
    """One diagnostic of a failing kernel before it is linked to the kernel and the example."""

    where: Anchor
    code: str
    subject: str  # "input 0", "scratch 1", "spill", "internal", "allocation 3", "body 447"
    wording: Wording
    facts: dict
    related: tuple[Related, ...] = ()  # what it says beyond the kernel and the example: a helper's call
