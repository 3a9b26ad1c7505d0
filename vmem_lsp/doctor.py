"""`vmem-lsp doctor [PATH]`: what this machine can do, each problem with its fix.

The worker's Python and its compiler's versions against the tested range, the worker command (does
it start and say hello), one tiny compile per chip in that one worker (libtpu
loads once), the cache folder, the memory sizing, and the settings in force
with where each came from. Exit 0 when all is well, 1 when something is wrong
(named at the end), 2 for bad usage. Never imports jax: the worker does.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import sys
import tempfile
import threading
import time
from typing import TYPE_CHECKING

from . import __version__, versions
from .checkup import EXAMPLE, KERNEL, NO_COMPILE, Check, compile_error, install_command
from .compile.interpreter import command_text
from .families import families

if TYPE_CHECKING:
    from .compile.backend import Runner
    from .results import ExampleResult, PhaseLimits

EXIT_OK, EXIT_FOUND, EXIT_ERROR = 0, 1, 2
PINNED = versions.COMPILER_PACKAGES
START_SECONDS = 90.0  # a cold machine's first import of jax and libtpu
URL_SECONDS = 10.0  # an object store's answer to one listing

# ---- versions ----------------------------------------------------------------------


def version_checks(found: dict[str, str | None], where: str, python: str | None, judged: bool) -> list[Check]:
    """The compiler's versions `found` where the worker runs: a missing jax or libtpu is a
    problem (when `judged`: the compiles run there); a version outside the tested pairs,
    or outside the supported range, is information: the verdicts are that compiler's."""
    jax, libtpu = found.get("jax"), found.get("libtpu")
    said = ", ".join(f"{name} {found.get(name) or 'not installed'}" for name in PINNED)
    checks = []
    missing = [name for name in ("jax", "libtpu") if not found.get(name)]
    if missing:
        message = f"{' and '.join(missing)} not installed {where} ({said})"
        if judged:
            fix = f"{install_command(python)} (libtpu is Linux-only), {NO_COMPILE}"
            checks.append(Check("versions", "compiler", "problem", message, fix))
        else:
            checks.append(Check("versions", "compiler", "info", message + " (the worker command compiles; see below)"))
        return checks
    if versions.in_tested_range(jax, libtpu):
        checks.append(
            Check("versions", "compiler", "ok", f"{said} {where}: a tested pair (supported: {versions.range_text()})")
        )
    elif versions.supported(jax):
        checks.append(
            Check(
                "versions",
                "compiler",
                "info",
                f"{said} {where}: in the supported range ({versions.range_text()}) but not a tested pair "
                f"({versions.tested_text()}): the verdicts are this compiler's",
            )
        )
    else:
        checks.append(
            Check(
                "versions",
                "compiler",
                "info",
                f"{said} {where}: outside the supported range ({versions.range_text()}): "
                "some kernels may not be traced, or their errors land on the pallas_call line",
            )
        )
    return checks


def interpreter_checks(settings) -> tuple[list[Check], dict[str, str | None] | None]:
    """Which Python a local worker runs in (where it was found) and its compiler's
    versions (read from its metadata, not imported)."""
    from .compile.backend import local_compiler

    interpreter, found, error = local_compiler(settings)
    line = Check("versions", "python", "info", f"the worker's Python: {interpreter.path} (from {interpreter.source})")
    if error:
        return [
            dataclasses.replace(
                line,
                status="problem",
                message=f"the worker's Python {interpreter.path} (from {interpreter.source}) cannot be run: {error}",
                fix="point the python setting (or --python) at an interpreter that has jax[tpu]",
            )
        ], None
    return [line, *version_checks(found or {}, "there", interpreter.path, judged=not settings.worker)], found


# ---- the worker and the chips ---------------------------------------------------------


