"""One report from the checks of several compilers (`check --jax 0.12.0.1`): the
project's own jax and libtpu and each managed one, as the difference across chip
generations is one report from several chips (engine.generation_differences).

A diagnostic every compiler gives alike is shown once, as it is. One that only some
give is shown with those compilers named, and its facts say which (`jax`, `libtpu`);
where a kernel that overflows or fails with some compilers compiled and fit with the
others on the same chips, its message leads with both ("fits with jax 0.12.0.1
(libtpu 0.0.50.1), overflows with jax 0.10.2 (libtpu 0.0.42.1): ..."). Pure."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from . import render
from .diagnostics import Diagnostic

# Codes whose verdict is "does not fit" (the rest of the errors with a kernel are "does not compile").
OVERFLOW_CODES = ("VMEM001", "VMEM002", "VMEM003", "VMEM004")


@dataclass(frozen=True)
class Compiler:
    """A jax and libtpu a check ran with, and whose it is ("the project's", "managed")."""

    jax: str | None
    libtpu: str | None
    source: str = "the project's"

    @property
    def label(self) -> str:
        return render.compiler_label(self.jax, self.libtpu)

    @property
    def described(self) -> str:
        return render.compiler_label(self.jax, self.libtpu, self.source)

    def as_dict(self) -> dict:
        return {"jax": self.jax, "libtpu": self.libtpu, "source": self.source}


@dataclass
class CompilerRun:
    """One compiler's check: its diagnostics (merged across chips) and, as
    engine.compiled_chips gives it, the chips each kernel compiled and fit on."""

    compiler: Compiler
    diagnostics: list[Diagnostic]
    fitting: dict = field(default_factory=dict)  # (example key, call number) -> {target, ...}


def same(d: Diagnostic) -> tuple:
    """What makes two compilers' diagnostics one: the place, the finding and its words."""
    return (d.path, d.span, d.code, d.severity, d.message, d.target)


def across(runs: list[CompilerRun]) -> list[Diagnostic]:
    """The diagnostics of every run as one list (see the module's docstring)."""
    given: dict[tuple, list[int]] = {}
    for number, run in enumerate(runs):
        for d in run.diagnostics:
            given.setdefault(same(d), [])
            if number not in given[same(d)]:
                given[same(d)].append(number)
    out, shown = [], set()
    for run in runs:
        for d in run.diagnostics:
            key = same(d)
            if key in shown:
                continue
            shown.add(key)
            having = given[key]
            out.append(d if len(having) == len(runs) else versioned(d, [runs[i] for i in having], runs))
    return sorted(out, key=Diagnostic.sort_key)


def fit_elsewhere(d: Diagnostic, others: list[CompilerRun]) -> list[CompilerRun]:
    """The runs on which the kernel of an error compiled and fit on all of its chips."""
    if d.severity != "error" or d.subject is None or d.subject.call is None or not d.target:
        return []
    chips = set(d.target.split(","))
    return [r for r in others if chips <= r.fitting.get((d.subject.example, d.subject.call), set())]


def versioned(d: Diagnostic, having: list[CompilerRun], runs: list[CompilerRun]) -> Diagnostic:
    """A diagnostic only the runs `having` give, saying so."""
    labels = [r.compiler.label for r in having]
    good = fit_elsewhere(d, [r for r in runs if r not in having])
    if good:
        message = render.verdict_differs([r.compiler.label for r in good], labels, d.code in OVERFLOW_CODES, d.message)
    else:
        message = render.only_with(labels, d.message)
    facts = {
        **d.facts,
        "jax": [r.compiler.jax for r in having],
        "libtpu": [r.compiler.libtpu for r in having],
        **({"fits_with": [r.compiler.as_dict() for r in good]} if good else {}),
    }
    return dataclasses.replace(d, message=message, facts=facts)


def differences(diagnostics: list[Diagnostic]) -> int:
    """How many diagnostics only some of the compilers gave."""
    return sum("jax" in d.facts for d in diagnostics)
