"""What an editor shows, as plain data: estimates while typing, budgets per
site, hover tables and hint texts. No LSP types here; the server converts."""

from __future__ import annotations

from dataclasses import dataclass

from . import budget as budgets
from . import render
from .budget import Budget, KnownKernel, Part
from .correlate import SitesOf, kernel_site, spec_ordinals
from .diagnostics import Diagnostic
from .gpu.budget import SHARED, culprits, edited_call, estimate_gpu, from_gpu_compile, scale_of
from .gpu.report import parse_gpu_report
from .gpu.targets import is_gpu
from .render import size as format_size
from .results import ExampleResult
from .source.model import KernelSite, Span
from .tpu import layout
from .tpu.parse import parse_report

SiteKey = tuple  # (path, enclosing function, ordinal of the site within that function)


def site_keys(sites: tuple[KernelSite, ...]) -> list[SiteKey]:
    """Keys that survive edits elsewhere in the file: lines move, the function
    and the order of sites within it do not."""
    seen: dict = {}
    keys = []
    for site in sites:
        ordinal = seen.get(site.function, 0)
        seen[site.function] = ordinal + 1
        keys.append((site.path, site.function, ordinal))
    return keys


def key_of(site: KernelSite, sites: tuple[KernelSite, ...]) -> SiteKey:
    return site_keys(sites)[sites.index(site)]


@dataclass
class Learned:
    """What one compile taught, per site."""

    known: dict  # SiteKey -> KnownKernel
    budgets: dict  # SiteKey -> {target: Budget}
    sites: dict  # SiteKey -> KernelSite (as located when compiled)


def learn(results: list[ExampleResult], sites_of: SitesOf) -> Learned:
    learned = Learned({}, {}, {})
    for result in results:
        on_gpu = is_gpu(result.target)
        for call in result.calls:
            site = kernel_site(call, sites_of)
            if site is None or call.other_platform:  # not compiled for this target: nothing to learn
                continue
            key = key_of(site, sites_of(site.path).sites)
            previous = learned.known.get(key)
            internal = dict(previous.internal) if previous else {}
            on_gpus = dict(previous.gpu) if previous else {}
            if on_gpu:
                gpu_report = None if call.fits else parse_gpu_report(call.compiler_text or "")
                compiled = from_gpu_compile(call, gpu_report, result.target)
                on_gpus[result.target] = (call.gpu_backend, scale_of(call, gpu_report, result.target))
            else:
                report = None if call.fits else parse_report(call.compiler_text or "")
                compiled = budgets.from_compile(call, report, result.target, result.libtpu)
                internal_part = next((p for p in compiled.parts if p.kind == "internal"), None)
                if internal_part:
                    internal[result.target] = internal_part.bytes
            learned.budgets.setdefault(key, {})[result.target] = compiled
            learned.sites[key] = site
            ordinals = spec_ordinals(call, site)
            learned.known[key] = KnownKernel(
                call,
                ordinals,
                internal,
                budgets.names_shown(call, site, ordinals),
                result.libtpu if not on_gpu else previous.libtpu if previous else None,
                on_gpus,
                (previous is not None and previous.tpu) or not on_gpu,
            )
    return learned


# ---- the static tier ----------------------------------------------------------------


def part_span(part: Part, site: KernelSite, known: KnownKernel | None) -> Span:
    """Where an estimated part is marked: its BlockSpec's block shape, its
    scratch entry, or the pallas_call."""
    if part.kind in ("input_window", "output_window") and known is not None:
        role = "in" if part.kind == "input_window" else "out"
        ordinal = known.spec_ordinals.get((role, part.index))
        specs = site.in_specs if role == "in" else site.out_specs
        if ordinal is not None and ordinal < len(specs):
            return (specs[ordinal].block_shape or specs[ordinal]).span
    if part.kind == "scratch":
        entry = next((s for s in site.scratch if s.index == part.index), None)
        if entry is not None:
            return entry.span
    return site.name_span


