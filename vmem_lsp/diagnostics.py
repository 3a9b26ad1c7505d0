"""Diagnostics as plain data: what the CLI prints and the server publishes."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .render import Wording, per_target, per_target_briefly
from .source.directives import ExampleKey
from .source.model import Span

CODES = {
    "VMEM001": "A window or scratch buffer that takes part in a VMEM overflow",
    "VMEM002": "A pallas_call whose kernel needs more VMEM than the limit",
    "VMEM003": "Compiler-internal VMEM (register spills, internal scratch) of a kernel body",
    "VMEM004": "An example whose kernels do not fit in VMEM",
    "VMEM005": "A kernel that fits with little VMEM to spare",
    "VMEM006": "A layout-model estimate that is only a lower bound: the kernel body computes values it cannot place",
    "VMEM007": "A kernel that fits: its grid, blocks and buffering and the VMEM they need, as checked (information)",
    "VMEM010": "An example that cannot be checked (does not parse, raises, hangs, crashes the worker)",
    "VMEM011": "A compiler error that is not a VMEM report, shown whole",
    "VMEM012": "No compiler for a target here: the example was not checked (an error)",
    "VMEM014": "A pallas_call traced with interpret=True: it runs on the CPU, its TPU path was not checked",
    "VMEM015": "A pallas_call whose compiler params are another platform's (Triton on a TPU chip): not compiled there",
    "VMEM050": "A block staged in GPU shared memory, in a kernel that needs more than the GPU has: on its BlockSpec",
    "VMEM051": "A pallas_call whose kernel needs more GPU shared memory than the target allows",
    "VMEM052": "An op or dtype the GPU's architecture lacks (compute capability): on its line",
    "VMEM053": "A pallas_call that needs more Blackwell tensor memory than the GPU has",
    "VMEM054": "A GPU kernel that spills registers to local memory, as ptxas reports it (check --spills; a warning)",
    "VMEM030": "A block shape the TPU cannot tile: on the BlockSpec of the operand the compiler names",
    "VMEM031": "An operation, layout or shape cast the TPU compiler does not support in a kernel body: on its line",
    "VMEM032": "A dtype the TPU generation does not support in that operation (E2001): on its line, with the chips that take it",
    "VMEM033": "Memory-space misuse in a kernel body (a vector load from SMEM): on its line",
    "VMEM034": "A pallas_call the compiler cannot partition automatically: wrap it in shard_map",
    "VMEM020": "A pallas_call that no example reaches: not checked",
    "VMEM021": "An example with placeholders still to fill in (a template)",
    "VMEM022": "An example that is a sweep (a list of values to try): run `vmem-lsp sweep` on it",
    "VMEM040": "A report read from a log that could be more than one pallas_call of the sources: not placed",
}


# Where each code is explained, for SARIF's helpUri: the compiler's error page
# where the compiler has one, jax's Pallas docs otherwise.
HELP = {
    "VMEM030": "https://docs.jax.dev/en/latest/pallas/grid_blockspec.html#pallas-blockspec",
    "VMEM031": "https://docs.jax.dev/en/latest/pallas/tpu/details.html",
    "VMEM032": "https://openxla.org/xla/errors/error_2001",
    "VMEM033": "https://docs.jax.dev/en/latest/pallas/tpu/details.html#memory-spaces",
    "VMEM034": "https://docs.jax.dev/en/latest/notebooks/shard_map.html",
}


@dataclass(frozen=True)
class Related:
    path: str
    span: Span
    message: str


@dataclass(frozen=True)
class Subject:
    """What a diagnostic is about, the same on every chip: the example, which
    of its pallas_call invocations, and which part of that kernel ("input 0",
    "scratch 1", "allocation 3", "kernel", "example"). Two allocations the
    compiler lists with the same size are two subjects, so both are shown."""

    example: ExampleKey
    call: int | None = None
    part: str = "example"


@dataclass(frozen=True)
class Diagnostic:
    path: str
    span: Span
    severity: str  # "error" | "warning" | "information"
    code: str
    message: str
    target: str | None = None
    origin: str = "compiler"  # "compiler" | "model": who says the figures
    related: tuple[Related, ...] = ()
    facts: dict = field(default_factory=dict, compare=False)  # structured detail for JSON/SARIF
    subject: Subject | None = None  # what it is about: the key chips merge by
    wording: Wording | None = field(default=None, compare=False)  # the message as head + the chip's clause

    def sort_key(self):
        """A total order: diagnostics at one place with one code (a BlockSpec
        shared by several operands) otherwise kept the worker's order, which
        varied from run to run."""
        return (self.path, self.span.start_line, self.span.start_col, self.code, self.target or "", self.message)


def is_suppressed(diagnostic: Diagnostic, line_text: str) -> bool:
    """`# noqa` or `# noqa: VMEM001, VMEM002` on the diagnostic's first line."""
    marker = line_text.find("# noqa")
    if marker < 0:
        return False
    rest = line_text[marker + len("# noqa") :]
    if not rest.lstrip().startswith(":"):
        return True
    codes = {c.strip() for c in rest.lstrip()[1:].replace(",", " ").split()}
    return diagnostic.code in codes


