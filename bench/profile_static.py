"""Where the static tier's time and memory go, per edit: bench_server.py's
typing (N single-character edits to the largest jax ops/tpu file, debounce 0)
against a server whose pieces are timed from inside.

    .venv/bin/python bench/profile_static.py [--edits 200]           # time, per phase
    .venv/bin/python bench/profile_static.py --memory [--edits 200]  # memory: what grows with edits

Time: for each phase, p50 / p95 / mean of its wall time and of its CPU time
(`time.thread_time` of the thread it runs on, `time.process_time` inside the
parser process), in ms per edit; then the whole as the client sees it, the
CPU each process spent per edit (from /proc, every thread), and locate and a
bare ast.parse of the file in this process, with no IPC and no nice, for
scale. On a shared machine wall times move with the load; CPU times much less.

Memory: the server's and the parser's RSS after the open and after N edits,
and tracemalloc's view of the server's Python heap between the two: the lines
whose allocations grew most, each with the stack that made its largest share.
tracemalloc slows every allocation: the memory run's times mean nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def timed_locate(text: str, path: str):
    """In the parser process: locate, and its wall and CPU time there (ms)."""
    from vmem_lsp.source.locate import locate

    started, cpu = time.perf_counter(), time.process_time()
    located = locate(text, path)
    return located, (time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000


# ---- in the server ------------------------------------------------------------------------


def own_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def serve_timed(out: str) -> int:
    """`vmem-lsp serve` with timers (wall, CPU) around its static tier; the figures to `out` when it exits."""
    import pickle

    from vmem_lsp import engine
    from vmem_lsp.server import app, protocol, session
    from vmem_lsp.server.handlers import did_change

    stats: dict[str, list[float]] = collections.defaultdict(list)
    marks: dict[str, float] = {}

    def timed(owner, name: str, label: str, cpu: bool = True, before=None, after=None) -> None:
        function = getattr(owner, name, None)
        if function is None:  # the code moved on: time what is still there
            return

        def record(started: float, started_cpu: float) -> None:
            stats[label].append((time.perf_counter() - started) * 1000)
            if cpu:
                stats[label + " [cpu]"].append((time.thread_time() - started_cpu) * 1000)

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            before and before()
            started, started_cpu = time.perf_counter(), time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                record(started, started_cpu)
                after and after()

        @functools.wraps(function)
        async def waited(*args, **kwargs):
            before and before()
            started, started_cpu = time.perf_counter(), time.thread_time()
            try:
                return await function(*args, **kwargs)
            finally:
                record(started, started_cpu)
                after and after()

        setattr(owner, name, waited if asyncio.iscoroutinefunction(function) else wrapper)

    def mark(name: str):
        return lambda: marks.__setitem__(name, time.perf_counter())

    def since(name: str, label: str):
        def measure() -> None:
            if name in marks:
                stats[label].append((time.perf_counter() - marks.pop(name)) * 1000)

        return measure

    def through_parser(self, text: str, path: str):
        if self.pool is None:
            self.pool = self.start_pool()
        started = time.perf_counter()
        located, inside, inside_cpu = self.pool.submit(timed_locate, text, path).result()
        stats["    locate, in the parser process"].append(inside)
        stats["    locate, in the parser process [cpu]"].append(inside_cpu)
        stats["    round trip to it: IPC, pickling, waking"].append((time.perf_counter() - started) * 1000 - inside)
        stats["    (the LocateResult pickled: KB, not ms)"].append(len(pickle.dumps(located)) / 1024)
        return located

    app.Locator._locate = through_parser
    # On the loop, in the order an edit meets them.
    timed(protocol, "apply_change", "loop: didChange spliced into the text")
    timed(did_change, "handle", "loop: didChange handler (session, schedule)", after=mark("scheduled"))
    timed(
        app.VmemServer,
        "analyse_now",
        "analyse_now: to the thread, back, publish",
        cpu=False,
        before=since("scheduled", "  loop: the scheduled task starts (wait)"),
    )
    timed(session.Session, "analysis_input", "  loop: analysis_input (snapshot, settings)")
    timed(
        engine,
        "analyse",
        "  thread: engine.analyse",
        before=since("submitted", "  to the analysis thread (wait)"),
        after=mark("analysed"),
    )
    timed(app.Locator, "_locate", "    thread: locator (submit, parse, answer)")
    timed(engine, "find_examples", "    thread: find_examples")
    timed(
        session.Session,
        "apply_analysis",
        "  loop: apply_analysis",
        before=since("analysed", "  back on the loop (wait)"),
    )
    timed(app.VmemServer, "publish", "  loop: publish")
    timed(session.Session, "diagnostics", "    loop: Session.diagnostics (VMEM020 included)")
    timed(session.Session, "unreached", "      loop: Session.unreached")
    timed(app, "to_diagnostics", "    loop: to_diagnostics (positions, lsprotocol)")
    timed(app.VmemServer, "text_document_publish_diagnostics", "    loop: publishDiagnostics (JSON, write)")
    original_input = session.Session.analysis_input

    def analysis_input(self, path):  # the executor hop is timed from here to engine.analyse's start
        found = original_input(self, path)
        marks["submitted"] = time.perf_counter()
        return found

    session.Session.analysis_input = analysis_input

    from vmem_lsp.server.app import serve

    try:
        return serve()
    finally:
        with open(out, "w") as f:
            json.dump(stats, f)


def serve_traced(out: str, edits: int) -> int:
    """`vmem-lsp serve` under tracemalloc: snapshots after the open's publish and after `edits`
    more, and what grew between them, to `out` as JSON."""
    import gc
    import tracemalloc

    tracemalloc.start(12)
    from vmem_lsp.server import app

    taken: dict = {}
    publishes = [0]
    original = app.VmemServer.publish

    def publish(self, paths):
        original(self, paths)
        publishes[0] += 1
        if publishes[0] in (1, edits + 1):
            gc.collect()
            taken[publishes[0]] = (tracemalloc.take_snapshot(), own_rss_mb(), tracemalloc.get_traced_memory()[0])

    app.VmemServer.publish = publish
    try:
        return app.serve()
    finally:
        report: dict = {"rss": {}, "traced": {}, "grew": []}
        for at, (_, rss, traced) in taken.items():
            report["rss"][at] = rss
            report["traced"][at] = traced / 2**20
        if len(taken) == 2:
            first, last = taken[1][0], taken[edits + 1][0]
            keep = [tracemalloc.Filter(False, tracemalloc.__file__)]
            first, last = first.filter_traces(keep), last.filter_traces(keep)
            by_line = last.compare_to(first, "lineno")
            by_stack = last.compare_to(first, "traceback")
            for stat in by_line[:12]:
                frame = stat.traceback[0]
                # the stack that made most of this line's growth (tracebacks run oldest first)
                stack = next((s for s in by_stack if s.traceback[-1] == frame), None)
                report["grew"].append(
                    {
                        "where": f"{frame.filename}:{frame.lineno}",
                        "MB": stat.size_diff / 2**20,
                        "blocks": stat.count_diff,
                        "stack": [f"{f.filename}:{f.lineno}" for f in reversed(stack.traceback if stack else [])][:8],
                    }
                )
        with open(out, "w") as f:
            json.dump(report, f)


# ---- the client ---------------------------------------------------------------------------


async def drive(edits: int, out: str, memory: bool) -> dict:
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(ROOT / "tests"))
    import bench_server
    from lsprotocol import types
    from pytest_lsp import make_test_lsp_client
    from support.lsp_client import PUSH_CAPABILITIES, Editor, wait_for

    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        target = work / "big.py"
        shutil.copy(bench_server.largest_ops_file(), target)
        client = make_test_lsp_client()
        mode = ["--serve-traced", out, "--edits", str(edits)] if memory else ["--serve", out]
        await client.start_io(sys.executable, str(Path(__file__).resolve()), *mode, cwd=str(work))
        await client.initialize_session(
            types.InitializeParams(
                capabilities=PUSH_CAPABILITIES,
                root_uri=work.as_uri(),
                initialization_options={
                    "trustedFolders": [str(work)],
                    "compileOnOpen": False,
                    "compileOnSave": False,
                    "debounceMs": 0,
                },
            )
        )
        pid = client._server.pid
        published: list[tuple[float, int]] = []
        bench_server.on_each_publish(client, lambda arrived, params: published.append((arrived, params.version)))
        editor = Editor(client, target)
        editor.open()
        await wait_for(lambda: published, timeout=60, what="first publish")
        rss_mb, cpu_seconds = bench_server.rss_mb, bench_server.cpu_seconds
        parsers = bench_server.children_of(pid)
        opened = {"server": rss_mb(pid), **{f"parser {p}": rss_mb(p) for p in parsers}}
        cpu_before = {"server": cpu_seconds(pid), **{f"parser {p}": cpu_seconds(p) for p in parsers}}
        rng, latencies = random.Random(0), []
        for _ in range(edits):
            sent = time.perf_counter()
            bench_server.insert_char(client, editor, rng)
            version = editor.version
            arrived = await wait_for(
                lambda: next((t for t, v in published if v == version), None), timeout=60, what=f"version {version}"
            )
            latencies.append((arrived - sent) * 1000)
            await asyncio.sleep(0.02)
        cpu = {name: cpu_seconds(pid if name == "server" else int(name.split()[1])) for name in cpu_before}
        after = {"server": rss_mb(pid), **{f"parser {p}": rss_mb(p) for p in parsers}}
        await client.shutdown_session()
    return {
        "latencies": latencies,
        "cpu per edit": {name: (cpu[name] - cpu_before[name]) * 1000 / edits for name in cpu},
        "rss opened": opened,
        "rss after": after,
    }


def row(label: str, values: list[float]) -> str:
    values = sorted(values)
    p95 = values[int(0.95 * (len(values) - 1))]
    return f"{label:56s} p50 {statistics.median(values):6.2f}  p95 {p95:6.2f}  mean {statistics.fmean(values):6.2f}"


def in_process(runs: int = 30) -> None:
    import ast

    import bench_server

    from vmem_lsp.source.locate import locate

    path = bench_server.largest_ops_file()
    text = path.read_text()
    for label, work in (
        ("locate, here (no IPC, no nice)", lambda i: locate(text + " " * i, str(path))),
        ("ast.parse of the whole file, here", lambda i: ast.parse(text + " " * i)),
    ):
        work(0)
        times, cpu = [], []
        for i in range(runs):
            started, started_cpu = time.perf_counter(), time.process_time()
            work(i + 1)
            times.append((time.perf_counter() - started) * 1000)
            cpu.append((time.process_time() - started_cpu) * 1000)
        print(row(label, times))
        print(row(label + " [cpu]", cpu))


def wait_for_file(path: str) -> dict:
    deadline = time.monotonic() + 20  # the server writes its figures as it exits
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    with open(path) as f:
        return json.load(f)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--edits", type=int, default=200)
    parser.add_argument("--memory", action="store_true", help="tracemalloc and RSS instead of timers")
    parser.add_argument("--serve", metavar="OUT", help=argparse.SUPPRESS)  # the timed server itself
    parser.add_argument("--serve-traced", metavar="OUT", help=argparse.SUPPRESS)  # the traced server itself
    args = parser.parse_args()
    if args.serve:
        sys.exit(serve_timed(args.serve))
    if args.serve_traced:
        sys.exit(serve_traced(args.serve_traced, args.edits))
    print(f"machine: {os.cpu_count()} cores, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {time.ctime()}")
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "stats.json")
        client = asyncio.run(drive(args.edits, out, args.memory))
        stats = wait_for_file(out)
    print(f"load at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rss = lambda figures: ", ".join(f"{name} {mb:.1f} MB" for name, mb in figures.items())
    print(f"RSS after the open: {rss(client['rss opened'])}")
    print(f"RSS after {args.edits} edits: {rss(client['rss after'])}")
    print(
        "CPU per edit (all threads, /proc): "
        + ", ".join(f"{n} {ms:.2f} ms" for n, ms in client["cpu per edit"].items())
    )
    if args.memory:
        print(f"traced Python heap of the server (MB, after publish N): {stats['traced']}")
        print(f"server RSS in-process (MB, after publish N): {stats['rss']}")
        print(f"what grew over {args.edits} edits (tracemalloc, by line; the stack of its largest share):")
        for grew in stats["grew"]:
            print(f"  {grew['MB']:+8.2f} MB {grew['blocks']:+8d} blocks  {grew['where']}")
            for frame in grew["stack"][1:]:
                print(f"        {frame}")
        return
    print(f"per edit, ms, over {args.edits} edits (the open's analysis left out):")
    print(row("client: didChange sent -> publishDiagnostics read", client["latencies"]))
    for label, values in stats.items():
        print(row(label, values[1:] or values))
    in_process()


if __name__ == "__main__":
    main()
