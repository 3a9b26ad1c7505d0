"""The engine under both faces, the CLI and the language server: source in,
diagnostics as data out.

    text/path --locate--> sites, examples --run--> per-target results
              --diagnose--> diagnostics (merged across chips, suppressed by # noqa)
    text + what compiles taught --analyse--> estimates (the static tier)

`check` is the CLI's whole run; the server calls `analyse` while the user
types and `run_example` + `diagnose` on save. Neither face words or merges a
diagnostic itself, and nothing here knows of LSP or of a terminal."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from . import render, views
from .budget import HEADROOM_WARNING, headroom_warning
from .compile.backend import CheckRequest, ResultCache, Runner, cache_for, runner_for
from .config import Settings
from .correlate import Anchor, call_anchor, kernel_site
from .diagnostics import Diagnostic, fold_examples, is_suppressed, merge_targets
from .families import families, family_of, target_label
from .results import ExampleResult, PhaseLimits
from .shard import Shard, ShardWork, owns, pair_key, take
from .source.directives import DirectiveError, Example, find_examples, parse_pyproject_example
from .source.locate import LocateResult, locate
from .source.model import KernelSite, Span
from .source.notebook import SUFFIX, Notebook, NotebookError, is_notebook, read_notebook
from .source.text import split_lines
from .unchecked import error_diagnostic, other_platform


@dataclass
class CheckOutcome:
    """What a check found: the diagnostics as data, each example's result on
    each target, the sources and sites it read, and its counts."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    files: int = 0
    examples: int = 0
    results: list = field(default_factory=list)  # (example, target, ExampleResult)
    compiles: int = 0  # example x target pairs the worker compiled (at least one kernel)
    traced: int = 0  # pairs traced for the model alone although compiles were asked: no compiler here
    reused: int = 0  # pairs it answered from kernels it had compiled before in this run (a --fix recheck)
    cache_hits: int = 0
    failed: int = 0  # pairs the worker answered with an error (not cached): neither compiled nor traced
    seconds: float = 0.0
    internal_errors: list = field(default_factory=list)  # (path, traceback): bugs of ours, not the files'
    sources: SourceFiles | None = None  # the texts checked and the sites located in them
    unchecked: int = 0  # pallas_call sites of the files checked that no example reached
    shard: ShardWork | None = None  # with --shard: what this shard did, for `vmem-lsp merge`


class SourceFiles:
    """Reads and locates each file once per run; `overlay` gives the text of
    files open in an editor, which wins over the disk."""

    def __init__(self, overlay: Callable[[str], str | None] | None = None):
        self.overlay = overlay or (lambda path: None)
        self.texts: dict[str, str | None] = {}
        self.located: dict[str, LocateResult] = {}
        self.notebooks: dict[str, Notebook] = {}
        self.problems: dict[str, str] = {}

    def text(self, path: str) -> str | None:
        """The text vmem-lsp reads for `path`: a notebook's is the module its code cells make."""
        if path not in self.texts:
            if (open_text := self.overlay(path)) is not None:
                self.texts[path] = open_text
                return open_text
            try:
                with open(path, encoding="utf-8") as f:
                    self.texts[path] = f.read()
            except (OSError, UnicodeDecodeError):
                self.texts[path] = None
            if is_notebook(path) and (read := self.texts[path]) is not None:
                try:
                    self.notebooks[path] = read_notebook(read, path)
                    self.texts[path] = self.notebooks[path].module
                except NotebookError as error:
                    self.problems[path], self.texts[path] = str(error), None
        return self.texts[path]

    def notebook(self, path: str) -> Notebook | None:
        self.text(path)
        return self.notebooks.get(path)

    def problem(self, path: str) -> str:
        """Why `path` could not be read, for its VMEM010."""
        return self.problems.get(path) or "cannot read this file as UTF-8 text"

    def sites_of(self, path: str) -> LocateResult:
        if path not in self.located:
            text = self.text(path)
            self.located[path] = (
                locate(text, path) if text is not None else LocateResult(sites=(), error=f"cannot read {path}")
            )
        return self.located[path]

    def internal_errors(self) -> list[tuple[str, str]]:
        """(path, traceback) of each file the locator failed on: a bug of ours, not the file's."""
        return [(path, r.internal_error) for path, r in self.located.items() if r.internal_error]

    def line(self, path: str, number: int) -> str:
        lines = split_lines(self.text(path) or "")
        return lines[number - 1] if 0 < number <= len(lines) else ""