def worker_fix(command: list[str], configured: str | None, source: str | None) -> str:
    shown = shlex.join(command)
    source = "the --worker option" if source and source.startswith("--") else f"`worker` in {source or 'the settings'}"
    if os.path.basename(command[0]) == "ssh":
        return (
            f"run `{shown}` in a terminal: vmem-lsp runs ssh with BatchMode=yes, so it needs a key "
            f"that logs in without a password prompt and the host in known_hosts, and vmem-lsp "
            f"installed on the remote machine (its `vmem-lsp worker` on the PATH); or drop "
            f"{source} to compile here"
        )
    if configured:
        return (
            f"run `{shown}` in a terminal: it must print a hello line and wait for requests; "
            f"fix {source}, or drop it to compile here"
        )
    return "reinstall vmem-lsp in this environment (pip install --force-reinstall vmem-lsp), then run doctor again"


def worker_checks(settings) -> tuple[list[Check], Runner | None]:
    """The worker line, and the started client (None when it did not start)."""
    from .compile.backend import WorkerError, doctor_worker

    client = doctor_worker(settings, START_SECONDS)
    command = command_text(client.command)
    where = f"worker from {settings.worker_source or 'the settings'}" if settings.worker else "local worker"
    started = time.perf_counter()
    try:
        hello = client.start()
    except (WorkerError, OSError) as error:
        client.stop()
        return [
            Check(
                "worker",
                "worker",
                "problem",
                f"the {where} did not start: `{command}`: {error}",
                worker_fix(
                    client.command,
                    settings.worker,
                    settings.config_path if settings.worker_source == "pyproject.toml" else settings.worker_source,
                ),
                round(time.perf_counter() - started, 2),
            )
        ], None
    seconds = time.perf_counter() - started
    said = ", ".join(f"{name} {hello.get(name) or 'not installed'}" for name in PINNED)
    checks = [
        Check(
            "worker",
            "worker",
            "ok",
            f"the {where} started and speaks protocol {hello.get('protocol')} in {seconds:.1f} s: `{command}` ({said})",
            seconds=round(seconds, 2),
        )
    ]
    if settings.worker:  # it may run elsewhere: its versions are the ones that compile
        for check in version_checks({n: hello.get(n) for n in PINNED}, "on the worker", None, True):
            checks.append(dataclasses.replace(check, section="worker", name=f"worker {check.name}"))
    return checks, client


def tiny_compiles(
    client: Runner, limits: PhaseLimits, chips, kernel: str = KERNEL
) -> list[tuple[str, ExampleResult, float]]:
    """(chip, result, seconds) of the tiny kernel compiled for each chip by `client`."""
    from .compile.backend import CheckRequest

    folder = tempfile.mkdtemp(prefix="vmem-lsp-doctor-")
    path = os.path.join(folder, "vmem_doctor_kernel.py")
    with open(path, "w") as f:
        f.write(kernel)
    results = []
    try:
        for name in chips:
            started = time.perf_counter()
            result = client.check(CheckRequest(EXAMPLE, name, path=path), limits)
            results.append((name, result, time.perf_counter() - started))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return results


# ---- the cache ---------------------------------------------------------------------------


def folder_size(folder: str) -> tuple[int, int]:
    """(bytes, files) below `folder`."""
    size = count = 0
    for directory, _, files in os.walk(folder):
        for name in files:
            try:
                size += os.lstat(os.path.join(directory, name)).st_size
                count += 1
            except OSError:
                pass
    return size, count


def cache_check(settings) -> Check:
    folder = settings.cache_folder()
    from .compile.shared_cache import install_hint, is_url

    if is_url(folder):
        return url_check(folder, install_hint(folder))
    if not os.path.exists(folder):
        parent = next(p for p in iter_parents(folder) if os.path.exists(p))
        if not os.access(parent, os.W_OK):
            return Check(
                "cache",
                "cache",
                "problem",
                f"cache folder {folder} does not exist and {parent} is not writable",
                "set cache-dir in [tool.vmem-lsp] (or --cache-dir) to a writable folder",
            )
        return Check("cache", "cache", "ok", f"cache folder {folder}: not made yet (the first check makes it)")
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        return Check(
            "cache",
            "cache",
            "problem",
            f"cache folder {folder} is not a writable folder",
            "set cache-dir in [tool.vmem-lsp] (or --cache-dir) to a writable folder",
        )
    from .render import size as size_text  # the form of every size vmem-lsp prints: 12.35M

    size, count = folder_size(folder)
    return Check("cache", "cache", "ok", f"cache folder {folder}: {size_text(size)} in {count} files")


