"""The server's state: open documents, what compiles taught, and which
diagnostics each file shows. Knows nothing of LSP messages."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import views
from ..budget import KnownKernel
from ..diagnostics import Diagnostic, is_suppressed
from ..engine import Analysis, SourceFiles, diagnose, headroom_warnings, overlaps, unreached_diagnostic
from ..fixes.plan import overflowing
from ..results import ExampleResult
from ..source.directives import Example
from ..source.locate import LocateResult, locate
from ..source.model import KernelSite
from ..source.notebook import NotebookError, OpenNotebook, is_notebook, read_notebook
from ..source.text import split_lines
from .options import Options

# What fits (VMEM007) is the hover and inlay hints of the pallas_call in the editor, not a squiggle.
SHOWN_AS_HOVER = ("VMEM007",)


@dataclass
class Document:
    path: str
    version: int
    text: str
    located: LocateResult = field(default_factory=lambda: LocateResult(()))
    examples: list[Example] = field(default_factory=list)
    estimates: list[Diagnostic] = field(default_factory=list)  # the static tier, for `version`
    verdict: list[Diagnostic] = field(default_factory=list)  # the compiler tier, for `compiled_version`
    compiled_version: int | None = None
    budgets: dict = field(default_factory=dict)  # SiteKey -> {target: Budget}, as shown
    fixes: dict = field(default_factory=dict)  # ExampleKey -> [Fix], best first
    fixes_version: int | None = None
    searching: bool = False  # a fix search for fixes_version runs: `fixes` holds the candidates it compiles
    saved_version: int | None = None  # the last version equal to the file on disk
    not_run: list[Diagnostic] = field(default_factory=list)  # examples not compiled: the folder is untrusted
    cells: OpenNotebook | None = None  # a notebook's code cells: `text` is the module they make


class Session:
    """Changed only on the server's event loop: work done off the loop (an
    analysis, a compile) returns a result that the loop applies here, after
    checking it is for the document's current version."""

    def __init__(self, options: Options, locator=locate, changed=lambda: None):
        self.options = options
        self.locator = locator  # locate(text, path); the server runs it in another process
        self.changed = changed  # called after a change a waiting request may look for (fixes, edits)
        self.documents: dict[str, Document] = {}
        self.known: dict = {}  # SiteKey -> KnownKernel, from the last compile of each site
        self.contributions: dict = {}  # origin path -> {path: [Diagnostic]}: compiler diagnostics by file

    # -- documents ----------------------------------------------------------------
    def open(self, path: str, version: int, text: str, cells: OpenNotebook | None = None) -> Document:
        # An editor may reopen an unsaved buffer (VS Code's hot exit): then no
        # version equals the file on disk until the next save.
        on_disk = version if on_disk_text(path) == text else None
        self.documents[path] = Document(path, version, text, saved_version=on_disk, cells=cells)
        return self.documents[path]

    def saved(self, path: str) -> bool:
        """The document's text is now the file's: what a compile will read. A
        notebook's only if the module on disk is the editor's (a code cell the
        editor did not send, in another language, would move every line)."""
        doc = self.documents.get(path)
        if doc is None or (doc.cells is not None and on_disk_text(path) != doc.text):
            return False
        doc.saved_version = doc.version
        return True

    def text_of(self, path: str) -> str | None:
        """The editor's text of `path`, else the file's (a request may come before
        didOpen's handler has run); None when neither exists."""
        doc = self.documents.get(path)
        return doc.text if doc is not None else on_disk_text(path)

    def change(self, path: str, version: int, text: str, cells: OpenNotebook | None = None) -> Document | None:
        doc = self.documents.get(path)
        if doc is not None:
            doc.version, doc.text, doc.cells = version, text, cells
            self.changed()
        return doc

    def close(self, path: str) -> None:
        self.documents.pop(path, None)
        self.changed()

    def overlay(self, path: str) -> str | None:
        doc = self.documents.get(path)
        return doc.text if doc else None

    def settings(self, path: str):
        return self.options.settings(path)

    # -- the static tier ------------------------------------------------------------------
    def analysis_input(self, path: str) -> tuple | None:
        """engine.analyse's arguments for the document as it is now: a snapshot,
        so that the analysis may run off the loop while edits come in."""
        doc = self.documents.get(path)
        if doc is None:
            return None
        return (
            path,
            doc.version,
            doc.text,
            self.settings(path).targets,
            dict(self.known),
            self.options.headroom_warning,
            self.locator,
        )

    def apply_analysis(self, analysis: Analysis) -> bool:
        """Take an analysis if the document is still at its version (an edit
        may have come in meanwhile: the newer analysis will follow)."""
        doc = self.documents.get(analysis.path)
        if doc is None or doc.version != analysis.version:
            return False
        doc.located, doc.examples, doc.estimates = analysis.located, analysis.examples, analysis.estimates
        if doc.compiled_version != analysis.version:
            doc.budgets = analysis.budgets
        return True

    # -- the compiler tier ------------------------------------------------------------------
    def accept_compile(self, path: str, version: int, results: list[tuple[Example, ExampleResult]]) -> set[str] | None:
        """Take a compile of `path` at `version`. Returns the paths whose
        diagnostics changed, or None when the document moved on (stale)."""
        sources = SourceFiles(self.overlay)
        learned = views.learn([r for _, r in results], sources.sites_of)
        self.known.update(learned.known)
        doc = self.documents.get(path)
        if doc is None or doc.version != version:
            return None
        by_path: dict[str, list[Diagnostic]] = {}
        for d in diagnose([], results, sources, headroom_warnings(learned, self.options.headroom_warning)):
            if d.code in SHOWN_AS_HOVER:
                continue
            by_path.setdefault(d.path, []).append(d)
        old = self.contributions.get(path, {})
        self.contributions[path] = {p: ds for p, ds in by_path.items() if p != path}
        doc.verdict = by_path.get(path, [])
        doc.compiled_version = version
        doc.budgets = {k: v for k, v in learned.budgets.items() if k[0] == path}
        # The compile service searches fixes for what overflows, right after this
        # verdict: known before it is published, so no request finds it unknown.
        doc.fixes, doc.fixes_version = {}, version
        doc.searching = bool(overflowing([(e, r.target, r) for e, r in results]))
        self.changed()
        return {path, *old, *by_path}

    def accept_fixes(self, path: str, version: int, planned: list | None, done: bool) -> bool:
        """Take the fix search's fixes for some examples while it runs (`done`
        False: unverified ones are still being compiled), or for all when done.
        None when it stopped early: what the compiler accepted stays."""
        doc = self.documents.get(path)
        if doc is None or doc.fixes_version != version or not doc.searching:
            return False
        if planned is None:
            doc.fixes = {key: [f for f in fixes if f.verified] for key, fixes in doc.fixes.items()}
        else:
            found = {example.key: fixes for example, fixes in planned}
            doc.fixes = found if done else {**doc.fixes, **found}
        doc.searching = not done
        self.changed()
        return True

    def fixes_for(self, path: str) -> dict:
        """The fixes of the examples in `path`, while they still apply to its text."""
        doc = self.documents.get(path)
        return doc.fixes if doc is not None and doc.fixes_version == doc.version else {}

    def searching(self, path: str) -> bool:
        """A fix search runs for the text of `path` as it is now."""
        doc = self.documents.get(path)
        return doc is not None and doc.searching and doc.fixes_version == doc.version

    # -- what a file shows ------------------------------------------------------------------
    def diagnostics(self, path: str) -> list[Diagnostic]:
        doc = self.documents.get(path)
        own: list[Diagnostic] = []
        if doc is not None:
            own = doc.verdict if doc.compiled_version == doc.version else doc.estimates
        others = [d for origin, by_path in self.contributions.items() if origin != path for d in by_path.get(path, [])]
        lines = split_lines(self.text_of(path) or "")
        line = lambda n: lines[n - 1] if 0 < n <= len(lines) else ""
        not_run = doc.not_run if doc is not None else []
        unreached = self.unreached(doc) if doc is not None else []
        return [d for d in [*own, *not_run, *unreached, *others] if not is_suppressed(d, line(d.span.start_line))]

    def unreached(self, doc: Document) -> list[Diagnostic]:
        """VMEM020 on each pallas_call of the document that no compile has
        reached (of this file's examples or another's): once the file has been
        compiled, or at once when it has no example to compile, so that a
        kernel with an example on its way is not flagged in the meantime."""
        settings = self.settings(doc.path)
        if doc.compiled_version is None and (doc.examples or settings.examples):
            return []
        if any(d.code in ("VMEM010", "VMEM012") for d in doc.verdict if d.path == doc.path):
            return []  # an example that could not run: what it would reach is not known
        sites = doc.located.sites
        reached = [site.span for site, key in zip(sites, views.site_keys(sites)) if key in self.known]
        return [
            unreached_diagnostic(site, doc.text, settings.require_examples)
            for site in sites
            if not any(overlaps(site.span, span) for span in reached)
        ]

    def site_budgets(self, path: str, line: int) -> tuple[KernelSite | None, dict, KnownKernel | None]:
        """The site at `line` and its budgets per target, as currently shown."""
        doc = self.documents.get(path)
        if doc is None:
            return None, {}, None
        site = views.site_at(doc.located.sites, line) or self.site_holding(path, line)
        if site is None:
            return None, {}, None
        key = views.key_of(site, doc.located.sites)
        return site, doc.budgets.get(key, {}), self.known.get(key)

    def site_holding(self, path: str, line: int) -> KernelSite | None:
        """The site of this file whose kernel body makes a value on `line` (1-based) that the last
        compile's body account holds at its peak: a hover on a body line shows its kernel."""
        doc = self.documents.get(path)
        if doc is None:
            return None
        for site, key in zip(doc.located.sites, views.site_keys(doc.located.sites)):
            known = self.known.get(key)
            if known is not None and views.held_at(known.call, path, line):
                return site
        return None

    def all_budgets(self, path: str):
        doc = self.documents.get(path)
        if doc is None:
            return []
        keys = views.site_keys(doc.located.sites)
        return [(site, doc.budgets.get(key, {}), self.known.get(key)) for site, key in zip(doc.located.sites, keys)]


def on_disk_text(path: str) -> str | None:
    """The text vmem-lsp reads for `path` on disk, as a compile will: a
    notebook's module, or the file's text with its line ends."""
    if not is_notebook(path):
        return _read(path, newline="")
    try:
        return read_notebook(_read(path, newline=""), path).module
    except NotebookError:
        return None


def _read(path: str, newline: str | None = None) -> str:
    try:
        with open(path, encoding="utf-8", newline=newline) as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return ""