def needs_text(b: Budget, over: bool = False) -> str:
    """The budget sentence of an estimate; with how much it is over, to save and compile."""
    return render.needs(
        b.total,
        b.limit,
        b.label,
        scoped=b.limit_kind == "scoped",
        space=b.space,
        approx=True,
        over=b.total - b.limit if over else None,
        note=render.SAVE_TO_COMPILE,
    )


def estimated_diagnostics(
    site: KernelSite, key: SiteKey, known: KnownKernel, targets, headroom: float
) -> tuple[list[Diagnostic], dict]:
    """Estimates for one site as written now: errors where it would not fit,
    a warning where it fits with less than `headroom` free."""
    found, by_target = [], {}
    for target in targets:
        if is_gpu(target):
            if target in known.gpu:  # a GPU the kernel was compiled for
                by_target[target] = b = estimate_gpu(site, known, target)
                found.extend([] if b.fits else gpu_estimate_diagnostics(site, known, b))
            continue
        if not known.tpu:  # a GPU kernel: not estimated on TPU chips
            continue
        b = budgets.estimate(site, known, target)
        by_target[target] = b
        if not b.fits:
            need = needs_text(b, over=True)
            for part in b.parts:
                if part.kind == "internal":
                    continue
                wording = render.part(part.label, part.bytes, need, buffers=part.buffers, approx=True)
                found.append(
                    Diagnostic(
                        site.path,
                        part_span(part, site, known),
                        "error",
                        "VMEM001",
                        wording.text(),
                        target,
                        "model",
                        facts={"estimated": True, "size": part.bytes},
                    )
                )
            found.append(
                Diagnostic(
                    site.path,
                    site.name_span,
                    "error",
                    "VMEM002",
                    need,
                    target,
                    "model",
                    facts={"estimated": True, "total": b.total},
                )
            )
        elif (unseen := layout.unseen_could_overflow(known.call, b.total, b.limit, target)) is not None:
            found.append(lower_bound_warning(site, b, unseen))
        elif b.headroom() < headroom:
            found.append(headroom_warning(site, b, estimated=True))
    return found, by_target


def gpu_estimate_diagnostics(site: KernelSite, known: KnownKernel, b: Budget) -> list[Diagnostic]:
    """While typing, a GPU kernel over its shared memory by the model: VMEM050
    on each staged block, VMEM051 on the pallas_call, as a compile would say."""
    need = needs_text(b, over=True)
    backend, scale = known.gpu[b.target]
    edited = edited_call(site, known, backend)
    over = {(op.role, op.index) for op in culprits(edited, backend, b.limit, scale)}
    found = [
        Diagnostic(
            site.path,
            part_span(part, site, known),
            "error",
            "VMEM050",
            render.part(part.label, part.bytes, need, approx=True).text(),
            b.target,
            "model",
            facts={"estimated": True, "size": part.bytes},
        )
        for part in b.parts
        if ("in" if part.kind == "input_window" else "out", part.index) in over
    ]
    found.append(
        Diagnostic(
            site.path,
            site.name_span,
            "error",
            "VMEM051",
            need,
            b.target,
            "model",
            facts={"estimated": True, "total": b.total},
        )
    )
    return found


def lower_bound_warning(site: KernelSite, b: Budget, unseen) -> Diagnostic:
    """VMEM006 while typing: on the line that computes the value when it is in this file."""
    here = unseen.origin is not None and unseen.origin.file == site.path
    span = Span(unseen.origin.line, 0, unseen.origin.line, 0) if here else site.name_span
    wording = render.lower_bound(unseen.what, unseen.bytes, needs_text(b))
    return Diagnostic(
        site.path,
        span,
        "warning",
        "VMEM006",
        wording.text(),
        b.target,
        "model",
        facts={"estimated": True, "total": b.total, "limit": b.limit, "unseen": unseen.what},
    )


def headroom_warning(site: KernelSite, b: Budget, estimated: bool) -> Diagnostic:
    free = max(b.headroom(), 0.0)
    return Diagnostic(
        site.path,
        site.name_span,
        "warning",
        "VMEM005",
        render.headroom(b.label, free, needs_text(b), estimated),
        b.target,
        "model",
        facts={"estimated": True, "total": b.total, "limit": b.limit},
    )