def iter_parents(path: str):
    path = os.path.abspath(path)
    while True:
        yield path
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


BUCKETS = ("s3", "s3a", "gs", "gcs")  # the URL's first part is a bucket that must exist


def url_check(url: str, hint: str) -> Check:
    """A shared cache: whether its filesystem is installed and the store answers."""
    from .compile.shared_cache import protocol_of

    try:
        from fsspec.core import url_to_fs

        fs, root = url_to_fs(url)
    except ImportError as error:
        return Check("cache", "cache", "problem", f"shared cache {url}: {error} (checks run without a cache)", hint)
    except (ValueError, OSError) as error:
        return Check(
            "cache", "cache", "problem", f"shared cache {url}: cannot open it: {error}", "check the URL in cache-dir"
        )
    answer: list = []
    root = root.rstrip("/")
    bucket = root.split("/", 1)[0] if protocol_of(url) in BUCKETS else None

    def listing():
        try:
            answer.append(("ok", len(fs.ls(root, detail=False))))
        except FileNotFoundError:
            try:  # a prefix not written yet, in a bucket that is there
                if bucket and bucket != root:
                    fs.ls(bucket, detail=False)
                answer.append(("ok", 0) if bucket != root else ("missing", bucket))
            except FileNotFoundError:
                answer.append(("missing", bucket))
            except Exception as error:
                answer.append(("error", f"{type(error).__name__}: {error}"))
        except Exception as error:  # s3fs and botocore raise beyond OSError
            answer.append(("error", f"{type(error).__name__}: {error}"))

    thread = threading.Thread(target=listing, daemon=True)
    thread.start()
    thread.join(URL_SECONDS)
    if not answer:
        return Check(
            "cache",
            "cache",
            "problem",
            f"shared cache {url}: no answer in {URL_SECONDS:g} s",
            "check the network and the store's endpoint (AWS_ENDPOINT_URL for S3)",
        )
    kind, value = answer[0]
    if kind == "missing":
        return Check(
            "cache",
            "cache",
            "problem",
            f"shared cache {url}: the bucket {value} does not exist",
            f"create the bucket {value}, or fix cache-dir",
        )
    if kind == "error":
        return Check(
            "cache",
            "cache",
            "problem",
            f"shared cache {url}: not reachable: {value}",
            "check the credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID...) and the bucket's name",
        )
    return Check(
        "cache", "cache", "ok", f"shared cache {url}: reachable ({value} entr{'y' if value == 1 else 'ies'} at its top)"
    )


# ---- memory, backend, settings ---------------------------------------------------------


def memory_check(settings) -> tuple[Check, dict]:
    from .compile.backend import memory_for

    plan, _ = memory_for(settings, settings.jobs)
    facts = {
        "jobs": plan.jobs,
        "share_bytes": plan.share_bytes,
        "peak_bytes": plan.peak_bytes,
        "available_bytes": plan.available_bytes,
        "reason": plan.reason,
    }
    return Check(
        "memory",
        "memory",
        "info",
        plan.reason,  # "N jobs, cores minus one; ...; each worker may hold ...": one sentence
    ), facts


