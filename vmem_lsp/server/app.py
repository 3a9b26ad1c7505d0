"""The language server object: owns the session, the compile service, and
publishing. Handlers (one module per message, in handlers/) stay thin."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import traceback
import uuid
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import FeatureNotificationError, FeatureRequestError, JsonRpcException, JsonRpcInternalError
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from .. import __version__
from ..source.notebook import is_notebook
from . import trusting
from .compiler import CompileEvent, CompileJob, CompileService
from .convert import Positions, to_diagnostics, to_uri
from .options import SECTION, Options, options_from
from .protocol import VmemProtocol
from .session import Session
from .waiting import Waiters

logger = logging.getLogger(__name__)  # no handler: errors go to stderr, the server's log
STATUS = "vmemLsp/status"
# The parsing process runs at this niceness: its bursts (200 files opened at
# once) leave the CPU to the server's loop and the editor. Not the compile
# worker: under a CPU hog of the user's, a niced compile starved for minutes.
PARSER_NICENESS = 10
TRUST_POLL_SECONDS = 1.0  # how often a file waiting on trust looks at the trust list


def start_parser(server_pid: int) -> None:
    """In the parsing process: yield the CPU, and die with the server."""
    from ..lifetime import die_with_parent

    os.nice(PARSER_NICENESS)
    die_with_parent(server_pid)


class Locator:
    """libcst parsing in a process of its own: the server's interpreter stays
    free to answer hovers while a large file is parsed. A parse that kills
    that process is redone here and the process replaced; where no process
    can be had at all (no /dev/shm for its semaphores), after a few tries
    every parse is done here. The locator's own failures (`internal_error`)
    wait in `internal_errors` for the server's loop to report them."""

    TRIES = 3

    def __init__(self, start_pool=None):
        self.start_pool = start_pool or self._spawn
        self.pool = None
        self.failures = 0  # in a row; at TRIES, stop asking for a process
        self.internal_errors: deque[tuple[str, str]] = deque()  # (path, traceback); thread-safe

    @staticmethod
    def _spawn() -> ProcessPoolExecutor:
        import multiprocessing

        return ProcessPoolExecutor(
            1, mp_context=multiprocessing.get_context("spawn"), initializer=start_parser, initargs=(os.getpid(),)
        )

    def __call__(self, text: str, path: str):
        located = self._locate(text, path)
        if located.internal_error is not None:
            self.internal_errors.append((path, located.internal_error))
        return located

    def _locate(self, text: str, path: str):
        from ..source.locate import locate

        if self.failures < self.TRIES:
            try:
                if self.pool is None:
                    self.pool = self.start_pool()
                located = self.pool.submit(locate, text, path).result()
                self.failures = 0
                return located
            except Exception:  # a broken pool: parse here rather than not at all
                self.failures += 1
                self.stop(wait=False)
        return locate(text, path)  # never raises

    def stop(self, wait: bool = True) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=wait, cancel_futures=True)  # its process exits with it
            self.pool = None


