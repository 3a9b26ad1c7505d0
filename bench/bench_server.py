"""The language server's speed and memory, measured through a real client over stdio.

    .venv/bin/python bench/bench_server.py [--edits 200] [--memory-edits 2000]

1. Static tier: time from didChange to the published diagnostics, over N
   single-character edits spread through the largest file under jax's
   ops/tpu (debounce set to 0, so the figure is the server's own work).
2. Compiler tier: with a warm worker, time from didSave of an edited example
   to the compiler's diagnostics, for each bundled example.
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

from lsp_client import Editor, running_server, wait_for  # noqa: E402


def largest_ops_file() -> Path:
    import jax.experimental.pallas.ops.tpu as ops
    files = [p for p in Path(ops.__path__[0]).rglob("*.py")]
    return max(files, key=lambda p: len(p.read_text().splitlines()))


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def insert_char(client, editor: Editor, rng: random.Random) -> None:
    """One keystroke: a space at the end of a random non-empty line."""
    lines = editor.text.split("\n")
    candidates = [i for i, line in enumerate(lines) if line.strip()]
    line = rng.choice(candidates)
    col = len(lines[line])
    lines[line] += " "
    editor.text = "\n".join(lines)
    editor.version += 1
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(version=editor.version, uri=editor.uri),
        [types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(line, col), types.Position(line, col)), text=" ")]))


async def publish_count(client, uri):
    return len([1 for _ in client.diagnostics.get(uri, [])])


async def static_latency(work: Path, edits: int, memory_edits: int) -> None:
    target = work / "big.py"
    shutil.copy(largest_ops_file(), target)
    options = {"compileOnOpen": False, "compileOnSave": False, "debounceMs": 0}
    async with running_server(work, options=options) as client:
        published: list[tuple[float, int]] = []
        original = client.protocol.fm.features.get(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

        def on_publish(params: types.PublishDiagnosticsParams):
            published.append((time.perf_counter(), params.version))
            if original:
                original(params)

        client.protocol.fm.features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = on_publish
        editor = Editor(client, target)
        editor.open()
        await wait_for(lambda: published, what="first publish")
        pid = client._server.pid
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
        latencies.sort()
        p50 = statistics.median(latencies)
        p95 = latencies[int(0.95 * (len(latencies) - 1))]
        lines = len(editor.text.splitlines())
        print(f"static tier, didChange -> publishDiagnostics, {edits} edits to {largest_ops_file().name} "
              f"({lines} lines), debounce 0: p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {latencies[-1]:.1f} ms")
        before = rss_mb(pid)
        for i in range(memory_edits):
            insert_char(client, editor, rng)
            if i % 50 == 49:
                version = editor.version
                await wait_for(lambda: any(v == version for _, v in published), timeout=30, what="catch-up")
        version = editor.version
        await wait_for(lambda: any(v == version for _, v in published), timeout=30, what="final publish")
        after = rss_mb(pid)
        print(f"server memory: {before:.1f} MB after {edits} edits, {after:.1f} MB after {memory_edits} more "
              f"(growth {after - before:+.1f} MB)")


KERNEL_EDITS = {   # edits that change the kernel body, so the compiler must run again
    "copy_whole.py": [("* 2", "* 3"), ("* 3", "* 4"), ("* 4", "* 5")],
    "matmul.py": [("acc_ref[...] +=", "acc_ref[...] -="), ("acc_ref[...] -=", "acc_ref[...] +="),
                  ("jnp.zeros_like(acc_ref)", "jnp.ones_like(acc_ref)")],
    "add_fits.py": [("x_ref[...] + y_ref[...]", "x_ref[...] - y_ref[...]"),
                    ("x_ref[...] - y_ref[...]", "x_ref[...] * y_ref[...]"),
                    ("x_ref[...] * y_ref[...]", "x_ref[...] + y_ref[...]")],
}


async def save_and_time(client, editor: Editor, text: str) -> float:
    count = len([m for m in client.log_messages if "compiled" in m.message])
    editor.change(text)
    started = time.perf_counter()
    editor.save()
    await wait_for(lambda: len([m for m in client.log_messages if "compiled" in m.message]) > count,
                   what="compile after save")
    return time.perf_counter() - started


async def warm_save(work: Path) -> None:
    """Warm worker; each save is a new file version, so the disk cache misses.
    An edit that leaves the kernel as it was (a comment) reuses the worker's
    verdict for that kernel; an edit to the kernel body compiles again."""
    for name in KERNEL_EDITS:
        shutil.copy(ROOT / "examples" / name, work / name)
    (work / "pyproject.toml").write_text('[tool.vmem-lsp]\ntargets = ["v5e", "v6e"]\ncache-dir = ".cache"\n')
    async with running_server(work) as client:
        await wait_for(lambda: [m for m in client.log_messages if "worker ready" in m.message], what="worker")
        for name, edits in KERNEL_EDITS.items():
            editor = Editor(client, work / name)
            editor.open()
            await wait_for(lambda: [m for m in client.log_messages if "compiled" in m.message], what="first compile")
            same = [await save_and_time(client, editor, editor.text + f"\n# comment {i}\n") for i in range(3)]
            changed = [await save_and_time(client, editor, editor.text.replace(old, new, 1)) for old, new in edits]
            print(f"warm save -> compiler diagnostics, {name} on v5e+v6e: kernel unchanged "
                  f"{statistics.median(same):.2f} s; kernel edited {statistics.median(changed):.2f} s "
                  f"(median of 3 each)")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--edits", type=int, default=200)
    parser.add_argument("--memory-edits", type=int, default=2000)
    parser.add_argument("--skip-compile", action="store_true")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}")
    with tempfile.TemporaryDirectory() as work:
        await static_latency(Path(work), args.edits, args.memory_edits)
    if not args.skip_compile:
        with tempfile.TemporaryDirectory() as work:
            await warm_save(Path(work))


if __name__ == "__main__":
    asyncio.run(main())
