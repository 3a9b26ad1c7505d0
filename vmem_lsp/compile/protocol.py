"""What crosses the worker boundary: JSON lines of the plain dataclasses of
`vmem_lsp.results`, the protocol's version, and the words for the phases a
worker announces as it goes.

The editor side never imports jax; the worker side fills the results from
traced pallas_calls and compiler output.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..families import family_of
from ..family import Family
from ..results import CapturedCall, ExampleResult, Operand, Origin, Scoped, Scratch, Unseen

# Raised whenever a message or a result's fields change: the hello refuses a mismatch. 18: a kernel
# inside a kernel is not compiled alone; a GPU crash's culprit lines (cached results redone). 19: the
# body account (Unseen "held": each value live at the body's peak, on its line). 22: the account of
# chips that keep an unrolled chain's steps (Unseen "kept").
PROTOCOL_VERSION = 22


def phase_words(phase: str | None, kernel: str | None, target: str | None, seconds: float) -> str:
    """What ran too long, in the user's terms."""
    on = f" for {target}" if target else ""
    if phase == "import":
        return f"importing the module did not finish within {seconds:g} s"
    if phase == "lower":
        return f"lowering kernel {kernel!r}{on} did not finish within {seconds:g} s"
    if phase == "compile":
        family = family_for(target)
        which = family.noun if family is not None else "target's"
        return f"the {which} compiler did not finish kernel {kernel!r}{on} within {seconds:g} s"
    return f"the example's Python did not return within {seconds:g} s"


def family_for(target: str | None) -> Family | None:
    """The target's family, None for no target or one this process does not know."""
    try:
        return family_of(target) if target else None
    except ValueError:
        return None


def compiler_of(target: str | None) -> str:
    family = family_for(target)
    return family.compiler if family is not None else "the compiler"


def phase_doing(phase: str | None, kernel: str | None, target: str | None) -> str:
    """The step a worker was in, for a crash message: "while ..."."""
    on = f" for {target}" if target else ""
    return {
        "import": "importing the module",
        "trace": "running the example's Python",
        "lower": f"lowering kernel {kernel!r}{on}",
        "compile": f"compiling kernel {kernel!r}{on} in {compiler_of(target)}",
    }.get(phase or "", "starting")


def to_json(obj: Any) -> str:
    return json.dumps(dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) and not isinstance(obj, type) else obj)


def _origin(d: dict | None) -> Origin | None:
    return Origin(**d) if d else None


def result_from_dict(d: dict) -> ExampleResult:
    family = family_for(d.get("target"))
    facts = family.decode_facts if family is not None else (lambda data: data)
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
                    Scoped(
                        **{
                            **s,
                            "origin": _origin(s["origin"]),
                            "shape": tuple(s["shape"]),
                            "caller": _origin(s.get("caller")),
                        }
                    )
                    for s in c.get("scoped", ())
                ),
                "unseen": tuple(
                    Unseen(
                        **{
                            **u,
                            "origin": _origin(u["origin"]),
                            "shape": tuple(u.get("shape", ())),
                            "across": _origin(u.get("across")),
                            "start": _origin(u.get("start")),
                        }
                    )
                    for u in c.get("unseen", ())
                ),
                "error_origin": _origin(c.get("error_origin")),
                "in_program": tuple(tuple(x) for x in c.get("in_program", ())),
                "family_facts": facts(c.get("family_facts")),
            }
        )
        for c in d.get("calls", ())
    )
    return ExampleResult(
        **{**d, "calls": calls, "error_origin": _origin(d.get("error_origin")), "losses": tuple(d.get("losses", ()))}
    )