def python_files(paths: list[str], exclude: tuple[str, ...]) -> list[str]:
    found = []
    for path in paths:
        if os.path.isfile(path):
            found.append(os.path.abspath(path))
            continue
        for directory, subdirs, files in os.walk(path):
            subdirs[:] = sorted(d for d in subdirs if d not in exclude and not d.startswith("."))
            found.extend(
                os.path.abspath(os.path.join(directory, f)) for f in sorted(files) if f.endswith((".py", SUFFIX))
            )
    return found


def directive_diagnostic(error: DirectiveError) -> Diagnostic:
    """VMEM010 for a directive that cannot run; VMEM021, a hint, for a
    template whose placeholders are still to fill in."""
    if error.unfinished or error.sweep:
        code = "VMEM021" if error.unfinished else "VMEM022"
        return Diagnostic(error.path, error.span, "information", code, error.message, origin="model")
    return Diagnostic(error.path, error.span, "error", "VMEM010", error.message, origin="model")


def gather_examples(files: list[str], settings: Settings, sources: SourceFiles, outcome: CheckOutcome):
    examples: list[Example] = []
    for path in files:
        text = sources.text(path)
        if text is None:
            outcome.diagnostics.append(Diagnostic(path, Span(1, 0, 1, 0), "error", "VMEM010", sources.problem(path)))
            continue
        found, errors = find_examples(text, path)
        examples.extend(found)
        outcome.diagnostics.extend(directive_diagnostic(e) for e in errors)
        if found and (problem := sources.sites_of(path).error):
            outcome.diagnostics.append(Diagnostic(path, Span(1, 0, 1, 0), "error", "VMEM010", problem))
    for entry in settings.examples:
        config = settings.config_path or "pyproject.toml"
        parsed = parse_pyproject_example(entry, config, sources.text(config) or "")
        if isinstance(parsed, DirectiveError):
            outcome.diagnostics.append(directive_diagnostic(parsed))
        else:
            examples.append(parsed)
    return examples


def request_for(example: Example, target: str, settings: Settings, spills: bool = False) -> CheckRequest:
    """The request of one example on one target; with `spills` (a check's settings.spills), a
    target whose family reads spills on request (a GPU's: ptxas's report of each kernel) asks for
    them too (never a sweep's, a fix's or the tuner's)."""
    limit = settings.scoped_limit_for(target)
    return CheckRequest(
        example.text,
        target,
        path=None if example.module else example.path,
        module=example.module or None,
        root=settings.root if example.module else None,
        compile=settings.compile,
        scoped_vmem_limit=limit,
        scoped_vmem_limit_source=settings.scoped_vmem_limit_source if limit else None,
        spills=spills and family_of(target).spills_on_request,
    )


def run_example(
    example: Example,
    target: str,
    settings: Settings,
    cache: ResultCache,
    worker: Runner,
    before_compile: Callable[[], None] | None = None,
) -> tuple[ExampleResult, bool]:
    """The result of one example on one target, from the cache when it holds
    one; (result, whether it came from the cache)."""
    request = request_for(example, target, settings, spills=settings.spills)
    result = cache.get(request)
    if result is not None:
        return result, True
    if before_compile:
        before_compile()
    result = worker.check(request, settings.limits())
    if result.error_kind == "no_compiler" and request.compile and family_of(target).model_without_compiler:
        # No libtpu here (macOS): the layout model's verdict, marked as such, beats none; why is
        # said once (as what the worker lacks), and its kernels say "not compiled". A family
        # without such a model (a GPU's) keeps the error: nothing was checked, VMEM012 says so.
        traced = worker.check(dataclasses.replace(request, compile=False), settings.limits())
        said = f"{result.error}: the model's estimates instead, nothing compiled"
        result = dataclasses.replace(traced, losses=(*traced.losses, said))
    cache.put(request, result)
    return result, False


