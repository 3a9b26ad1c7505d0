"""Compiling on a Ray cluster (`check --backend ray`): each (example, chip) is
one Ray task, asking one CPU and the memory one worker peaks at, retried by
Ray when its worker or node is lost. A task runs the same worker subprocess
the local pool runs and returns the same `ExampleResult`, so the cache, the
diagnostics and every output format are the local pool's.

How the user's source reaches a node: content digests, as it reaches an SSH
worker (shipping.py), not Ray's runtime_env. The driver puts the project's
files in the object store once per run beside their sha256 manifest; a node
keeps blobs by digest in its worker's cache folder and fetches the texts only
when it lacks one, and the worker translates paths in results back to the
driver's. Chosen because it is the path the SSH worker already tests (path
translation included), unchanged files are not sent again on the next run
(the blobs outlive the job, where a runtime_env is zipped and uploaded per
job), nothing is capped at runtime_env's 100 MiB, and one warm worker on a
node serves every project and job.

Every node needs vmem-lsp installed (the same version: the worker's hello
checks the protocol), as an SSH machine does.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import threading
import time

from .. import lifetime
from ..results import ExampleResult, PhaseLimits
from .client import BackendError, CheckRequest, WorkerClient, project_root
from .memory import DEFAULT_PEAK
from .pool import retried
from .shipping import Manifests

INSTALL_HINT = (
    "the Ray backend needs Ray, an optional extra: pip install 'vmem-lsp[ray]' "
    "(or pip install ray); without it, leave out --backend ray"
)
TASK_RETRIES = 3  # a lost worker or node; never an example's own failure


def import_ray():
    try:
        import ray
    except ImportError:
        raise BackendError(INSTALL_HINT) from None
    return ray


CONNECT_SECONDS = 5.0


def unreachable(address: str | None, seconds: float = CONNECT_SECONDS) -> str | None:
    """Why nothing answers at a cluster's host:port, or None (it answers, or
    there is no address to try: none, "auto", "local"). Asked before
    ray.init, which tries an address that is down for minutes before it
    gives up."""
    if not address or address in ("auto", "local"):
        return None
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=seconds):
            return None
    except OSError as error:
        return f"nothing answers there ({error.strerror or error})"


@dataclasses.dataclass
class Project:
    """What a task needs to lay out the user's files on its node: the
    driver's project root, its manifest {relative path: sha256}, and the texts
    by digest, boxed in a list so Ray does not fetch them unless asked."""

    root: str
    manifest: dict[str, str]
    texts: list  # [ObjectRef of {sha256: text}]

    def read(self, root: str, relative: str) -> str:
        """The text of one file (the `Manifests.read` a WorkerClient ships with)."""
        import ray

        return ray.get(self.texts[0])[self.manifest[relative]]


@dataclasses.dataclass(frozen=True)
class TaskResult:
    """A task's answer: the worker's result, the seconds it spent in the
    worker (for the overhead the bench reports) and the Ray node it ran on."""

    result: ExampleResult
    worker_seconds: float
    node: str


# ---- on a node -----------------------------------------------------------------


class NodeWorker(WorkerClient):
    """The local worker subprocess of one Ray worker process, sent the
    project's files by digest as an SSH worker is."""

    def __init__(self):
        super().__init__(ship_source=True)
        self.project: Project | None = None

    def _ship(self, request: CheckRequest) -> tuple[str, dict] | None:
        if self.project is None:
            return None
        self.texts = self.project  # the texts come from the object store, not this node's disk
        return self.project.root, self.project.manifest


_node_worker: NodeWorker | None = None
_node_lock = threading.Lock()


def run_on_node(params: dict, limits: PhaseLimits, project: Project) -> TaskResult:
    """The body of a Ray task: one example on one chip, on this node's warm
    worker (started by the first task this Ray worker process runs). A crash
    is retried once on a fresh worker, as the local pool does."""
    global _node_worker
    with _node_lock:
        if _node_worker is None:
            _node_worker = NodeWorker()
        worker = _node_worker
        worker.project = project
        started = time.perf_counter()
        request = CheckRequest(**params)
        result = worker.check(request, limits)
        if retried(result):
            result = worker.check(request, limits)
        import ray

        return TaskResult(result, time.perf_counter() - started, ray.get_runtime_context().get_node_id())


# ---- on the driver -------------------------------------------------------------


