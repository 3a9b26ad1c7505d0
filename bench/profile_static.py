"""Where the static tier's time goes, per edit: bench_server.py's typing (N
single-character edits to the largest jax ops/tpu file, debounce 0) against a
server whose pieces are timed from inside.

    .venv/bin/python bench/profile_static.py [--edits 200]

Prints p50 / p95 / mean in ms for each piece: the parse in the parser process,
the round trip to it (IPC and pickling), the rest of the analysis thread's
work, applying and publishing on the loop; the whole as the server and as the
client see it; then locate and a bare ast.parse of the file in this process,
with no IPC and no nice, for scale.
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
    """In the parser process: locate, and how long it took there (ms)."""
    from vmem_lsp.source.locate import locate

    started = time.perf_counter()
    located = locate(text, path)
    return located, (time.perf_counter() - started) * 1000


# ---- in the server ------------------------------------------------------------------------


def serve_timed(out: str) -> int:
    """`vmem-lsp serve` with timers around its static tier; the figures to `out` when it exits."""
    import pickle

    from vmem_lsp import engine
    from vmem_lsp.server import app, session

    stats: dict[str, list[float]] = collections.defaultdict(list)

    def timed(owner, name: str, label: str) -> None:
        function = getattr(owner, name, None)
        if function is None:  # the code moved on: time what is still there
            return

        def record(started: float) -> None:
            stats[label].append((time.perf_counter() - started) * 1000)

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                record(started)

        @functools.wraps(function)
        async def waited(*args, **kwargs):
            started = time.perf_counter()
            try:
                return await function(*args, **kwargs)
            finally:
                record(started)

        setattr(owner, name, waited if asyncio.iscoroutinefunction(function) else wrapper)

    def through_parser(self, text: str, path: str):
        if self.pool is None:
            self.pool = self.start_pool()
        started = time.perf_counter()
        located, inside = self.pool.submit(timed_locate, text, path).result()
        stats["  locate, in the parser process"].append(inside)
        stats["  round trip to it: IPC, pickling, waking"].append((time.perf_counter() - started) * 1000 - inside)
        blob = pickle.dumps(located)
        stats["  (the LocateResult pickled: KB, not ms)"].append(len(blob) / 1024)
        return located

    app.Locator._locate = through_parser
    timed(app.Locator, "_locate", "locator: submit, parse, answer")
    timed(engine, "find_examples", "find_examples")
    timed(engine, "analyse", "analysis thread: locate + examples + estimates")
    timed(session.Session, "analyse", "analysis thread: locate + examples + estimates")
    timed(session.Session, "analysis_input", "on the loop: snapshot and settings")
    timed(session.Session, "apply_analysis", "on the loop: apply the analysis")
    timed(app.VmemServer, "publish", "on the loop: publish (diagnostics, convert, write)")
    timed(app.VmemServer, "analyse_now", "analyse_now: to the thread, back, publish")

    from vmem_lsp.server.app import serve

    try:
        return serve()
    finally:
        with open(out, "w") as f:
            json.dump(stats, f)


# ---- the client ---------------------------------------------------------------------------


async def drive(edits: int, out: str) -> list[float]:
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
        await client.start_io(sys.executable, str(Path(__file__).resolve()), "--serve", out, cwd=str(work))
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
        published: list[tuple[float, int]] = []
        bench_server.on_each_publish(client, lambda arrived, params: published.append((arrived, params.version)))
        editor = Editor(client, target)
        editor.open()
        await wait_for(lambda: published, what="first publish")
        rng, latencies = random.Random(0), []
        for _ in range(edits):
            sent = time.perf_counter()
            bench_server.insert_char(client, editor, rng)
            version = editor.version
            arrived = await wait_for(
                lambda: next((t for t, v in published if v == version), None), timeout=10, what=f"version {version}"
            )
            latencies.append((arrived - sent) * 1000)
            await asyncio.sleep(0.02)
        await client.shutdown_session()
    return latencies


def row(label: str, values: list[float]) -> str:
    values = sorted(values)
    p95 = values[int(0.95 * (len(values) - 1))]
    return f"{label:52s} p50 {statistics.median(values):6.2f}  p95 {p95:6.2f}  mean {statistics.fmean(values):6.2f}"


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
        times = []
        for i in range(runs):
            started = time.perf_counter()
            work(i + 1)
            times.append((time.perf_counter() - started) * 1000)
        print(row(label, times))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--edits", type=int, default=200)
    parser.add_argument("--serve", metavar="OUT", help=argparse.SUPPRESS)  # the timed server itself
    args = parser.parse_args()
    if args.serve:
        sys.exit(serve_timed(args.serve))
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; {time.strftime('%Y-%m-%d')}")
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "stats.json")
        latencies = asyncio.run(drive(args.edits, out))
        deadline = time.monotonic() + 10  # the server writes its figures as it exits
        while not os.path.exists(out) and time.monotonic() < deadline:
            time.sleep(0.05)
        with open(out) as f:
            stats = json.load(f)
    print(f"per edit, ms, over {args.edits} edits (the open's analysis left out):")
    print(row("client: didChange sent -> publishDiagnostics read", latencies))
    for label, values in stats.items():
        print(row(label, values[1:] or values))
    in_process()


if __name__ == "__main__":
    main()