def model_judged(call) -> bool:
    """A kernel its target's compiler did not see, though it was for that target: traced for
    the model alone (--no-compile, or no compiler here). Not one for another platform (VMEM015)
    nor one traced with interpret=True (VMEM014): those are said as such."""
    return not call.compiled and not call.other_platform and not call.interpret


def cached_runner(cache: ResultCache, worker: Runner, limits: PhaseLimits) -> Callable[[CheckRequest], ExampleResult]:
    """worker.check through the cache: traces and verifying compiles of fixes repeat."""

    def run(request: CheckRequest) -> ExampleResult:
        result = cache.get(request)
        if result is None:
            result = worker.check(request, limits)
            cache.put(request, result)
        return result

    return run


class Progress(Protocol):
    """What a long run tells its face: a kernel about to compile, a kernel done.
    The CLI draws a bar (cli.common.ProgressBar); a run nobody watches gets `Silent`."""

    def start(self, total: int) -> None: ...

    def line(self, text: str) -> None: ...

    def advance(self, where: str) -> None: ...


class Silent:
    """The Progress of a run nobody watches: it says nothing."""

    def start(self, total: int) -> None:
        pass

    def line(self, text: str) -> None:
        pass

    def advance(self, where: str) -> None:
        pass


def check(
    paths: list[str],
    settings: Settings,
    *,
    use_cache: bool = True,
    progress: Progress | None = None,
    worker=None,
    shard: Shard | None = None,
) -> CheckOutcome:
    """Every example under `paths` on every target; `worker` is a runner to
    reuse (compile.backend.runner_for; else one is made and stopped here). With `shard`,
    only its pairs and the diagnostics of the files it owns (shard.py)."""
    started = time.perf_counter()
    outcome = CheckOutcome()
    sources = SourceFiles()
    files = python_files(paths, settings.exclude)
    outcome.files = len(files)
    examples = gather_examples(files, settings, sources, outcome)
    outcome.examples = len(examples)
    cache = cache_for(settings, enabled=use_cache)
    own_worker = worker is None
    worker = worker or runner_for(settings)
    jobs = [(example, target) for example in examples for target in settings.targets]
    owned = files
    if shard is not None:
        plan, jobs = jobs, take(jobs, shard, settings.root)
        owned = [f for f in files if owns(shard, f, settings.root)]
        outcome.diagnostics = [d for d in outcome.diagnostics if owns(shard, d.path, settings.root)]
    bar = progress or Silent()
    bar.start(len(jobs))

    def run(numbered):
        number, (example, target) = numbered
        where = render.at(example.path, example.line)
        announce = lambda: bar.line(f"[{number}/{len(jobs)}] {target} {where} {example.text}")
        result, cached = run_example(example, target, settings, cache, worker, announce)
        bar.advance(where)
        return example, target, result, cached

    try:
        if getattr(worker, "size", 1) > 1:
            with ThreadPoolExecutor(worker.size) as executor:
                done = list(executor.map(run, enumerate(jobs, 1)))
        else:
            done = [run(job) for job in enumerate(jobs, 1)]
    finally:
        if own_worker:
            worker.stop()
    for example, target, result, cached in done:
        outcome.cache_hits += cached
        reused = not cached and result.calls and all(c.reused for c in result.calls)
        outcome.reused += bool(reused)
        # A pair whose example raised (or whose capture failed) compiled nothing: it is not counted as
        # compiled; nor is one traced for the model alone where compiles were asked (no compiler here).
        ran = bool(result.calls) and not result.error
        model_only = ran and settings.compile and any(model_judged(c) for c in result.calls)
        # A GPU kernel on a TPU chip (VMEM015) was traced, and is not counted as compiled for it.
        elsewhere = ran and all(c.other_platform for c in result.calls)
        outcome.traced += not cached and model_only
        outcome.compiles += not (cached or reused or model_only or elsewhere) and ran
        outcome.failed += not cached and not ran
        outcome.results.append((example, target, result))
    # Where an example of a file could not run (it raised, the worker was refused), VMEM010 says
    # so on it; what it would have reached is not known, so that file's kernels get no VMEM020.
    unknown = {example.path for example, _, result in outcome.results if result.error}
    unreached = not_reached(
        [f for f in owned if f not in unknown], [r for _, _, r in outcome.results], sources, settings.require_examples
    )
    outcome.unchecked = len(unreached)
    pairs = [(e, r) for e, _, r in outcome.results]
    # A kernel that fits with little to spare, as the editor warns on it (VMEM005; a warning: exit 0).
    near = headroom_warnings(views.learn([r for _, r in pairs], sources.sites_of), HEADROOM_WARNING)
    parts, compiled = unmerged(outcome.diagnostics, pairs, sources, [*unreached, *near]), compiled_chips(pairs)
    outcome.diagnostics = merge_chips(parts, compiled)
    outcome.internal_errors = sources.internal_errors()
    if shard is not None:
        key = lambda example, target: pair_key(example, target, settings.root)
        outcome.shard = ShardWork(
            shard,
            plan=sorted(key(e, t) for e, t in plan),
            done=sorted(key(e, t) for e, t, _ in outcome.results),
            examples=len(examples),
            parts=parts,
            compiled=compiled,
            covered=covered_sites([r for _, r in pairs], sources),
            unknown=unknown,
            internal_errors=[path for path, _ in outcome.internal_errors],
        )
    outcome.sources = sources
    outcome.seconds = time.perf_counter() - started
    return outcome