def backend_check(settings, limits: PhaseLimits) -> Check | None:
    """With backend "ray": the cluster reached, its nodes and CPUs, and the
    tiny kernel compiled there as a check's task would be (on whichever node
    Ray picks: a node without libtpu, or without this project's pins, says so)."""
    if settings.backend != "ray":
        return None
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        return Check(
            "backend",
            "ray",
            "problem",
            'backend = "ray", but ray is not installed',
            "pip install 'vmem-lsp[ray]', or set backend = \"local\"",
        )
    from .compile.backend import BackendError, cluster

    started = time.perf_counter()
    try:
        pool = cluster(settings)
    except BackendError as error:
        return Check(
            "backend",
            "ray",
            "problem",
            str(error),
            "start the cluster (`ray start --head`) or set ray-address (or RAY_ADDRESS) to one that runs, "
            'or set backend = "local"',
            round(time.perf_counter() - started, 2),
        )
    try:
        nodes = sum(1 for node in pool.ray.nodes() if node.get("Alive"))
        [(name, result, seconds)] = tiny_compiles(pool, limits, [settings.targets[0]])
    finally:
        pool.stop()
    address = pool.address or "a local one (no ray-address, no RAY_ADDRESS)"
    where = f"the Ray cluster {address}: {nodes} node{'s' * (nodes != 1)}, {pool.size} CPU{'s' * (pool.size != 1)}"
    if compile_error(result) is None:
        return Check(
            "backend",
            "ray",
            "ok",
            f"{where}; a tiny compile for {name} ran there in {seconds:.1f} s",
            seconds=round(seconds, 2),
        )
    return Check(
        "backend",
        "ray",
        "problem",
        f"{where}; the tiny compile for {name} failed there after "
        f"{seconds:.1f} s: {result.error or 'traced, but not compiled'}",
        f'install vmem-lsp with {install_command()} on every node, or set backend = "local"',
        round(seconds, 2),
    )


def plain(value):
    return [plain(v) for v in value] if isinstance(value, (tuple, list)) else value


def settings_table(path: str, worker: str | None, python: str | None = None):
    """(settings, [(field, value, source)], problem): the settings `check PATH`
    would use, each field's source ("pyproject.toml:<path>", "--worker", "default")."""
    from .config import ConfigError, Settings, _read_toml, find_pyproject, load_settings, sources

    pyproject = find_pyproject(path)
    table = _read_toml(pyproject).get("tool", {}).get("vmem-lsp", {}) if pyproject else {}
    problem = None
    try:
        settings = load_settings(path)
        where = sources(table, pyproject)
    except ConfigError as error:
        settings, where = Settings(), sources((), None)
        problem = Check(
            "settings",
            "pyproject",
            "problem",
            f"the settings cannot be read: {error}; showing the defaults",
            f"fix [tool.vmem-lsp] in {pyproject}",
        )
    if python:
        settings = dataclasses.replace(settings, python=python, python_source="--python")
        where.update(python="--python", python_source="--python")
    if worker:
        settings = dataclasses.replace(settings, worker=worker, worker_source="--worker")
        where.update(worker="--worker", worker_source="--worker")
    elif settings.worker:  # a repository's pyproject can name any command: say so before it runs
        print(f"using worker from pyproject.toml: {settings.worker}", file=sys.stderr)
    rows = [(f.name, getattr(settings, f.name), where.get(f.name, "default")) for f in dataclasses.fields(settings)]
    return settings, rows, problem


# ---- the run -------------------------------------------------------------------------------


