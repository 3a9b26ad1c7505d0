"""What every family says alike of what it did not check: an example that could not run
(VMEM010; VMEM012 when there is no compiler for the target), a kernel whose compiler params
are another platform's (VMEM015: not compiled for this target, and not counted as fitting).

An example that was not checked is never a pass: VMEM010 and VMEM012 are errors (a check exits
1). A family with a model of its own says something without its compiler (Family.
model_without_compiler: the engine traces the example again and the model judges it); one
without has no verdict, and VMEM012 says what to install. Only an example that reaches no
pallas_call is a warning: there is nothing in it to check.
"""

from __future__ import annotations

from . import render
from .correlate import Anchor, kernel_label, line_span
from .diagnostics import Diagnostic, Related, Subject
from .render import Wording
from .results import CapturedCall, ExampleResult
from .source.directives import Example


def other_platform(
    call: CapturedCall, kind: str, label: str, anchor: Anchor, example: Example, number: int, target: str | None = None
) -> Diagnostic:
    """VMEM015: a kernel whose compiler params are another platform's (a Triton
    kernel checked on a TPU chip; `kind`: what that platform calls it) is not
    compiled for this target: said, not counted as fitting."""
    wording = Wording(f"{kernel_label(call)} is {kind}: not compiled", " for ", label, ", ")
    return Diagnostic(
        anchor.path,
        anchor.span,
        "information",
        "VMEM015",
        wording.text(),
        target,  # one line for the chips alike (merge_targets): "not compiled for TPU v5e, TPU v6e"
        "compiler",
        (Related(example.path, example.span, f"example {example.text}"),),
        {"kernel": kernel_label(call), "platform": call.other_platform, "example": str(example.key)},
        Subject(example.key, number, "other platform"),
        wording,
    )


def error_diagnostic(example: Example, result: ExampleResult, error: str, label: str | None) -> Diagnostic:
    """VMEM010 (raised, hung, crashed, out of memory), VMEM012 (no compiler): the example was not
    checked, an error; an example that reaches no kernel is a warning."""
    soft = result.error_kind == "no_kernel"
    code = "VMEM012" if result.error_kind == "no_compiler" else "VMEM010"
    origin = result.error_origin
    related = (Related(origin.file, line_span(origin.line), "raised here"),) if origin is not None else ()
    raised_at = (
        render.at(origin.file, origin.line)
        if origin is not None and result.error_kind in ("raised", "import", "memory")
        else None
    )
    wording = render.not_checked(label, error, raised_at)
    return Diagnostic(
        example.path,
        example.span,
        "warning" if soft else "error",
        code,
        wording.text(),
        result.target,
        "compiler",
        related,
        {"error_kind": result.error_kind, "target": result.target},
        Subject(example.key, None, "not checked"),
        wording,
    )