def diagnose(
    found: list[Diagnostic],
    results: list[tuple[Example, ExampleResult]],
    sources: SourceFiles,
    extra: Sequence[Diagnostic] = (),
) -> list[Diagnostic]:
    """The diagnostics of compiled examples, as both faces show them: each
    example's on each chip mapped to source, the same finding once (a kernel
    called twice alike), one per subject across chips, none that a `# noqa`
    on its line suppresses. `found` are diagnostics gathered before (bad
    directives), `extra` any the face adds (headroom warnings)."""
    return merge_chips(unmerged(found, results, sources, extra), compiled_chips(results))


def unmerged(
    found: list[Diagnostic],
    results: list[tuple[Example, ExampleResult]],
    sources: SourceFiles,
    extra: Sequence[Diagnostic] = (),
) -> list[Diagnostic]:
    """`diagnose` before chips are merged: what a shard hands `vmem-lsp merge`,
    whose chips another shard may hold."""
    mapped = [d for example, result in results for d in diagnostics_for(example, result, sources)]
    unique = dict.fromkeys([*found, *mapped, *extra])
    return [d for d in unique if not is_suppressed(d, sources.line(d.path, d.span.start_line))]


def diagnostics_for(example: Example, result: ExampleResult, sources: SourceFiles) -> list[Diagnostic]:
    """All diagnostics one example's result on one target gives: its family's, and what every
    family says alike (an example that did not run, a kernel for another platform)."""
    family = family_of(result.target)
    if result.error:
        return [
            family.ended(example, result, sources)
            or error_diagnostic(example, result, result.error, family.label(result.target))
        ]
    found = family.diagnostics(example, result, sources)
    for number, call in enumerate(result.calls):
        if call.other_platform:
            owner = next((f for f in families() if f.platform == call.other_platform), None)
            kind = owner.kernel_words if owner is not None else f"a {call.other_platform} kernel"
            anchor = call_anchor(call, kernel_site(call, sources.sites_of), Anchor(example.path, example.span))
            found.append(
                other_platform(call, kind, family.label(result.target), anchor, example, number, result.target)
            )
    return found


def merge_chips(diagnostics: list[Diagnostic], compiled: dict) -> list[Diagnostic]:
    """One diagnostic per subject across chips, with the chips its kernel compiled on;
    one for the examples that reach a kernel alike."""
    return generation_differences(fold_examples(merge_targets(diagnostics)), compiled)


