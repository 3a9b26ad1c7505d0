"""The language server's speed and memory, measured through a real client over stdio.

    .venv/bin/python bench/bench_server.py [--edits 200] [--memory-edits 2000]

1. Static tier: time from didChange to the published diagnostics, over N
   single-character edits spread through the largest file under jax's
   ops/tpu (debounce set to 0, so the figure is the server's own work).
2. Compiler tier: with warm workers, time from didSave of an edited example
   to the publishDiagnostics that brings the compiler's verdict, for each
   bundled example on v5e+v6e (the chips compile at once where there are
   cores for it: vmem_lsp/compile/pool.py lanes_for).
3. Memory: the server's RSS after opening, and after M more edits.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from lsprotocol import types  # noqa: E402
from support.lsp_client import Editor, running_server, wait_for  # noqa: E402


def largest_ops_file() -> Path:
    import jax.experimental.pallas.ops.tpu as ops

    files = [p for p in Path(ops.__path__[0]).rglob("*.py")]
    return max(files, key=lambda p: len(p.read_text().splitlines()))


def rss_mb(pid: int | str = "self") -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far, all its threads: a figure that
    moves much less with other work on the machine than wall time does."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_of(pid: int) -> list[int]:
    """The processes `pid` started: the server's parser (and multiprocessing's resource tracker)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def insert_char(client, editor: Editor, rng: random.Random) -> None:
    """One keystroke: a space at the end of a random non-empty line."""
    lines = editor.text.split("\n")
    candidates = [i for i, line in enumerate(lines) if line.strip()]
    line = rng.choice(candidates)
    col = len(lines[line])
    lines[line] += " "
    editor.text = "\n".join(lines)
    editor.version += 1
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(version=editor.version, uri=editor.uri),
            [
                types.TextDocumentContentChangePartial(
                    range=types.Range(types.Position(line, col), types.Position(line, col)), text=" "
                )
            ],
        )
    )