# A part of a kernel's total (a window, scratch, the compiler's internal scratch): on
# several chips it says what the kernel needs, and its pallas_call's VMEM002 the limits.
PART_CODES = ("VMEM001", "VMEM003")


def group_key(d: Diagnostic):
    """What makes diagnostics of several chips one: the place, the code and
    the subject (which example, which call of it, which part). Never the
    text; never two examples; a diagnostic without a subject stands alone."""
    if d.subject is None or d.target is None or d.wording is None:
        return id(d)
    return (d.path, d.span, d.code, d.severity, d.subject)


def merge_targets(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """One diagnostic per place, code and subject, listing what each chip that
    fails says, instead of one a chip."""
    groups: dict = {}
    for d in diagnostics:
        groups.setdefault(group_key(d), []).append(d)
    merged = []
    for members in groups.values():
        if len(members) == 1:
            merged.append(members[0])
            continue
        members.sort(key=lambda d: d.target)
        first = members[0]
        origins = {d.origin for d in members}
        wordings = [d.wording for d in members]
        short = per_target_briefly(wordings, [d.facts for d in members], limits=first.code not in PART_CODES)
        # Each chip's whole sentence stays, as related information at the same place.
        each = tuple(Related(d.path, d.span, d.message) for d in members) if short is not None else ()
        related = tuple(dict.fromkeys([*each, *(r for d in members for r in d.related)]))
        merged.append(
            replace(
                first,
                message=short if short is not None else per_target(wordings),
                target=",".join(d.target for d in members),
                origin=origins.pop() if len(origins) == 1 else "mixed",
                related=related,
                facts={"targets": {d.target: d.facts for d in members}},
                wording=None,
            )
        )
    return sorted(merged, key=Diagnostic.sort_key)


def fold_examples(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Two examples that reach one kernel alike (the same shapes through two
    wrappers) say the same thing at the same place: one diagnostic, the first
    example's, with the related information of both and every example's key in its
    facts' "examples" (what a summary counts). Diagnostics of one example are never
    folded: two allocations alike are two parts of its overflow."""
    kept: dict[tuple, Diagnostic] = {}
    examples: dict[tuple, list] = {}
    for d in diagnostics:
        key = (d.path, d.span, d.severity, d.code, d.message, d.target)
        example = d.subject.example if d.subject is not None else None
        first = kept.get(key)
        if first is None or example is None or example in examples[key]:
            kept[key if first is None else (*key, id(d))] = d
            examples.setdefault(key, []).append(example)
            continue
        examples[key].append(example)
        facts = {**first.facts, "examples": [str(e) for e in examples[key]]}
        kept[key] = replace(first, related=tuple(dict.fromkeys([*first.related, *d.related])), facts=facts)
    return list(kept.values())


def examples_of(d: Diagnostic) -> int:
    """How many examples a diagnostic speaks for: those fold_examples folded into it, else one."""
    return len(d.facts.get("examples", ())) or 1