# Compile errors whose chips are worth comparing: one generation's rejection is news.
GENERATION_CODES = ("VMEM011", "VMEM030", "VMEM031", "VMEM032", "VMEM033", "VMEM034")


def compiled_chips(results: list[tuple[Example, ExampleResult]]) -> dict:
    """(example key, call number) -> the chips on which that kernel compiled and fit."""
    compiled: dict = {}
    for example, result in results:
        for number, call in enumerate(result.calls):
            if call.compiled and call.fits:
                compiled.setdefault((example.key, number), set()).add(result.target)
    return compiled


def generation_differences(diagnostics: list[Diagnostic], compiled: dict) -> list[Diagnostic]:
    """A compile error that fails on some chips says on which others the
    same example compiled (`compiled`, as compiled_chips gives it):
    "fails on TPU v5e; compiles on TPU v6e"."""
    out = []
    for d in diagnostics:
        if d.code in GENERATION_CODES and d.subject is not None and d.target:
            others = sorted(compiled.get((d.subject.example, d.subject.call), set()) - set(d.target.split(",")))
            if others:
                d = dataclasses.replace(
                    d,
                    message=d.message + render.compiles_on([target_label(t) for t in others]),
                    facts={**d.facts, "compiles_on": others},
                )
        out.append(d)
    return out


def reached_sites(results: list[ExampleResult], sites_of) -> set[tuple[str, Span]]:
    """(path, span) of every pallas_call site a captured call came from."""
    reached = set()
    for result in results:
        for call in result.calls:
            if (site := kernel_site(call, sites_of)) is not None:
                reached.add((site.path, site.span))
    return reached


def covered_sites(results: list[ExampleResult], sources: SourceFiles) -> set[tuple[str, Span]]:
    """(path, name span) of every site `not_reached` would count as reached:
    a shard's, so that the merge drops another shard's VMEM020 on it."""
    reached = reached_sites(results, sources.sites_of)
    return {
        (path, site.name_span)
        for path in {p for p, _ in reached}
        for site in sources.sites_of(path).sites
        if any(where == path and overlaps(site.span, span) for where, span in reached)
    }


def not_reached(
    files: list[str], results: list[ExampleResult], sources: SourceFiles, required: bool
) -> list[Diagnostic]:
    """VMEM020 on every pallas_call of `files` that no example reached: a
    checker that says nothing about a kernel it never saw lets its author
    believe it fits. "Reached" is what the worker captured, so a library
    kernel an example reaches is checked, and a library's other sites are
    reported only when the library is among the files given. A site that
    holds or is held by a reached one (a functools.partial of pallas_call
    and its call) counts as reached."""
    reached = reached_sites(results, sources.sites_of)
    found = []
    for path in files:
        near = [span for where, span in reached if where == path]
        for site in sources.sites_of(path).sites:
            if not any(overlaps(site.span, span) for span in near):
                found.append(unreached_diagnostic(site, sources.text(path) or "", required))
    return found


def unreached_diagnostic(site: KernelSite, text: str, required: bool) -> Diagnostic:
    """VMEM020 for one site: a warning, an error where examples are required.
    The example it suggests calls what `--add-examples` would write a template
    for (source/templates.py): the module-level function that reaches the
    call, not the nested one (`outer.inner`) it sits in."""
    from .source.calls import kernel_name

    name = kernel_name(text, site.span)
    to_call = site.example_calls or (site.function or "").split(".")[0] or None  # found by the locator
    return Diagnostic(
        site.path,
        site.name_span,
        "error" if required else "warning",
        "VMEM020",
        render.not_reached(name, site.function, to_call),
        origin="model",
        facts={"kernel": name, "function": site.function, "example_calls": to_call},
    )


def overlaps(a: Span, b: Span) -> bool:
    """Two spans share a position: a site and one it holds or is held by."""
    starts_a, ends_a = (a.start_line, a.start_col), (a.end_line, a.end_col)
    return starts_a <= (b.end_line, b.end_col) and (b.start_line, b.start_col) <= ends_a


