"""What an editor shows, as plain data: estimates while typing, budgets per
site, hover tables and hint texts. No LSP types here; the server converts.
The figures are each target's family's (Family.learn, Family.estimate)."""

from __future__ import annotations

from dataclasses import dataclass

from .budget import Budget, KnownKernel, Part, names_shown, part_span
from .correlate import SitesOf, kernel_site, spec_ordinals
from .diagnostics import Diagnostic
from .families import family_of, target_label
from .held import held
from .render import size as format_size
from .results import CapturedCall, ExampleResult
from .source.model import KernelSite, Span

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
        family = family_of(result.target)
        for call in result.calls:
            site = kernel_site(call, sites_of)
            if site is None or call.other_platform:  # not compiled for this target: nothing to learn
                continue
            key = key_of(site, sites_of(site.path).sites)
            previous = learned.known.get(key)
            taught = dict(previous.learned) if previous else {}
            compiled, taught[family.name] = family.learn(call, result, taught.get(family.name))
            learned.budgets.setdefault(key, {})[result.target] = compiled
            learned.sites[key] = site
            ordinals = spec_ordinals(call, site)
            learned.known[key] = KnownKernel(call, ordinals, names_shown(call, site, ordinals), taught)
    return learned


# ---- the static tier ----------------------------------------------------------------


def estimated_diagnostics(
    site: KernelSite, key: SiteKey, known: KnownKernel, targets, headroom: float
) -> tuple[list[Diagnostic], dict]:
    """Estimates for one site as written now, on each target whose family can say:
    errors where it would not fit, warnings where it may not or fits with little room."""
    found, by_target = [], {}
    for target in targets:
        b, said = family_of(target).estimate(site, known, target, headroom)
        if b is not None:
            by_target[target] = b
            found.extend(said)
    return found, by_target


# ---- hover and hints ---------------------------------------------------------------


SCOPES = {"scoped": "scoped limit", "physical": "capacity", "shared": "shared memory a block may use"}


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
        scope = SCOPES.get(b.limit_kind, b.limit_kind)
        rows.append(
            f"| **total** | **{format_size(b.total)}** | | `{bar(b.total / b.limit if b.limit else 0)}` "
            f"{b.total / b.limit:.0%} of {scope} |"
        )
        physical = "" if b.limit_kind == "shared" else f" ({format_size(b.capacity)} physical)"
        note = f"\n\n{b.note}" if b.note else ""
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


def held_at(call: CapturedCall, path: str, line: int) -> bool:
    """Whether a body account of `call` (any chip's) holds a value made on `line` of `path`."""
    return any(
        u.kind in ("held", "kept") and u.origin and u.origin.file == path and u.origin.line == line for u in call.unseen
    )


def body_markdown(call: CapturedCall, line: int | None = None, kind: str = "held", on: str = "") -> str:
    """The values the kernel body holds at its peak (the body account of `kind`, the chips'
    `on` names), largest first, each with the line that makes it and its share of the peak;
    the one made on `line` in bold. Empty without an account."""
    values = held(call, kind)
    if not values:
        return ""
    peak = sum(u.bytes for u in values)
    across = values[0].across
    rows = ["| value | line | bytes | share of the peak |", "| --- | ---: | ---: | --- |"]
    for u in values:
        mark = "**" if u.origin is not None and u.origin.line == line else ""
        what = u.what.split(" across ", 1)[0]
        at = u.origin.line if u.origin else ""
        rows.append(
            f"| {mark}{what}{mark} | {at} | {format_size(u.bytes)} | `{bar(u.bytes / peak)}` {u.bytes / peak:.0%} |"
        )
    where = f" (live across line {across.line})" if across is not None else ""
    chips = f" on {on}" if on else ""
    return f"**kernel body at its peak**{chips}{where}: {format_size(peak)}\n\n" + "\n".join(rows)


def body_accounts_markdown(call: CapturedCall, targets, line: int | None = None) -> str:
    """body_markdown of each body account the `targets` have (their family says which), one
    table each, named by their chips where they differ: v5e keeps an unrolled loop's steps
    that v6e updates in place."""
    kinds: dict[str, list[str]] = {}
    for target in targets:
        kinds.setdefault(family_of(target).account_kind(call, target), []).append(target_label(target))
    if len(kinds) <= 1:
        return body_markdown(call, line, next(iter(kinds), "held"))
    tables = (body_markdown(call, line, kind, ", ".join(labels)) for kind, labels in kinds.items())
    return "\n\n".join(t for t in tables if t)


def site_at(sites: tuple[KernelSite, ...], line: int) -> KernelSite | None:
    """The site whose pallas_call, BlockSpecs or scratch cover `line` (1-based)."""
    for site in sites:
        parts = [site.span, *(s.span for s in (*site.in_specs, *site.out_specs)), *(s.span for s in site.scratch)]
        if any(span.contains_line(line) for span in parts):
            return site
    return None