class RayPool:
    """The driver's side: `check` as WorkerPool has it, each call one Ray
    task; `size` is the cluster's CPUs, so the engine keeps that many out at
    once. Ctrl-C (or any signal lifetime handles) cancels the tasks out."""

    def __init__(self, address: str | None = None, memory: int | None = None):
        self.ray = import_ray()
        self.address = address or os.environ.get("RAY_ADDRESS")  # None: ray.init starts one here
        if (why := unreachable(self.address)) is not None:
            raise BackendError(f"cannot reach the Ray cluster at {self.address}: {why}")
        # Ray prints its tasks' failures ("retries remaining") to sys.stdout, which
        # carries our report or the LSP stream: Python's stdout is stderr while Ray runs.
        self.stdout, sys.stdout = sys.stdout, sys.stderr
        self.started_here = not self.ray.is_initialized()
        if self.started_here:
            try:
                self.ray.init(address=address, log_to_driver=False, include_dashboard=False, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as error:
                sys.stdout = self.stdout
                raise BackendError(
                    f"cannot reach the Ray cluster{f' at {address}' if address else ''}: {error}"
                ) from None
        self.size = max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        self.memory = memory or DEFAULT_PEAK  # before any worker was measured here
        self.task = self.ray.remote(run_on_node).options(
            num_cpus=1, memory=self.memory, max_retries=TASK_RETRIES, retry_exceptions=False
        )
        self.manifests = Manifests()
        self.projects: dict[tuple, Project] = {}
        self.pending: set = set()
        self.lock = threading.Lock()
        self.restarts = 0
        self.overheads: list[float] = []  # seconds per task beyond the worker's own
        self.nodes: dict[str, int] = {}
        self.lanes: dict[str, int] = {}
        self.stopped = False
        lifetime.on_signal(self.cancel)

    def project_of(self, request: CheckRequest) -> Project:
        """The request's project in the object store: put once per content, as
        a remote WorkerClient ships it (root: the pyproject root or the file's
        package root)."""
        root = project_root(request)
        if root is None:
            raise ValueError("a request for the Ray backend names a file or a project root")
        with self.lock:
            manifest = self.manifests.manifest(root)
            key = (root, tuple(sorted(manifest.items())))
            if key not in self.projects:
                texts = {sha: self.manifests.read(root, relative) for relative, sha in manifest.items()}
                self.projects[key] = Project(root, manifest, [self.ray.put(texts)])
            return self.projects[key]

    def lane(self, target: str) -> int:
        """The server runs each lane's pairs in turn: on a cluster every chip has its own."""
        with self.lock:
            return self.lanes.setdefault(target, len(self.lanes))

    def check(self, request: CheckRequest, limits: PhaseLimits | float) -> ExampleResult:
        limits = limits if isinstance(limits, PhaseLimits) else PhaseLimits(limits, limits)
        params = {k: v for k, v in vars(request).items() if v is not None}
        project = self.project_of(request)
        with self.lock:
            if self.stopped:
                return ExampleResult(request.target, None, error="cancelled", error_kind="cancelled")
            ref = self.task.remote(params, limits, project)
            self.pending.add(ref)
        started = time.perf_counter()
        try:
            answer: TaskResult = self.ray.get(ref)
        except self.ray.exceptions.TaskCancelledError:
            return ExampleResult(request.target, None, error="cancelled", error_kind="cancelled")
        except self.ray.exceptions.RayError as error:
            self.restarts += 1
            return ExampleResult(
                request.target,
                None,
                error=f"the Ray task failed after {TASK_RETRIES} retries: {str(error).splitlines()[0]}",
                error_kind="crashed",
            )
        finally:
            with self.lock:
                self.pending.discard(ref)
        with self.lock:
            self.overheads.append(time.perf_counter() - started - answer.worker_seconds)
            self.nodes[answer.node] = self.nodes.get(answer.node, 0) + 1
        return answer.result

    def cancel(self) -> None:
        """Cancel every task out; a running one's worker is killed (force), and
        the vmem-lsp worker under it dies with it (lifetime.die_with_parent)."""
        with self.lock:
            self.stopped = True
            pending = list(self.pending)
        for ref in pending:
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # already finished, or the cluster is gone: nothing left to cancel
                pass

    def stop(self) -> None:
        self.cancel()
        lifetime.forget_on_signal(self.cancel)
        if self.started_here and self.ray.is_initialized():
            self.ray.shutdown()
        sys.stdout = self.stdout
