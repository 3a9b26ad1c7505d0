"""`vmem-lsp check`: files in, diagnostics out. Finds the examples, asks the
cache or the worker for each example on each target, and maps the results
back to source."""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Callable

from .compile.cache import ResultCache
from .compile.client import CheckRequest, WorkerClient
from .compile.protocol import ExampleResult
from .config import Settings
from .diagnostics import Diagnostic, is_suppressed
from .mapping import diagnostics_for
from .source.directives import DirectiveError, Example, find_examples, parse_pyproject_example
from .source.locate import LocateResult, locate
from .source.model import Span

Progress = Callable[[str], None]


@dataclass
class CheckOutcome:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    files: int = 0
    examples: int = 0
    results: list = field(default_factory=list)   # (example, target, ExampleResult)
    compiles: int = 0           # example x target pairs sent to the worker
    cache_hits: int = 0
    seconds: float = 0.0


class SourceFiles:
    """Reads and locates each file once per run; `overlay` gives the text of
    files open in an editor, which wins over the disk."""

    def __init__(self, overlay: Callable[[str], str | None] | None = None):
        self.overlay = overlay or (lambda path: None)
        self.texts: dict[str, str | None] = {}
        self.located: dict[str, LocateResult] = {}

    def text(self, path: str) -> str | None:
        if path not in self.texts:
            if (open_text := self.overlay(path)) is not None:
                self.texts[path] = open_text
                return open_text
            try:
                with open(path, encoding="utf-8") as f:
                    self.texts[path] = f.read()
            except (OSError, UnicodeDecodeError):
                self.texts[path] = None
        return self.texts[path]

    def sites_of(self, path: str) -> LocateResult:
        if path not in self.located:
            text = self.text(path)
            self.located[path] = (locate(text, path) if text is not None
                                  else LocateResult(sites=(), error=f"cannot read {path}"))
        return self.located[path]

    def line(self, path: str, number: int) -> str:
        lines = (self.text(path) or "").splitlines()
        return lines[number - 1] if 0 < number <= len(lines) else ""


def python_files(paths: list[str], exclude: tuple[str, ...]) -> list[str]:
    found = []
    for path in paths:
        if os.path.isfile(path):
            found.append(os.path.abspath(path))
            continue
        for directory, subdirs, files in os.walk(path):
            subdirs[:] = sorted(d for d in subdirs if d not in exclude and not d.startswith("."))
            found.extend(os.path.abspath(os.path.join(directory, f)) for f in sorted(files) if f.endswith(".py"))
    return found


def directive_diagnostic(error: DirectiveError) -> Diagnostic:
    return Diagnostic(error.path, error.span, "error", "VMEM010", error.message, origin="model")


def gather_examples(files: list[str], settings: Settings, sources: SourceFiles, outcome: CheckOutcome):
    examples: list[Example] = []
    for path in files:
        text = sources.text(path)
        if text is None:
            outcome.diagnostics.append(Diagnostic(path, Span(1, 0, 1, 0), "error", "VMEM010",
                                                  "cannot read this file as UTF-8 text"))
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


def request_for(example: Example, target: str, settings: Settings) -> CheckRequest:
    if example.module:
        return CheckRequest(example.text, target, module=example.module, root=settings.root,
                            compile=settings.compile)
    return CheckRequest(example.text, target, path=example.path, compile=settings.compile)


def run_example(example: Example, target: str, settings: Settings, cache: ResultCache,
                worker: WorkerClient, before_compile: Callable[[], None] | None = None
                ) -> tuple[ExampleResult, bool]:
    """The result of one example on one target, from the cache when it holds
    one; (result, whether it came from the cache)."""
    request = request_for(example, target, settings)
    result = cache.get(request)
    if result is not None:
        return result, True
    if before_compile:
        before_compile()
    result = worker.check(request, settings.timeout)
    if result.error_kind == "no_compiler" and request.compile:
        # No libtpu here (macOS): the layout model's verdict, marked as such, beats none.
        result = worker.check(dataclasses.replace(request, compile=False), settings.timeout)
    cache.put(request, result)
    return result, False


def cached_runner(cache: ResultCache, worker: WorkerClient, timeout: float):
    """worker.check through the cache: traces and verifying compiles of fixes repeat."""
    def run(request: CheckRequest) -> ExampleResult:
        result = cache.get(request)
        if result is None:
            result = worker.check(request, timeout)
            cache.put(request, result)
        return result
    return run


def check(paths: list[str], settings: Settings, *, use_cache: bool = True,
          progress: Progress | None = None, worker: WorkerClient | None = None) -> CheckOutcome:
    started = time.perf_counter()
    outcome = CheckOutcome()
    sources = SourceFiles()
    files = python_files(paths, settings.exclude)
    outcome.files = len(files)
    examples = gather_examples(files, settings, sources, outcome)
    outcome.examples = len(examples)
    cache = ResultCache(settings.cache_folder(), enabled=use_cache)
    own_worker = worker is None
    worker = worker or WorkerClient(settings.worker)
    total = len(examples) * len(settings.targets)
    done = 0
    try:
        for example in examples:
            for target in settings.targets:
                done += 1
                announce = progress and (lambda: progress(
                    f"[{done}/{total}] {target} {os.path.relpath(example.path)}:{example.line} {example.text}"))
                result, cached = run_example(example, target, settings, cache, worker, announce or None)
                outcome.cache_hits += cached
                outcome.results.append((example, target, result))
                outcome.compiles += not cached
                outcome.diagnostics.extend(diagnostics_for(example, result, sources.sites_of))
    finally:
        if own_worker:
            worker.stop()
    outcome.diagnostics = sorted(
        {d for d in outcome.diagnostics if not is_suppressed(d, sources.line(d.path, d.span.start_line))},
        key=Diagnostic.sort_key)
    outcome.seconds = time.perf_counter() - started
    return outcome


def exit_code(outcome: CheckOutcome) -> int:
    return 1 if any(d.severity == "error" for d in outcome.diagnostics) else 0
