"""Load: a scripted client types into one large document (first at typing
speed, then as fast as it can send), opens 200 more documents, and asks for a
hover every 100 edits. Prints the hover latency, the server's memory curve,
and whether the final diagnostics are those of the final text.

    .venv/bin/python bench/bench_load.py [--edits 10000] [--documents 200]
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
sys.path.insert(0, str(ROOT / "bench"))

from bench_server import insert_char, largest_ops_file, rss_mb  # noqa: E402
from lsprotocol import types  # noqa: E402
from support.lsp_client import Editor, running_server, wait_for  # noqa: E402


async def run(edits: int, documents: int, typing: int) -> dict:
    import jax.experimental.pallas.ops.tpu as ops

    sources = sorted(Path(ops.__path__[0]).rglob("*.py"))
    figures = {"hover_ms": [], "hover_at": [], "memory": []}
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        big = work / "big.py"
        shutil.copy(largest_ops_file(), big)
        options = {"compileOnOpen": False, "compileOnSave": False}
        async with running_server(work, options=options) as client:
            pid = client._server.pid
            editor = Editor(client, big)
            editor.open()
            rng = random.Random(1)
            started = time.perf_counter()
            for i in range(edits):
                insert_char(client, editor, rng)
                if i < typing:
                    await asyncio.sleep(0.03)
                elif i % 20 == 0:
                    await asyncio.sleep(0)
                if i % 100 == 99:
                    t = time.perf_counter()
                    await client.text_document_hover_async(
                        types.HoverParams(
                            types.TextDocumentIdentifier(editor.uri), types.Position(rng.randrange(2000), 4)
                        )
                    )
                    figures["hover_ms"].append((time.perf_counter() - t) * 1000)
                    figures["hover_at"].append(i + 1)
                if i % 1000 == 999:
                    figures["memory"].append((i + 1, rss_mb(pid)))
                if i == edits // 2:
                    for n in range(documents):
                        path = work / f"doc{n:03}.py"
                        shutil.copy(sources[n % len(sources)], path)
                        Editor(client, path).open()
            figures["edit_seconds"] = time.perf_counter() - started
            final = editor.version
            await wait_for(lambda: client.diagnostics.get(editor.uri) is not None, timeout=60, what="diagnostics")
            await asyncio.sleep(2)
            figures["memory"].append(("end", rss_mb(pid)))
            await client.text_document_hover_async(
                types.HoverParams(types.TextDocumentIdentifier(editor.uri), types.Position(0, 0))
            )
            figures["final_version"] = final
            figures["final"] = sorted((d.code, d.range.start.line, d.message) for d in client.diagnostics[editor.uri])
            final_text = editor.text
        fresh_path = work / "fresh.py"
        fresh_path.write_text(final_text)
        async with running_server(work, options=options) as client:
            fresh = Editor(client, fresh_path)
            fresh.open()
            await wait_for(lambda: client.diagnostics.get(fresh.uri) is not None, timeout=60, what="fresh")
            figures["fresh"] = sorted((d.code, d.range.start.line, d.message) for d in client.diagnostics[fresh.uri])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--edits", type=int, default=10000)
    parser.add_argument("--documents", type=int, default=200)
    parser.add_argument("--typing", type=int, default=1000, help="edits sent at typing speed (30 ms) first")
    args = parser.parse_args()
    figures = asyncio.run(run(args.edits, args.documents, args.typing))
    hovers = sorted(figures["hover_ms"])
    print(f"machine: {os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}")
    print(
        f"{args.edits} edits ({args.typing} at 30 ms, the rest unpaced) to {largest_ops_file().name}, "
        f"{args.documents} documents opened midway, in {figures['edit_seconds']:.1f} s"
    )
    print(
        f"hover latency over {len(hovers)} hovers: p50 {statistics.median(hovers):.1f} ms, "
        f"p95 {hovers[int(0.95 * (len(hovers) - 1))]:.1f} ms, max {hovers[-1]:.1f} ms"
    )
    slowest = sorted(zip(figures["hover_ms"], figures["hover_at"]), reverse=True)[:3]
    print(
        "slowest hovers (ms after edit N): "
        + ", ".join(f"{ms:.0f} after {n}" for ms, n in slowest)
        + f"; the {args.documents} documents opened after edit {args.edits // 2 + 1}"
    )
    print("server memory (edits, MB): " + ", ".join(f"{n}: {mb:.0f}" for n, mb in figures["memory"]))
    same = figures["final"] == figures["fresh"]
    print(f"final diagnostics equal those of a fresh server on the final text: {same}")


if __name__ == "__main__":
    main()