class VmemServer(LanguageServer):
    def __init__(self, notebook_document_sync: types.NotebookDocumentSyncOptions | None = None):
        super().__init__(
            "vmem-lsp", __version__, protocol_cls=VmemProtocol, notebook_document_sync=notebook_document_sync
        )
        self.locator = Locator()
        self.waiters = Waiters()
        self.session = Session(Options(), self.locator, self.waiters.wake)
        self.compiler: CompileService | None = None
        self.analysis = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vmem-lsp-analysis")
        self.debounced: dict[str, asyncio.Task] = {}
        self.published: dict[str, dict[str, list]] = {}  # path -> {URI: the diagnostics last pushed to it}
        self.typed_in: dict[str, set[str]] = {}  # notebook path -> cells edited since its last publish
        self.progress_token: str | None = None
        self.status = {"state": "idle", "message": "", "done": 0, "total": 0, "targets": []}
        self.internal_errors = 0  # errors of ours, never of the user's files: in every status
        self.losses_said: set[str] = set()  # what the worker's jax lacks, shown once a session
        self.trust_asked: set[str] = set()  # folders the user was asked about, once each
        self.rankings: dict = {}  # (path, sweep line's call) -> handlers.rank_sweep.Ranking, its lens
        self.trust_watch: asyncio.Future | None = None  # looks at the trust list while a file waits on it

    # -- paths and capabilities ---------------------------------------------------------
    def path_of(self, uri: str) -> str:
        """The file a URI is about: a notebook cell's is its notebook's."""
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        return to_fs_path(notebook.uri if notebook is not None else uri) or uri

    def version_of(self, uri: str, path: str) -> int | None:
        """The version of the open document `uri` shows, a notebook cell's own for a cell."""
        doc = self.session.documents.get(path)
        if doc is None or doc.cells is None:
            return doc.version if doc else None
        cell = self.workspace.text_documents.get(unquote(uri))
        return cell.version if cell is not None else None

    def positions(self) -> Positions:
        """Our spans in the client's position encoding, for one message."""
        documents = self.session.documents
        return Positions(
            self.workspace.position_codec,
            lambda path: doc.text if (doc := documents.get(path)) else None,
            lambda path: doc.cells if (doc := documents.get(path)) else None,
        )

    def client_supports(self, *names: str) -> bool:
        node: object = self.client_capabilities
        for name in names:
            node = getattr(node, name, None)
            if node is None:
                return False
        return bool(node)

    # -- the static tier ---------------------------------------------------------------
    def schedule_analysis(self, path: str, delay: float) -> None:
        """Estimate after `delay` of quiet; a newer edit restarts the wait."""
        previous = self.debounced.pop(path, None)
        if previous is not None:
            previous.cancel()
        self.debounced[path] = asyncio.get_running_loop().create_task(self._analyse_later(path, delay))

    async def _analyse_later(self, path: str, delay: float) -> None:
        await asyncio.sleep(delay)
        await self.analyse_now(path)

    async def analyse_now(self, path: str) -> None:
        """The static tier: analysed off the loop from a snapshot, applied on it."""
        from ..engine import analyse

        arguments = self.session.analysis_input(path)
        if arguments is None:
            return
        loop = asyncio.get_running_loop()
        try:
            applied = self.session.apply_analysis(await loop.run_in_executor(self.analysis, analyse, *arguments))
        except Exception:  # a user's file never takes the server down
            self.internal_error(f"analysing {path}", traceback.format_exc())
            return
        finally:
            while self.locator.internal_errors:
                located, details = self.locator.internal_errors.popleft()
                self.internal_error(f"locating the kernels of {located}", details)
        if applied:  # else the text moved on: its own analysis follows, and publishes
            self.publish({path})

    # -- the compiler tier ------------------------------------------------------------------
    def ensure_compiler(self) -> CompileService:
        if self.compiler is None:
            self.compiler = CompileService(
                asyncio.get_running_loop(), self.on_compile_result, self.on_compile_event, self.on_fixes
            )
        return self.compiler

    def compile(self, path: str) -> None:
        doc = self.session.documents.get(path)
        if doc is None or doc.saved_version is None:
            return
        examples = doc.examples
        if not examples:
            from ..source.directives import find_examples

            examples, _ = find_examples(doc.text, path)
        settings = self.session.settings(path)
        if not examples and not settings.examples:
            return
        if not self.trusted(path, settings):
            self.hold_untrusted(path, settings, examples)
            return
        if doc.not_run:
            doc.not_run = []
            self.publish({path})
        # The worker compiles the file on disk: its verdict belongs to the version
        # last saved, and is dropped as stale if the buffer has moved on since.
        self.ensure_compiler().submit(
            CompileJob(path, doc.saved_version, settings, examples, self.session.options.cache)
        )

    # -- trust: nobody's code runs uninvited ----------------------------------------------
    def trusted(self, path: str, settings) -> bool:
        return trusting.trusted(path, settings, self.session.options.trusted_folders)

    def hold_untrusted(self, path: str, settings, examples) -> None:
        """Say on each example why it was not compiled, and ask once per folder."""
        folder = trusting.folder_to_trust(path, settings, [self.path_of(uri) for uri in self.workspace.folders])
        self.session.documents[path].not_run = trusting.not_run(examples, folder)
        self.publish({path})
        if self.trust_watch is None or self.trust_watch.done():
            self.trust_watch = asyncio.ensure_future(self.watch_trust())
        if folder in self.trust_asked:
            return
        self.trust_asked.add(folder)
        would_run = trusting.what_would_run(
            path, settings, examples, worker_from_project=self.session.options.worker is None
        )
        message = trusting.notice(folder, would_run)
        self.log(types.MessageType.Warning, message)
        if self.client_supports("window", "show_message"):
            asyncio.ensure_future(self.ask_trust(folder, message))
        else:
            self.window_show_message(types.ShowMessageParams(types.MessageType.Warning, message))

    async def ask_trust(self, folder: str, message: str) -> None:
        answer = await self.window_show_message_request_async(
            types.ShowMessageRequestParams(
                types.MessageType.Warning,
                message,
                [types.MessageActionItem(trusting.TRUST), types.MessageActionItem(trusting.NOT_NOW)],
            )
        )
        if answer is None or answer.title != trusting.TRUST:
            return
        from .. import trust

        entry = trust.add(folder)
        self.log(types.MessageType.Info, f"vmem-lsp: trusted {entry}")
        for path in list(self.session.documents):
            if trust.trusted_by(path, [entry]):
                self.compile(path)

    async def watch_trust(self) -> None:
        """While a file waits for trust, look at the user's trust list each
        second: `vmem-lsp trust FOLDER` in a terminal (or another window's
        answer) runs the waiting examples then, not at the file's next save."""
        from .. import trust

        seen = trust.stamp()
        while any(doc.not_run for doc in self.session.documents.values()):
            await asyncio.sleep(TRUST_POLL_SECONDS)
            now = trust.stamp()
            if now == seen:
                continue
            seen = now
            for path, doc in list(self.session.documents.items()):
                if doc.not_run:
                    self.compile(path)

    def on_compile_result(self, job: CompileJob, results) -> None:
        self.say_losses(loss for _, result in results for loss in result.losses)
        changed = self.session.accept_compile(job.uri, job.version, results)
        if changed is None:
            self.log(types.MessageType.Log, f"dropped a compile of {job.uri}: the document changed since")
            return
        self.publish(changed)
        if self.session.options.inlay_hints and self.client_supports("workspace", "inlay_hint", "refresh_support"):
            self.workspace_inlay_hint_refresh(None)

    def say_losses(self, losses: Iterable[str]) -> None:
        """What the worker's jax lacks (an old jax: no provenance, so errors land on the
        pallas_call line) changes where every diagnostic lands: a warning the user sees, once."""
        for loss in dict.fromkeys(losses):
            if loss not in self.losses_said:
                self.losses_said.add(loss)
                self.log(types.MessageType.Warning, loss)
                self.window_show_message(types.ShowMessageParams(types.MessageType.Warning, f"vmem-lsp: {loss}"))

    def on_fixes(self, job: CompileJob, planned, done: bool) -> None:
        if self.session.accept_fixes(job.uri, job.version, planned, done) and done and planned is not None:
            count = sum(len(fixes) for _, fixes in planned)
            self.log(types.MessageType.Log, f"{count} fix(es) ready for {job.uri}")

    def on_compile_event(self, event: CompileEvent) -> None:
        if event.internal is not None:
            self.internal_error("in a compile job", event.internal)
        kind = types.MessageType.Warning if event.state in ("crashed", "no_compiler") else types.MessageType.Log
        self.log(kind, event.message)
        if event.state == "crashed":
            self.window_show_message(types.ShowMessageParams(types.MessageType.Warning, f"vmem-lsp: {event.message}"))
        self.send_status(
            {
                "state": event.state,
                "message": event.message,
                "done": event.done,
                "total": event.total,
                "targets": list(event.targets or self.session.options.targets or ()),
            }
        )
        self.show_progress(event)

    def send_status(self, status: dict | None = None) -> None:
        """vmemLsp/status: the worker's last state, and how many internal errors so far."""
        self.status = status or self.status
        self.protocol.notify(STATUS, {**self.status, "internalErrors": self.internal_errors})

    # -- errors of ours ----------------------------------------------------------------------
    def internal_error(self, what: str, details: str, logged: bool = False) -> None:
        """A bug of vmem-lsp's, not a problem of the user's file: to the server
        log (stderr), the client's log at Error level, and counted in the status."""
        self.internal_errors += 1
        if not logged:
            logger.error("internal error %s:\n%s", what, details)
        self.log(types.MessageType.Error, f"vmem-lsp internal error {what}:\n{details}")
        self.send_status()

    def report_server_error(self, error: Exception, source) -> None:
        """pygls' boundary around every handler. A handler that raised is an
        internal error (pygls has logged its traceback to stderr already); a
        JSON-RPC error raised on purpose, or a client's unknown method, is not."""
        if source in (FeatureRequestError, FeatureNotificationError) and (details := handler_failure(error)):
            self.internal_error(f"in a {source.__name__}", details, logged=True)
        super().report_server_error(error, source)

    def show_progress(self, event: CompileEvent) -> None:
        """The compile as work-done progress. Not named `progress`: that is pygls' $/progress notification."""
        if not self.client_supports("window", "work_done_progress"):
            return
        if event.state in ("starting", "compiling") and self.progress_token is None:
            self.progress_token = token = str(uuid.uuid4())
            self.work_done_progress.create(token)
            self.work_done_progress.begin(
                token,
                types.WorkDoneProgressBegin(
                    title="vmem-lsp", message=event.message, cancellable=False, percentage=0 if event.total else None
                ),
            )
        elif event.state == "compiling" and self.progress_token:
            percentage = int(100 * event.done / event.total) if event.total else None
            self.work_done_progress.report(
                self.progress_token, types.WorkDoneProgressReport(message=event.message, percentage=percentage)
            )
        elif event.state not in ("starting", "compiling") and self.progress_token:
            self.work_done_progress.end(self.progress_token, types.WorkDoneProgressEnd(message=event.message))
            self.progress_token = None

    # -- publishing -----------------------------------------------------------------------
    def uses_pull(self, path: str) -> bool:
        """Open files are pulled by clients that can, and can be asked to pull again when a
        compile ends (workspace/diagnostic/refresh); everything else is pushed. Notebooks too:
        VS Code's client pulls only what is open in a text tab, never a notebook's cells. A
        client that pulls but cannot be asked again (Neovim 0.10 and 0.11) would keep the
        answer it got on open, before the compile: it is pushed to."""
        doc = self.session.documents.get(path)
        return (
            doc is not None
            and doc.cells is None
            and self.client_supports("text_document", "diagnostic")
            and self.client_supports("workspace", "diagnostics", "refresh_support")
        )

    def publish(self, paths) -> None:
        """Push each path's diagnostics to the URIs that show them (a notebook's
        cells), and clear the URIs that showed some and have none now. An open
        file is told even when it has none. A notebook's cell is told only when
        what it shows changed, or when it was typed in (its new version, even
        with nothing to show): typing in one cell of a 200-cell notebook sends
        one message, not one per cell with diagnostics."""
        refresh = False
        positions = self.positions()
        for path in paths:
            if self.uses_pull(path):
                refresh = True
                continue
            by_uri = to_diagnostics(self.session.diagnostics(path), positions)
            doc = self.session.documents.get(path)
            shown = self.published.pop(path, {})
            typed_in = self.typed_in.pop(path, set())
            told = {to_uri(path)} if doc is not None and doc.cells is None else typed_in
            only_changed = is_notebook(path)
            for uri in sorted({*by_uri, *shown, *told}):
                diagnostics = by_uri.get(uri, [])
                if only_changed and uri not in told and shown.get(uri, []) == diagnostics:
                    continue
                self.text_document_publish_diagnostics(
                    types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=self.version_of(uri, path))
                )
            if by_uri:
                self.published[path] = by_uri
        if refresh:
            self.workspace_diagnostic_refresh(None)

    # -- options: one path from the editor's JSON to the session ------------------------------
    def take_options(self, raw, base: Options, initialization: bool = False) -> Options:
        """Options from an editor's JSON over `base`, into the session; what
        was wrong with them goes to the client's log. Every message that
        carries options (initialize, initialized, didChangeConfiguration) comes here."""
        options, problems = options_from(raw, base, initialization=initialization, folder=self.workspace_folder())
        for problem in problems:
            self.log(types.MessageType.Warning, f"vmem-lsp: {problem}")
        self.session.options = options
        return options

    def workspace_folder(self) -> str:
        """The folder an editor's relative paths are taken from: the workspace's root,
        else its first folder, else where the server runs."""
        root = self.workspace.root_path
        if root:
            return root
        folders = [self.path_of(uri) for uri in self.workspace.folders]
        return folders[0] if folders else os.getcwd()

    async def client_settings(self):
        """The client's "vmemLsp" section by workspace/configuration, or None
        where the client cannot say or answers badly."""
        if not self.client_supports("workspace", "configuration"):
            return None
        try:
            [raw] = await self.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)])
            )
        except Exception as error:  # a client that answers badly still gets a server
            self.log(types.MessageType.Warning, f"vmem-lsp: reading settings failed: {error!r}")
            return None
        return raw

    def log(self, kind: types.MessageType, message: str) -> None:
        self.window_log_message(types.LogMessageParams(kind, message))

    def stop_background(self) -> None:
        for task in self.debounced.values():
            task.cancel()
        if self.compiler is not None:
            self.compiler.stop()
            self.compiler = None
        self.analysis.shutdown(wait=False, cancel_futures=True)
        self.locator.stop()


def handler_failure(error: Exception) -> str | None:
    """The traceback of a handler's own failure as pygls reports it; None for a
    JSON-RPC error raised on purpose or a client's unknown method."""
    if isinstance(error, JsonRpcInternalError):  # pygls' wrapping of a handler's exception
        frames = error.data.get("traceback", []) if isinstance(error.data, dict) else []
        return "".join(frames) + error.message
    if isinstance(error, JsonRpcException):
        return None
    return "".join(traceback.format_exception(error))


def build_server() -> VmemServer:
    from .handlers import notebook_sync, register

    server = VmemServer(notebook_sync.SYNC)
    register(server)
    return server


def serve() -> int:
    # Analysis runs in a thread; hand the interpreter back to the message loop
    # often, so a hover never waits long behind a parse.
    sys.setswitchinterval(0.001)
    from ..lifetime import exit_with_children

    exit_with_children()  # TERM, INT, HUP: the worker and the parser go first
    from .collector import freeze_survivors
    from .stdio import start_io

    server = build_server()
    freeze_survivors()  # the libraries just imported: out of every later collection
    try:
        start_io(server)
    finally:
        server.stop_background()
    return 0