@dataclass
class Analysis:
    """The static tier of one document's text: what the locator found, its
    examples, and the estimates from what earlier compiles taught."""

    path: str
    version: int
    located: LocateResult
    examples: list[Example]
    estimates: list[Diagnostic]
    budgets: dict  # SiteKey -> {target: Budget}, estimated


def analyse(path: str, version: int, text: str, targets, known: dict, headroom: float, locator=locate) -> Analysis:
    """Locate, find the examples and estimate every site that a compile has
    taught (`known`: SiteKey -> KnownKernel) for the text as typed. Never
    raises on any text; changes nothing."""
    located = locator(text, path)
    examples, errors = find_examples(text, path)
    estimates = [directive_diagnostic(e) for e in errors]
    budgets = {}
    for site, key in zip(located.sites, views.site_keys(located.sites)):
        if (taught := known.get(key)) is not None:
            found, budgets[key] = views.estimated_diagnostics(site, key, taught, targets, headroom)
            estimates.extend(found)
    return Analysis(path, version, located, examples, estimates, budgets)


def headroom_warnings(learned: views.Learned, headroom: float) -> list[Diagnostic]:
    """VMEM005 for each compiled kernel that fits with less than `headroom` free."""
    return [
        headroom_warning(learned.sites[key], b, estimated=False)
        for key, by_target in learned.budgets.items()
        for b in by_target.values()
        # A GPU's figure of a kernel that fits is a model's: its family warns on no such figure.
        # (A model-only trace's budget carries no verdict of the compiler: one over its limit is no near miss.)
        if b.fits and family_of(b.target).headroom_warnings and 0 <= b.headroom() < headroom
    ]


def find_fixes(outcome: CheckOutcome, settings: Settings, worker, use_cache: bool = True) -> list[tuple]:
    """[(example, [Fix, ...])] for each overflowing example of a check, best
    first: candidates ranked by the layout model, verified by compiling them
    on every target (through the cache: traces and compiles of fixes repeat)."""
    from .compile.backend import estimate_runner
    from .fixes.plan import plan

    sources = outcome.sources or SourceFiles()
    cache = cache_for(settings, enabled=use_cache)
    run = cached_runner(cache, worker, settings.limits())
    estimator = estimate_runner(settings) if settings.faster_fixes else None  # its workers start when asked
    try:
        estimate = cached_runner(cache, estimator, settings.limits()) if estimator is not None else None
        return plan(outcome.results, settings.targets, sources.text, run, sources.sites_of, estimate=estimate)
    finally:
        if estimator is not None:
            estimator.stop()


def example_templates(outcome: CheckOutcome, settings: Settings) -> list:
    """A `# vmem:` template (source.templates.Template) for each function that
    reaches a pallas_call no example reached, at most one per function, none
    where the file already has a directive calling it: a second run adds
    nothing."""
    from .source.templates import template_for, test_files

    sources = outcome.sources or SourceFiles()
    templates, seen = [], set()
    for d in outcome.diagnostics:
        if d.code != "VMEM020":
            continue
        text = sources.text(d.path) or ""
        site = next((s for s in sources.sites_of(d.path).sites if s.name_span == d.span), None)
        if site is None:
            continue
        others = [(p, t) for p in test_files(d.path, settings.root) if p != d.path and (t := sources.text(p))]
        template = template_for(text, d.path, site.span, others)
        if template is None or (d.path, template.function) in seen:
            continue
        seen.add((d.path, template.function))
        written, _ = find_examples(text, d.path)
        if (
            not any(e.text.startswith(f"{template.function}(") for e in written)
            and f"# vmem: {template.function}(" not in text
        ):
            templates.append(template)
    return templates


def exit_code(outcome: CheckOutcome) -> int:
    if outcome.internal_errors or any(result.error_kind == "internal" for _, _, result in outcome.results):
        return 2
    return 1 if any(d.severity == "error" for d in outcome.diagnostics) else 0