def diagnose(path: str, worker: str | None = None, python: str | None = None) -> dict:
    started = time.perf_counter()
    settings, rows, problem = settings_table(path, worker, python)
    # The compiler that checks first (the worker's Python and its versions), then vmem-lsp itself.
    interpreter_lines, installed = interpreter_checks(settings)
    checks: list[Check] = [
        *interpreter_lines,
        Check("versions", "vmem-lsp", "info", f"vmem-lsp {__version__} ({sys.executable})"),
    ]
    if problem:
        checks.append(problem)
    worker_lines, client = worker_checks(settings)
    checks += worker_lines
    from .results import PhaseLimits

    limits = PhaseLimits(trace=min(settings.trace_timeout, 60.0), compile=min(settings.timeout, 120.0))
    if client is None:
        checks.append(
            Check(
                "chips",
                "chips",
                "problem",
                "no chip tried: the worker did not start",
                "fix the worker (above), then run doctor again",
            )
        )
    else:
        try:
            hello = getattr(client, "hello", None) or {}
            tiny = lambda targets, kernel: tiny_compiles(client, limits, targets, kernel)
            version = hello.get("libtpu") or (installed or {}).get("libtpu")
            for family in families():
                checks += family.doctor(tiny, limits, version)
        finally:
            client.stop()
    checks.append(cache_check(settings))
    memory_line, memory_facts = memory_check(settings)
    checks.append(memory_line)
    if (backend := backend_check(settings, limits)) is not None:
        checks.append(backend)
    problems = [c for c in checks if c.status == "problem"]
    # Each target the families try, with whether it compiled, whether the compiler knew it
    # (Family.doctor says "does not know" as an info line), and how long it took.
    tried = {c.name: c for c in checks if c.section in {f.doctor_section for f in families()}}
    chips = {
        name: {
            "compiled": name in tried and tried[name].status == "ok",
            "known": name not in tried or "does not know" not in tried[name].message,
            "seconds": tried[name].seconds if name in tried else None,
        }
        for family in families()
        if family.doctor_section == "chips"
        for name in family.targets()
    }
    return {
        "version": __version__,
        "path": os.path.abspath(path),
        "ok": not problems,
        "exit_code": EXIT_FOUND if problems else EXIT_OK,
        "problems": [f"{c.section}: {c.name}" if c.section != c.name else c.name for c in problems],
        "checks": [dataclasses.asdict(c) for c in checks],
        "versions": {
            "installed": installed,
            "tested": installed is not None and versions.in_tested_range(installed.get("jax"), installed.get("libtpu")),
            "range": versions.range_text(),
        },
        "chips": chips,
        "memory": memory_facts,
        "settings": {name: {"value": plain(value), "source": source} for name, value, source in rows},
        "seconds": round(time.perf_counter() - started, 2),
    }


SECTIONS = {
    "versions": "versions",
    "worker": "worker",
    "chips": "chips (a tiny compile each, in one worker)",
    "cache": "cache",
    "memory": "memory",
    "backend": "backend",
    "settings": "settings",
}
MARKS = {"ok": "ok     ", "problem": "PROBLEM", "info": "info   "}


def text(report: dict) -> str:
    lines = [f"vmem-lsp doctor: {report['path']}"]
    section = None
    for check in report["checks"]:
        if check["section"] != section:
            section = check["section"]
            lines.append(f"\n{SECTIONS.get(section, section)}")
        lines.append(f"  {MARKS[check['status']]} {check['message']}")
        if check["fix"]:
            lines.append(f"          fix: {check['fix']}")
    lines.append("\nsettings in force (and where each came from)")
    width = max(len(name) for name in report["settings"])
    for name, entry in report["settings"].items():
        value = json.dumps(entry["value"])
        lines.append(f"  {name:<{width}} = {value:<30} # {entry['source']}")
    problems = report["problems"]
    lines.append("")
    lines.append(
        f"{len(problems)} problem{'s' * (len(problems) != 1)}: {', '.join(problems)} ({report['seconds']:.1f} s)"
        if problems
        else f"all well ({report['seconds']:.1f} s)"
    )
    return "\n".join(lines) + "\n"


def run(args) -> int:
    """`vmem-lsp doctor [PATH] [--format text|json] [--worker COMMAND]`."""
    if not os.path.exists(args.path):
        print(f"vmem-lsp doctor: no such file or folder: {args.path}", file=sys.stderr)
        return EXIT_ERROR
    try:
        report = diagnose(args.path, args.worker, getattr(args, "python", None))
    except Exception as error:  # doctor's own bug: exit 2, never a 1 that blames the machine
        import traceback

        traceback.print_exc()
        print(f"vmem-lsp doctor: internal error: {error}", file=sys.stderr)
        return EXIT_ERROR
    if args.format == "json":
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        sys.stdout.write(text(report))
    return report["exit_code"]