def on_each_publish(client, callback) -> None:
    """callback(arrival time, params) for each publishDiagnostics, as it arrives."""
    original = client.protocol.fm.features.get(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

    def on_publish(params: types.PublishDiagnosticsParams):
        callback(time.perf_counter(), params)
        if original:
            original(params)

    client.protocol.fm.features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = on_publish


async def static_latency(work: Path, edits: int, memory_edits: int) -> None:
    target = work / "big.py"
    shutil.copy(largest_ops_file(), target)
    options = {"compileOnOpen": False, "compileOnSave": False, "debounceMs": 0}
    async with running_server(work, options=options) as client:
        published: list[tuple[float, int]] = []
        on_each_publish(client, lambda arrived, params: published.append((arrived, params.version)))
        editor = Editor(client, target)
        editor.open()
        await wait_for(lambda: published, what="first publish")
        pid = client._server.pid
        children = children_of(pid)
        cpu = [cpu_seconds(pid), sum(cpu_seconds(c) for c in children)]
        rng = random.Random(0)
        latencies = []
        for _ in range(edits):
            sent = time.perf_counter()
            insert_char(client, editor, rng)
            version = editor.version
            await wait_for(lambda: any(v == version for _, v in published), timeout=10, what=f"version {version}")
            arrived = next(t for t, v in published if v == version)
            latencies.append((arrived - sent) * 1000)
            await asyncio.sleep(0.02)
        server_cpu = (cpu_seconds(pid) - cpu[0]) * 1000 / edits
        parser_cpu = (sum(cpu_seconds(c) for c in children) - cpu[1]) * 1000 / edits
        latencies.sort()
        p50 = statistics.median(latencies)
        p95 = latencies[int(0.95 * (len(latencies) - 1))]
        lines = len(editor.text.splitlines())
        print(
            f"static tier, didChange -> publishDiagnostics, {edits} edits to {largest_ops_file().name} "
            f"({lines} lines), debounce 0: p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {latencies[-1]:.1f} ms ({load()})"
        )
        print(f"CPU per edit (all threads, /proc): server {server_cpu:.2f} ms, its parser {parser_cpu:.2f} ms")
        before = rss_mb(pid)
        print(
            f"RSS after {edits} edits: server {before:.1f} MB, its parser {sum(rss_mb(c) for c in children):.1f} MB "
            "(with multiprocessing's resource tracker)"
        )
        for i in range(memory_edits):
            insert_char(client, editor, rng)
            if i % 50 == 49:
                version = editor.version
                await wait_for(lambda: any(v == version for _, v in published), timeout=30, what="catch-up")
        version = editor.version
        await wait_for(lambda: any(v == version for _, v in published), timeout=30, what="final publish")
        after = rss_mb(pid)
        print(
            f"server memory: {before:.1f} MB after {edits} edits, {after:.1f} MB after {memory_edits} more "
            f"(growth {after - before:+.1f} MB)"
        )


KERNEL_EDITS = {  # edits that change the kernel body, so the compiler must run again
    "copy_whole.py": [("* 2", "* 3"), ("* 3", "* 4"), ("* 4", "* 5")],
    "matmul.py": [
        ("acc_ref[...] +=", "acc_ref[...] -="),
        ("acc_ref[...] -=", "acc_ref[...] +="),
        ("jnp.zeros_like(acc_ref)", "jnp.ones_like(acc_ref)"),
    ],
    "add_fits.py": [
        ("x_ref[...] + y_ref[...]", "x_ref[...] - y_ref[...]"),
        ("x_ref[...] - y_ref[...]", "x_ref[...] * y_ref[...]"),
        ("x_ref[...] * y_ref[...]", "x_ref[...] + y_ref[...]"),
    ],
}


def compiles_told(client) -> int:
    return len([m for m in client.log_messages if "compiled" in m.message])


class Compiles:
    """What the server says of its compiles: each publish with how many
    "compiled" logs came before it (the verdict's publish follows its log),
    and the last vmemLsp/status (is a compile or a fix search running?)."""

    def __init__(self, client):
        self.client = client
        self.verdicts: list[tuple[float, int, int]] = []  # (arrival, version, "compiled" logs by then)
        self.state = "idle"
        on_each_publish(
            client, lambda arrived, params: self.verdicts.append((arrived, params.version, compiles_told(client)))
        )
        client.protocol.fm.features["vmemLsp/status"] = self.on_status

    def on_status(self, params) -> None:
        self.state = params.state if hasattr(params, "state") else params["state"]

    async def settled(self) -> None:
        """Nothing compiles, not even a fix search: the next save waits on nothing else."""
        await wait_for(lambda: self.state not in ("starting", "compiling"), what="the compiles to end")

    async def save_and_time(self, editor: Editor, text: str) -> float:
        """Seconds from didSave to the publish of the saved version that
        follows the compile's "compiled" log."""
        await self.settled()
        count = compiles_told(self.client)
        editor.change(text)
        version, arrived = editor.version, len(self.verdicts)
        started = time.perf_counter()
        editor.save()
        verdict = lambda: next((t for t, v, told in self.verdicts[arrived:] if v == version and told > count), None)
        return await wait_for(verdict, what="compiled diagnostics after save") - started


async def warm_save(work: Path, jobs: int | None) -> None:
    """Warm workers; each save is a new file version, so the disk cache misses.
    An edit that leaves the kernel as it was (a comment) reuses the worker's
    verdict for that kernel; an edit to the kernel body compiles again. Each
    save waits for the last one's fix search to end: it times the compile,
    not the rest of a compile the search had started."""
    for name in KERNEL_EDITS:
        shutil.copy(ROOT / "examples" / name, work / name)
    (work / "pyproject.toml").write_text(
        '[tool.vmem-lsp]\ntargets = ["v5e", "v6e"]\ncache-dir = ".cache"\n' + (f"jobs = {jobs}\n" if jobs else "")
    )
    async with running_server(work) as client:
        compiles = Compiles(client)
        await wait_for(lambda: [m for m in client.log_messages if "worker ready" in m.message], what="worker")
        for name, edits in KERNEL_EDITS.items():
            editor = Editor(client, work / name)
            before = compiles_told(client)
            editor.open()
            await wait_for(lambda: compiles_told(client) > before, what="first compile")
            same = [await compiles.save_and_time(editor, editor.text + f"\n# comment {i}\n") for i in range(3)]
            changed = [await compiles.save_and_time(editor, editor.text.replace(old, new, 1)) for old, new in edits]
            workers = len(
                {m.message.split("pid ")[1].split(")")[0] for m in client.log_messages if "worker ready" in m.message}
            )
            print(
                f"warm save -> compiled diagnostics, {name} on v5e+v6e: kernel unchanged "
                f"{statistics.median(same):.2f} s; kernel edited {statistics.median(changed):.2f} s "
                f"(median of 3 each; {workers} worker(s); edited: {', '.join(f'{c:.2f}' for c in changed)})"
            )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--edits", type=int, default=200)
    parser.add_argument("--memory-edits", type=int, default=2000)
    parser.add_argument("--skip-compile", action="store_true")
    parser.add_argument("--skip-static", action="store_true")
    parser.add_argument(
        "--jobs",
        type=int,
        help="[tool.vmem-lsp] jobs for the compile figures (1: one worker, the chips one after another)",
    )
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M:%S')}; {load()}")
    if not args.skip_static:
        with tempfile.TemporaryDirectory() as work:
            await static_latency(Path(work), args.edits, args.memory_edits)
    if not args.skip_compile:
        with tempfile.TemporaryDirectory() as work:
            await warm_save(Path(work), args.jobs)


if __name__ == "__main__":
    asyncio.run(main())