# ---- hover and hints ---------------------------------------------------------------


SCOPES = {"scoped": "scoped limit", "physical": "capacity", SHARED: "shared memory a block may use"}
STAGED_NOTE = (
    "Blocks staged in shared memory: Triton stages its dots' input blocks (16-bit operands together, f32 "
    "ones one at a time, a loop's tiles num_stages deep), Mosaic GPU every block in and out. The total is "
    "the compiler's where it refused the kernel, else the model's (gpu_layout.py: within 10% of the "
    "compiler's on 97% of the Triton kernels measured, exact on Mosaic GPU's)."
)


def bar(share: float, width: int = 20) -> str:
    filled = max(0, min(width, round(share * width)))
    return "█" * filled + "░" * (width - filled)


def hover_markdown(site: KernelSite, by_target: dict) -> str:
    """The kernel's VMEM budget per target, as a small markdown table each."""
    if not by_target:
        return (
            f"**pallas_call** `{site.function or '<module>'}`: no VMEM figures yet. Add a "
            f"`# vmem: f(f32[...])` example and save to compile it."
        )
    sections = []
    for b in by_target.values():
        source = "compiler" if b.source == "compiler" else "layout model estimate"
        verdict = "fits" if b.fits else "**does not fit**"
        rows = ["| part | bytes | buffers | share |", "| --- | ---: | ---: | --- |"]
        for part in b.parts:
            star = "~" if part.estimated else ""
            rows.append(
                f"| {part.label} | {star}{format_size(part.bytes)} | {part.buffers or ''} | "
                f"`{bar(part.bytes / b.limit if b.limit else 0)}` |"
            )
        scope = SCOPES[b.limit_kind]
        rows.append(
            f"| **total** | **{format_size(b.total)}** | | `{bar(b.total / b.limit if b.limit else 0)}` "
            f"{b.total / b.limit:.0%} of {scope} |"
        )
        physical = "" if b.limit_kind == SHARED else f" ({format_size(b.capacity)} physical)"
        note = f"\n\n{STAGED_NOTE}" if b.limit_kind == SHARED else ""
        sections.append(
            f"**{b.label}**: {verdict}, {format_size(b.total)} of {format_size(b.limit)} "
            f"{scope}{physical}; {source}\n\n" + "\n".join(rows) + note
        )
    return "\n\n".join(sections)


def part_hint(part: Part) -> str:
    return f"{format_size(part.bytes)} x{part.buffers or 1}"


def total_hint(by_target: dict) -> str:
    """`VMEM v5e 12.00M/16.00M ok | shared memory h100 ~128.0K/227.0K ok`: each space once."""
    spaces: dict[str, list[str]] = {}
    for target, b in by_target.items():
        mark = "ok" if b.fits else "over"
        approx = "~" if b.source == "model" else ""
        spaces.setdefault(b.space, []).append(f"{target} {approx}{format_size(b.total)}/{format_size(b.limit)} {mark}")
    return " | ".join(f"{space} " + " | ".join(pieces) for space, pieces in spaces.items())


def spec_hints(site: KernelSite, known: KnownKernel | None, b: Budget) -> list[tuple[Span, str]]:
    """(where, text) after each BlockSpec and scratch entry that has a figure."""
    hints = []
    for part in b.parts:
        if part.kind == "internal":
            continue
        span = part_span(part, site, known)
        if span != site.name_span:
            hints.append((span, part_hint(part)))
    return hints


def site_at(sites: tuple[KernelSite, ...], line: int) -> KernelSite | None:
    """The site whose pallas_call, BlockSpecs or scratch cover `line` (1-based)."""
    for site in sites:
        parts = [site.span, *(s.span for s in (*site.in_specs, *site.out_specs)), *(s.span for s in site.scratch)]
        if any(span.contains_line(line) for span in parts):
            return site
    return None
