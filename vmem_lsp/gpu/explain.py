"""`vmem-lsp explain` for GPU jobs (issue 33): where a GPU compiler's error
begins on a log line, what the Python traceback around it says, and the
explanation: which backend, requested against available bytes, which GPUs
have that limit, which blocks count and how far they must shrink; for an op
or a dtype the architecture lacks, which targets have it; and where it goes
among the sources' pallas_calls. Pure but for `Traceback`, the little that must
be remembered from line to line; explain.py drives the reading for every family.

The texts are report.py's forms, one line each: Triton's "Shared memory
size limit exceeded" (XLA's RESOURCE_EXHAUSTED), Mosaic GPU's ValueError,
MLIR's "error: '<op>' op is not supported on sm_80" behind its location, and
LLVM's fatal "... is only supported on compute capability >= 89".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import render
from ..logs import Found, Placement, Sources, TracedCall, sites_at, undecided
from .budget import block_label
from .layout import block_bytes, estimated_shared_memory, staged_blocks
from .report import GpuReport, op_family, parse_gpu_report
from .targets import GPUS, Gpu, gpu, is_gpu

if TYPE_CHECKING:
    from ..correlate import SitesOf
    from ..diagnostics import Diagnostic
    from ..source.model import KernelSite

# ---- finding ------------------------------------------------------------------------------------

# Words every GPU report has: checked before any pattern, so a long log's other lines cost a few `in`s.
WORDS = (
    "memory size limit exceeded",
    "Mosaic GPU kernel exceeds",
    "op is not supported on sm_",
    "only supported on compute capability",
)
PHRASE = re.compile(
    r"(?:Shared|Tensor) memory size limit exceeded: requested \d|Mosaic GPU kernel exceeds available shared memory|"
    r"error: '[\w.]{1,200}' op is not supported on sm_\d| is only supported on compute capability >= \d"
)
# What leads a report on its line and belongs to it: the status, MLIR's location (where the op was
# written), LLVM's fatal error (which names the compiler). Before it: a timestamp, a logger, an
# exception's name, all left out.
LEAD = re.compile(r"RESOURCE_EXHAUSTED: |loc\(|LLVM (?:Fatal Error|ERROR)")
FRAME = re.compile(r'File "([^"\n]{1,1000})", line (\d{1,9})')
LIBRARY = re.compile(r"[/\\](?:site|dist)-packages[/\\]|[/\\]lib[/\\]python3[\d.]*[/\\]|^<")
# Python prints an exception's line right after its last frame, its code and carets between.
NEAR = 8
MOST_FRAMES = 50
CHAINED = ("The above exception was the direct cause", "During handling of the above exception")


def start(line: str) -> int | None:
    """Where a GPU report begins on `line`, or None: at what leads it (its status, MLIR's location,
    LLVM's fatal error), else at its own first words."""
    if not any(word in line for word in WORDS):
        return None
    hit = PHRASE.search(line)
    if hit is None:
        return None
    lead = LEAD.search(line, 0, hit.start())
    if lead is not None:
        at = lead.start()
    elif hit[0].startswith(" is only"):  # what needs the capability comes before: from the last ": " on
        at = line.rfind(": ", 0, hit.start()) + 2 if ": " in line[: hit.start()] else 0
    else:
        at = hit.start()
    return at if parse_gpu_report(line[at:]).form != "unknown" else None


def user_frames(frames: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """The frames of the user's code, innermost first: not a library's, not the interpreter's."""
    return [f for f in reversed(list(frames)) if not LIBRARY.search(f[0])]


@dataclass
class Traceback:
    """What the lines before a GPU report said: the frames of the traceback it closes (a lowering
    error's first frame is the user's pallas_call), and whether it repeats the last report as the
    chained exception jax raises after it ("The above exception was the direct cause ...")."""

    frames: list[tuple[str, int]] = field(default_factory=list)
    frame_line: int = -NEAR - 1
    last: str | None = None
    chained: bool = False

    def see(self, number: int, line: str) -> tuple[str, tuple[tuple[str, int], ...]] | None:
        """The report that begins on line `number` ((its text, the frames before it)), else None."""
        # Every line a log has passes here: four `in`s turn away the lines that say none of what is
        # looked for ("exce": exceeded, exceeds, exception; "supported": both unsupported forms).
        if "exce" not in line and "supported" not in line and 'File "' not in line and "Traceback" not in line:
            return None
        if 'File "' in line and (found := FRAME.search(line)):  # a frame is never a report
            self.frames.append((found[1], int(found[2])))
            del self.frames[:-MOST_FRAMES]
            self.frame_line = number
            return None
        at = start(line)
        if at is None:
            if "Traceback (most recent call last)" in line:
                self.frames = []
            elif any(words in line for words in CHAINED):
                self.chained = True
            return None
        text = line[at:]
        repeat = self.chained and text == self.last
        frames = tuple(self.frames) if number - self.frame_line <= NEAR else ()
        self.last, self.chained, self.frames = text, False, []
        return None if repeat else (text, frames)


class Reader:
    """GPU reports in a log (logs.LogReader): each is one line, with the traceback frames
    before it (Traceback)."""

    def __init__(self) -> None:
        self.traceback = Traceback()

    def see(self, number: int, line: str) -> tuple[list[Found], bool]:
        found = self.traceback.see(number, line)
        if found is None:
            return [], False
        return [Found(number, found[0], found[1], family="gpu")], True

    def interrupt(self) -> list[Found]:
        return []

    def finish(self) -> list[Found]:
        return []


def parsed(text: str) -> GpuReport | None:
    """The GPU report of a found text, None when it is not one (a TPU report)."""
    report = parse_gpu_report(text)
    return None if report.form == "unknown" else report


# ---- the GPUs a report speaks of ----------------------------------------------------------------


TENSOR_MEMORY_FROM = (10, 0)  # Blackwell: 512 columns of 32-bit cells per SM (PTX ISA, tcgen05)
BACKEND = {"triton": "Triton", "mosaic_gpu": "Mosaic GPU"}


def labels(gpus: Sequence[Gpu]) -> str:
    """ "NVIDIA H100 80GB HBM3, NVIDIA H200 and NVIDIA B200"."""
    names = [g.label for g in gpus]
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)


def architectures(gpus: Sequence[Gpu]) -> str:
    return ", ".join(sorted({g.sm for g in gpus}, key=lambda sm: int(sm[3:].rstrip("a"))))


def capability_of(architecture: str) -> tuple[int, int]:
    """(8, 0) for "sm_80", (10, 0) for "sm_100a"."""
    digits = architecture.removeprefix("sm_").rstrip("a")
    return int(digits[:-1]), int(digits[-1])


def target_gpu(target: str | None) -> Gpu | None:
    """--target, when it names a GPU."""
    return gpu(target) if target and is_gpu(target) else None


def with_limit(available: int) -> list[Gpu]:
    """The targets whose block may use `available` bytes of shared memory: the GPU a report ran on."""
    return [g for g in GPUS.values() if g.shared_memory_limit == available]


def with_capability(needs: tuple[int, int]) -> list[Gpu]:
    return sorted((g for g in GPUS.values() if g.capability >= needs), key=lambda g: g.capability)


def ran_on(report: GpuReport, target: str | None) -> list[Gpu]:
    """The GPUs the report can be from: --target, else those whose limit or architecture it names."""
    chosen = target_gpu(target)
    if chosen is not None:
        return [chosen]
    if report.form == "shared_memory" and report.available is not None:
        return with_limit(report.available)
    if report.form == "unsupported_op" and report.architecture:
        return [g for g in GPUS.values() if g.sm == report.architecture.rstrip("a")]
    if report.form == "tensor_memory":
        return with_capability(TENSOR_MEMORY_FROM)
    if report.form == "compute_capability" and report.needs_capability is not None:
        return [g for g in GPUS.values() if g.capability < report.needs_capability]
    return []


def trace_target(report: GpuReport, target: str | None) -> Gpu:
    """The GPU the examples are traced on to place the report: the one it ran on, or the first that fits."""
    return next(iter(ran_on(report, target)), GPUS["h100"])


# ---- saying it ----------------------------------------------------------------------------------


def headline(report: GpuReport, target: str | None = None) -> str:
    """The report in one sentence, as the placed diagnostics say it too."""
    backend = BACKEND.get(report.backend or "", "the GPU compiler")
    on = target_gpu(target)
    where = f" on {on.label}" if on else ""
    if report.form == "shared_memory" and report.requested is not None and report.available is not None:
        return (
            f"{backend} kernel needs {render.size(report.requested)} of shared memory, "
            f"{render.size(report.available)} available{where} (over by {render.size(report.requested - report.available)})"
        )
    if report.form == "tensor_memory":
        return (
            f"{backend} kernel needs {report.requested} columns of tensor memory, {report.available} exist{where} "
            f"(over by {report.over_by})"
        )
    if report.form == "unsupported_op":
        on_what = report.architecture or "the architecture it was compiled for"
        ended = " (LLVM's fatal error: it ends the process)" if report.ended_process else ""
        return f"{backend}: '{report.op}' is not supported on {on_what}{ended}"
    if report.form == "compute_capability" and report.needs_capability is not None:
        major, minor = report.needs_capability
        fatal = " (LLVM's fatal error: it ends the process)" if "LLVM" in report.text else ""
        return f"{backend}: {report.what or 'the kernel'} needs compute capability {major}.{minor} or newer{fatal}"
    return f"{backend}: {render.key_line(report.text)}"


def limit_note(report: GpuReport, target: str | None) -> str | None:
    """Which GPU the report's limit is: --target's (or not), the one GPU with it, or several alike."""
    if report.available is None:
        return None
    limit = f"{render.size(report.available)} ({report.available} bytes)"
    on, owners = target_gpu(target), with_limit(report.available)
    if on is not None and on.shared_memory_limit == report.available:
        said = f"{limit} is what a block may use on {on.label} ({on.sm})"
    elif on is not None:
        said = f"{limit} is not {on.label}'s limit ({render.size(on.shared_memory_limit)}): the job ran on another GPU"
    elif len(owners) == 1:
        said = f"{limit} is what a block may use on {owners[0].label} ({owners[0].sm}): the job ran on it"
    elif owners:
        said = (
            f"{limit} is what a block may use on {labels(owners)} alike ({architectures(owners)}): "
            f"the text does not say which"
        )
    else:
        said = f"{limit} is the limit of no GPU vmem-lsp knows ({', '.join(GPUS)})"
    if report.backend == "mosaic_gpu":  # jax's own check, before the compiler's (tests/test_gpu_reports.py)
        said += "; Mosaic GPU checks against the device's figure, 227.0K where it has none"
    return said


def staging(backend: str | None) -> str:
    """What the request is made of, per backend (gpu_layout.py's model, measured on the compiler)."""
    if backend == "mosaic_gpu":
        return (
            "Mosaic GPU stages every block in and out in shared memory: the request is the sum of the "
            "in_specs' and out_specs' blocks"
        )
    return (
        "Triton stages the input blocks of the kernel's dots in shared memory (in_specs): a dot's "
        "16-bit operands together, f32 ones one at a time, and a dot in a loop num_stages deep"
    )


def shrink(requested: int, available: int) -> tuple[int, int] | None:
    """(k, bytes left) for the least k of 2, 4, ... 64 that brings `requested` ÷ k under `available`."""
    return next(((k, -(-requested // k)) for k in (2, 4, 8, 16, 32, 64) if -(-requested // k) <= available), None)


def ways_out(report: GpuReport, target: str | None = None) -> list[str]:
    """What to do, with the arithmetic where the report gives figures."""
    if report.form == "shared_memory" and report.requested is not None and report.available is not None:
        blocks = "every staged block" if report.backend == "mosaic_gpu" else "the input blocks of its dots"
        way = shrink(report.requested, report.available)
        said = [
            f"{blocks} down to {render.size(report.available)} or less in all"
            if way is None
            else f"{blocks} cut to 1/{way[0]} (its rows or columns ÷ {way[0]}) gives about {render.size(way[1])} "
            f"of {render.size(report.available)}: fits with {render.size(report.available - way[1])} to spare"
        ]
        roomier = [g for g in GPUS.values() if g.shared_memory_limit >= report.requested]
        if roomier:
            said.append(f"as it is, it fits on {labels(roomier)} ({architectures(roomier)})")
        return said
    if report.form == "tensor_memory":
        return [
            "smaller blocks for the kernel's dots: tensor memory holds their accumulators, "
            f"{report.available} columns a block"
        ]
    if report.form == "unsupported_op":
        family = op_family(report.op)
        have = family.gpus() if family else []
        said = []
        lacks = family and report.architecture and not family.on(capability_of(report.architecture))
        if report.backend == "mosaic_gpu" and family and lacks:
            said.append(
                f"Mosaic GPU lowers the kernel with {family.what}, which {report.architecture} lacks: lower it with "
                "Triton there (compiler_params=pltriton.CompilerParams(...), from jax.experimental.pallas "
                "import triton as pltriton)"
            )
        if have:
            said.append(f"run it on {labels(have)} ({architectures(have)})")
        return said
    if report.form == "compute_capability" and report.needs_capability is not None:
        have = with_capability(report.needs_capability)
        fp8 = "f8" in (report.what or "")
        said = [f"run it on {labels(have)} ({architectures(have)})"] if have else []
        if fp8:
            said.append("on an older GPU, give the kernel bf16 or f16 operands (convert the fp8 arrays before it)")
        return said
    return []


def details(report: GpuReport, target: str | None, frames: Sequence[tuple[str, int]]) -> list[str]:
    """The lines under the headline: where, which GPUs, what counts."""
    lines = []
    if report.place is not None:
        file, line, column = report.place
        lines.append(f"written at {render.display_path(file)}:{line}:{column} (MLIR's location of the op)")
    for file, line in user_frames(frames)[:1]:
        lines.append(f"raised at {render.display_path(file)}:{line} (the traceback's innermost frame of your code)")
    if report.form == "shared_memory":
        lines += [note for note in [limit_note(report, target)] if note] + [staging(report.backend)]
    elif report.form == "unsupported_op":
        family = op_family(report.op)
        lacking = ran_on(report, target)
        if family:
            lines.append(f"'{report.op}' is {family.what}: {family.has_it()}")
        else:
            lines.append(f"the compiler says only that {report.architecture or 'the architecture'} lacks it")
        if lacking and report.architecture:
            lines.append(f"{report.architecture} is {labels(lacking)}'s architecture")
    elif report.form == "compute_capability" and report.needs_capability is not None:
        have, lacking = with_capability(report.needs_capability), ran_on(report, None)
        lines.append(
            f"targets that have it: {labels(have) or 'none'}"
            + (f"; not {labels(lacking)} ({architectures(lacking)})" if lacking else "")
        )
    elif report.form == "tensor_memory":
        owners = with_capability(TENSOR_MEMORY_FROM)
        lines.append(f"tensor memory is Blackwell's ({architectures(owners)}: {labels(owners)})")
    return lines


def explain_text(report: GpuReport, head: str, target: str | None, frames: Sequence[tuple[str, int]]) -> str:
    lines = [f"{head}: {headline(report, target)}", *(f"  {d}" for d in details(report, target, frames))]
    ways = ways_out(report, target)
    if ways:
        lines += ["  ways out:", *(f"    - {w}" for w in ways)]
    return "\n".join(lines) + "\n"


def explain_json(report: GpuReport, line: int, target: str | None, frames: Sequence[tuple[str, int]]) -> dict:
    family = op_family(report.op)
    have = with_capability(report.needs_capability) if report.needs_capability else family.gpus() if family else []
    return {
        "line": line,
        "platform": "gpu",
        "form": report.form,
        "backend": report.backend,
        "requested": report.requested,
        "available": report.available,
        "over_by": report.over_by,
        "unit": None if report.requested is None else "columns" if report.form == "tensor_memory" else "bytes",
        "gpus": [g.name for g in ran_on(report, target)],
        "architecture": report.architecture,
        "op": report.op,
        "needs_capability": list(report.needs_capability) if report.needs_capability else None,
        "what": report.what,
        "have_it": [g.name for g in have],
        "place": dict(zip(("file", "line", "column"), report.place)) if report.place else None,
        "raised_at": next(({"file": file, "line": line} for file, line in user_frames(frames)), None),
        "headline": headline(report, target),
        "details": details(report, target, frames),
        "ways_out": ways_out(report, target),
        "text": report.text,
    }


# ---- placing: which traced call it is, and its diagnostics -------------------------------------


def places(report: GpuReport, frames: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """The lines the log names for the report's kernel, best first: MLIR's location of the op,
    then the traceback's frames of the user's code, innermost first."""
    return ([(report.place[0], report.place[1])] if report.place else []) + user_frames(frames)


def is_close(requested: int, model: int) -> bool:
    """The model's staged bytes are the request: within 2% (the compiler adds barriers, 8 bytes each)."""
    return abs(requested - model) <= requested // 50


def best_calls(report: GpuReport, calls: Sequence[TracedCall]) -> tuple[list[TracedCall], str]:
    """The traced calls the report is from, one a site, and why: of its backend (and with fp8
    operands for an fp8 conversion); for shared memory the site whose staged blocks' bytes, by
    the layout model, come nearest the request. More than one: a tie, said."""
    mine = [
        t for t in calls if t.call.other_platform is None and report.backend in (None, t.call.backend or report.backend)
    ]
    kind = BACKEND.get(report.backend or "", "GPU")
    if report.form == "compute_capability" and "f8" in (report.what or ""):
        mine = [t for t in mine if any(op.dtype.startswith("f8") for op in t.call.operands)]
        kind += " with fp8 operands"
    if not mine:
        return [], f"no {kind} kernel of the sources is reached by their examples"
    if report.form == "shared_memory" and report.requested is not None:
        requested = report.requested

        def distance(t: TracedCall) -> float:
            model = estimated_shared_memory(t.call, report.backend) or 1
            return max(model, requested) / min(model, requested)

        nearest = min(distance(t) for t in mine)
        mine = [t for t in mine if distance(t) == nearest]
    sites: dict = {}
    for t in mine:  # a site's first call: the first example to reach it
        sites.setdefault((t.path, t.site.span), t)
    chosen = list(sites.values())
    if len(chosen) > 1:
        return chosen, f"{len(chosen)} {kind} kernels fit it alike"
    [only] = chosen
    if report.form != "shared_memory" or report.requested is None:
        return chosen, f"the only {kind} kernel the examples reach (traced from {only.example})"
    model = estimated_shared_memory(only.call, report.backend)
    if is_close(report.requested, model):
        return chosen, (
            f"its staged blocks make {render.size(model)} as the example at {only.example} traces them: the request"
        )
    return chosen, (
        f"of the {kind} kernels, the nearest: its staged blocks make {render.size(model)} as the example at "
        f"{only.example} traces them, the report {render.size(report.requested)}"
    )


def placed_diagnostics(
    report: GpuReport,
    at: tuple[int, str],
    why: str,
    target: str | None,
    site: tuple[str, KernelSite] | None,
    traced: TracedCall | None = None,
    on_line: tuple[str, int] | None = None,
    sites_of: SitesOf | None = None,
) -> list[Diagnostic]:
    """check's GPU codes, from a log: VMEM051 on the pallas_call and VMEM050 on each BlockSpec whose
    block is staged (with the traced call's blocks), VMEM053 for tensor memory, VMEM052 on the line
    that wrote an op the architecture lacks (else the pallas_call). `at`: (the report's line, the log's name)."""
    from ..correlate import Anchor, line_span, spec_anchor
    from ..diagnostics import Diagnostic, Related

    where = f"from the report in {at[1]}, line {at[0]}"
    owners = ran_on(report, target)
    gpu_name = owners[0].name if len(owners) == 1 else None
    facts = {
        "form": report.form,
        "backend": report.backend,
        "requested": report.requested,
        "available": report.available,
        "gpus": [g.name for g in owners],
        "log_line": at[0],
        "why": why,
    }
    need = headline(report, target)
    kernel = Anchor(site[0], site[1].name_span) if site else None
    related = (Related(kernel.path, kernel.span, f"pallas_call: {need}"),) if kernel else ()
    out = []
    if report.form in ("unsupported_op", "compute_capability"):
        line_at = Anchor(on_line[0], line_span(on_line[1])) if on_line else kernel
        if line_at is not None:
            out.append(
                Diagnostic(
                    line_at.path, line_at.span, "error", "VMEM052", f"{need} ({where})", gpu_name, "log", related, facts
                )
            )
        return out
    if kernel is None:
        return out
    code = "VMEM053" if report.form == "tensor_memory" else "VMEM051"
    out.append(
        Diagnostic(
            kernel.path, kernel.span, "error", code, f"pallas_call: {need} ({where})", gpu_name, "log", (), facts
        )
    )
    if report.form != "shared_memory" or traced is None or site is None:
        return out
    for op, size, how in staged_blocks(traced.call, report.backend, gpu_name):
        anchor = spec_anchor(op, site[1], sites_of, kernel) if sites_of else kernel
        message = (
            f"{block_label(op, how)} = {render.size(size)} "
            f"(as the example at {traced.example} traces it), staged in shared memory; {need} ({where})"
        )
        out.append(
            Diagnostic(
                anchor.path,
                anchor.span,
                "error",
                "VMEM050",
                message,
                gpu_name,
                "log",
                related,
                {**facts, "role": op.role, "index": op.index, "block_bytes": block_bytes(op), "staged_bytes": size},
            )
        )
    return out


def placing(
    report: GpuReport, found: Found, target: str | None, log_name: str, sources: Sources
) -> tuple[list, Placement]:
    """A GPU report on the sources' lines: on the pallas_call at a line the log names (MLIR's
    location of the op, the traceback's frames), else on the line MLIR names in a source file,
    else on the traced call whose staged blocks come nearest the request (best_calls);
    the staged BlockSpecs from that call. A tie is said on each site (VMEM040). A place MLIR names
    outside the sources is no kernel of theirs: not placed."""
    lines = places(report, found.frames)
    named = next((hits[:1] for file, line in lines if (hits := sites_at(sources.sites, file, line))), [])
    files = {p for p, _, _ in sources.sites if report.place and p.endswith(report.place[0].split("/")[-1])}
    on_line = (files.pop(), report.place[1]) if report.place and len(files) == 1 and not named else None
    placement = Placement(tuple(named), "the line the log names" if named else "nothing in the log names it")
    if report.place and not named and on_line is None:
        where = f"{render.display_path(report.place[0])}:{report.place[1]}"
        placement = Placement((), f"the compiler places it at {where}, in none of the sources")
    chosen: list[TracedCall] = []
    sites_of = None
    if sources.tracer is not None and report.place is None and (not named or report.form == "shared_memory"):
        trace = sources.tracer.on(trace_target(report, target))()
        spans = {(p, s.span) for p, s in named} or {(p, s.span) for p, s, _ in sources.sites}
        chosen, why = best_calls(report, [t for t in trace.calls if (t.path, t.site.span) in spans])
        sites_of = trace.sites_of
        if not named:
            placement = Placement(
                tuple((t.path, t.site) for t in chosen), why if chosen or not trace.note else trace.note
            )
        elif chosen:
            placement = Placement(placement.sites, f"{placement.why}; {why}")
    if len(placement.sites) > 1:
        return undecided(found, placement, log_name), placement
    site = placement.sites[0] if placement.sites else None
    traced = chosen[0] if len(chosen) == 1 else None
    at = (found.line, log_name)
    return placed_diagnostics(report, at, placement.why, target, site, traced, on_line, sites_of), placement
