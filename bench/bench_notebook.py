"""Static-tier latency in a 200-cell notebook against the same code as one file
(issue 19's target: p95 within 20%), through a real client over stdio.

    .venv/bin/python bench/bench_notebook.py [--edits 200] [--cells 200] [--rounds 1] [--profile DIR]

The notebook: jax's ops/tpu kernels and examples/ cut into code cells at
their top-level statements (a blank line before), a Markdown cell before each
file, IPython magics (`%load_ext`, `!echo`, a `%%timeit` cell) after some
files, until there are `--cells` code cells. The file: the module those cells
make (source/notebook.open_notebook), so both documents are the same text
inside the server. The `# vmem:` directives of examples/ are left out: with
no example to compile, the static tier puts VMEM020 on every pallas_call at
once (no compiler needed), so cells across the notebook show diagnostics.

Each round starts two servers (debounce 0, no compile), one with the file
open, one with the notebook, and makes the same N single-character edits (a space at the end of a random
non-empty line of a random code cell, magics left alone; one seed for both):
notebookDocument/didChange with the cell's text change, or
textDocument/didChange on the same module line. The edits alternate between
the two (one at a time, the first of each pair alternating too), so that the
load of a shared machine falls on both alike. Two times per edit, from
sending the change:
  - "edited": to the publishDiagnostics of the edited URI (the cell, or the
    file) at its new version, when the server sends one;
  - "burst": to the last publishDiagnostics the change brought (publishes
    stop for `--quiet` seconds), i.e. until the server is done with it.
--profile DIR runs each server under cProfile (the loop thread: building
the module, mapping, publishing) and prints the top of each.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import os
import pstats
import random
import statistics
import sys
import tempfile
import time
from contextlib import asynccontextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import nbformat  # noqa: E402
from lsprotocol import types  # noqa: E402
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook  # noqa: E402
from pytest_lsp import make_test_lsp_client  # noqa: E402
from support.lsp_client import PUSH_CAPABILITIES, wait_for  # noqa: E402

from vmem_lsp.source.notebook import open_notebook  # noqa: E402

NOTEBOOK_CAPABILITIES = types.ClientCapabilities(
    text_document=PUSH_CAPABILITIES.text_document,
    window=PUSH_CAPABILITIES.window,
    workspace=PUSH_CAPABILITIES.workspace,
    notebook_document=types.NotebookDocumentClientCapabilities(
        synchronization=types.NotebookDocumentSyncClientCapabilities()
    ),
)


# ---- the notebook ------------------------------------------------------------------------------


def sources() -> list[Path]:
    """Kernel code: examples/, then jax's ops/tpu files (not the __init__s, not the block-size table)."""
    import jax.experimental.pallas.ops.tpu as ops

    jax_files = sorted(
        p for p in Path(ops.__path__[0]).rglob("*.py") if p.name not in ("__init__.py", "tuned_block_sizes.py")
    )
    return sorted((ROOT / "examples").glob("*.py")) + jax_files


def statements(text: str) -> list[str]:
    """The file cut before each top-level statement that follows a blank line
    (comments and decorators stay with what they precede); blank lines at a cut go."""
    lines = text.splitlines()
    starts = []
    for node in ast.parse(text).body:
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
        while start > 1 and lines[start - 2].startswith("#"):
            start -= 1
        if start > 1 and not lines[start - 2].strip():
            starts.append(start)
    chunks, previous = [], 1
    for start in [*starts, len(lines) + 1]:
        chunk = "\n".join(lines[previous - 1 : start - 1]).strip("\n")
        if chunk.strip():
            chunks.append(chunk)
        previous = start
    return chunks


def build_cells(code_cells: int) -> list[tuple[str, str]]:
    """(kind, source) of the notebook's cells: `code_cells` code cells and Markdown between."""
    cells, code = [], 0
    for number, path in enumerate(sources()):
        cells.append(("markdown", f"## {path.name}\nThe kernels of `{path.name}`, cell by cell."))
        for n, chunk in enumerate(statements(path.read_text())):
            drop = ("# vmem:", *(("from __future__",) if number > 0 else ()))
            chunk = "\n".join(line for line in chunk.split("\n") if not line.startswith(drop))
            if n == 0 and number % 3 == 1:
                chunk = "%load_ext autoreload\n!echo checking " + path.name + "\n" + chunk
            cells.append(("code", chunk))
            code += 1
            if code == code_cells:
                return cells
        if number % 4 == 2:
            cells.append(("code", "%%timeit\nsum(range(10))"))
            code += 1
            if code == code_cells:
                return cells
    raise SystemExit(f"only {code} code cells in the sources")


# ---- the edits ---------------------------------------------------------------------------------


def plan_edits(module, edits: int, seed: int) -> list[tuple[int, int]]:
    """(code cell index, line in the cell 0-based) of each edit: a random code cell,
    a random non-empty line of it that is not a masked magic."""
    rng = random.Random(seed)
    editable = {
        i: [n for n, line in enumerate(cell.source.split("\n")) if line.strip() and n + 1 not in cell.masked]
        for i, cell in enumerate(module.cells)
    }
    choices = [i for i, lines in editable.items() if lines]
    planned = []
    for _ in range(edits):
        cell = rng.choice(choices)
        planned.append((cell, rng.choice(editable[cell])))
    return planned


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class Publishes:
    """Every publishDiagnostics as it arrives: (time, uri, version, count)."""

    def __init__(self, client):
        self.seen: list[tuple[float, str, int | None, int]] = []
        original = client.protocol.fm.features.get(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

        def on_publish(params: types.PublishDiagnosticsParams):
            self.seen.append((time.perf_counter(), params.uri, params.version, len(params.diagnostics)))
            if original:
                original(params)

        client.protocol.fm.features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = on_publish

    async def after(
        self, sent: float, index: int, uri: str, version: int, quiet: float
    ) -> tuple[float | None, float, int]:
        """(ms to the edited URI's publish at `version` or None, ms to the last publish
        of the burst, publishes in it) for a change sent at `sent`, publishes from `index`."""
        await wait_for(lambda: len(self.seen) > index, timeout=30, what="a publish after the change")
        while True:
            count = len(self.seen)
            await asyncio.sleep(quiet)
            if len(self.seen) == count:
                break
        burst = self.seen[index:]
        edited = next((t for t, u, v, _ in burst if u == uri and v == version), None)
        return (None if edited is None else (edited - sent) * 1000), (burst[-1][0] - sent) * 1000, len(burst)


class Turns:
    """The two sessions' edits interleaved, one at a time: edit k goes to the file
    first when k is even, to the notebook first when odd, so that a change of the
    machine's load falls on both alike."""

    def __init__(self):
        self.done = 0  # edits made, both sessions counted
        self.changed = asyncio.Condition()

    async def mine(self, name: str, k: int) -> None:
        order = ("file", "notebook") if k % 2 == 0 else ("notebook", "file")
        position = 2 * k + order.index(name)
        async with self.changed:
            await self.changed.wait_for(lambda: self.done == position)

    async def over(self) -> None:
        async with self.changed:
            self.done += 1
            self.changed.notify_all()


@asynccontextmanager
async def server(work: Path, capabilities, profile: Path | None):
    client = make_test_lsp_client()
    command = [sys.executable, *(["-m", "cProfile", "-o", str(profile)] if profile else []), "-m", "vmem_lsp", "serve"]
    await client.start_io(*command, cwd=str(work))
    await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities,
            root_uri=work.as_uri(),
            initialization_options={"compileOnOpen": False, "compileOnSave": False, "debounceMs": 0},
        )
    )
    try:
        yield client
    finally:
        await client.shutdown_session()


async def run_file(work: Path, text: str, module, planned, quiet: float, profile: Path | None, turns: Turns) -> list:
    path = work / "notebook_as_file.py"
    path.write_text(text)
    uri, version = path.as_uri(), 1
    lines = text.split("\n")
    async with server(work, PUSH_CAPABILITIES, profile) as client:
        publishes = Publishes(client)
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "python", version, text))
        )
        await wait_for(lambda: publishes.seen, timeout=60, what="the first publish")
        await asyncio.sleep(0.5)
        times = []
        for k, (cell, line) in enumerate(planned):
            await turns.mine("file", k)
            at = module.cells[cell].first_line - 1 + line
            col = utf16(lines[at])
            lines[at] += " "
            version += 1
            index, sent = len(publishes.seen), time.perf_counter()
            client.text_document_did_change(
                types.DidChangeTextDocumentParams(
                    types.VersionedTextDocumentIdentifier(version=version, uri=uri),
                    [
                        types.TextDocumentContentChangePartial(
                            range=types.Range(types.Position(at, col), types.Position(at, col)), text=" "
                        )
                    ],
                )
            )
            times.append(await publishes.after(sent, index, uri, version, quiet))
            await turns.over()
        shown = sum(n for _, u, _, n in publishes.seen[-1:])
        print(f"  file: {shown} diagnostics shown at the end")
    return times


async def run_notebook(
    work: Path, cells: list[tuple[str, str]], module, planned, quiet: float, profile: Path | None, turns: Turns
) -> list:
    path = work / "notebook.ipynb"
    nbformat.write(
        new_notebook(cells=[new_code_cell(s) if k == "code" else new_markdown_cell(s) for k, s in cells]), str(path)
    )
    uris = [f"vscode-notebook-cell:{path}#W{i}sZmlsZQ%3D%3D" for i in range(len(cells))]
    code_uris = [u for u, (kind, _) in zip(uris, cells) if kind == "code"]
    texts = {u: s for u, (_, s) in zip(uris, cells)}
    versions = {u: 1 for u in uris}
    notebook_version = 1
    async with server(work, NOTEBOOK_CAPABILITIES, profile) as client:
        publishes = Publishes(client)
        kinds = {"code": types.NotebookCellKind.Code, "markdown": types.NotebookCellKind.Markup}
        client.notebook_document_did_open(
            types.DidOpenNotebookDocumentParams(
                types.NotebookDocument(
                    path.as_uri(),
                    "jupyter-notebook",
                    notebook_version,
                    [types.NotebookCell(kinds[k], u) for u, (k, _) in zip(uris, cells)],
                ),
                [
                    types.TextDocumentItem(u, "python" if k == "code" else "markdown", 1, s)
                    for u, (k, s) in zip(uris, cells)
                ],
            )
        )
        await wait_for(lambda: publishes.seen, timeout=60, what="the first publish")
        await asyncio.sleep(0.5)
        times = []
        for k, (cell, line) in enumerate(planned):
            await turns.mine("notebook", k)
            uri = code_uris[cell]
            lines = texts[uri].split("\n")
            col = utf16(lines[line])
            lines[line] += " "
            texts[uri] = "\n".join(lines)
            versions[uri] += 1
            notebook_version += 1
            index, sent = len(publishes.seen), time.perf_counter()
            client.notebook_document_did_change(
                types.DidChangeNotebookDocumentParams(
                    types.VersionedNotebookDocumentIdentifier(notebook_version, path.as_uri()),
                    types.NotebookDocumentChangeEvent(
                        cells=types.NotebookDocumentCellChanges(
                            text_content=[
                                types.NotebookDocumentCellContentChanges(
                                    types.VersionedTextDocumentIdentifier(versions[uri], uri),
                                    [
                                        types.TextDocumentContentChangePartial(
                                            types.Range(types.Position(line, col), types.Position(line, col)), " "
                                        )
                                    ],
                                )
                            ]
                        )
                    ),
                )
            )
            times.append(await publishes.after(sent, index, uri, versions[uri], quiet))
            await turns.over()
        shown = sum(len(d) for u, d in client.diagnostics.items() if u in texts)
        print(
            f"  notebook: {shown} diagnostics shown at the end, on "
            f"{sum(1 for u, d in client.diagnostics.items() if u in texts and d)} cells"
        )
    return times


def figures(values: list[float]) -> tuple[float, float, float]:
    values = sorted(values)
    return statistics.median(values), values[int(0.95 * (len(values) - 1))], values[-1]


def show(name: str, times: list) -> tuple[float, float, float]:
    burst = figures([b for _, b, _ in times])
    told = [e for e, _, _ in times if e is not None]
    edited = figures(told) if told else None
    per_edit = statistics.mean(n for _, _, n in times)
    print(
        f"  {name:8s} burst  p50 {burst[0]:6.1f} ms, p95 {burst[1]:6.1f} ms, max {burst[2]:6.1f} ms; "
        f"{per_edit:.1f} publishes per edit"
    )
    if edited:
        print(
            f"  {name:8s} edited p50 {edited[0]:6.1f} ms, p95 {edited[1]:6.1f} ms, max {edited[2]:6.1f} ms "
            f"({len(told)}/{len(times)} edits told the edited URI)"
        )
    else:
        print(f"  {name:8s} edited: never told the edited URI at its new version")
    return burst


def print_profile(path: Path, top: int) -> None:
    print(f"  profile of the server's loop thread ({path.name}), cumulative, top {top}:")
    stats = pstats.Stats(str(path))
    stats.sort_stats("cumulative")
    width = {}
    for key, (_, calls, total, cumulative, _) in stats.stats.items():
        name = f"{Path(key[0]).name}:{key[1]}({key[2]})"
        if "vmem_lsp" in key[0] or "pygls" in key[0]:
            width[name] = (cumulative, total, calls)
    for name, (cumulative, total, calls) in sorted(width.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"    {cumulative * 1000:9.1f} ms cum {total * 1000:9.1f} ms own {calls:7d} calls  {name}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--edits", type=int, default=200)
    parser.add_argument("--cells", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=1, help="this many rounds of N edits to each")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", type=float, default=0.1, help="seconds without a publish that end a burst")
    parser.add_argument("--profile", type=Path, help="a folder: run the servers under cProfile, print the top")
    args = parser.parse_args()
    cells = build_cells(args.cells)
    module = open_notebook([(str(i), s) for i, (k, s) in enumerate(cells) if k == "code"])
    planned = plan_edits(module, args.edits, args.seed)
    print(
        f"machine: {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at start; {time.strftime('%Y-%m-%d %H:%M')}"
    )
    print(
        f"notebook: {len(cells)} cells ({len(module.cells)} code, {len(cells) - len(module.cells)} Markdown), "
        f"module {len(module.module.splitlines())} lines; {args.edits} edits, seed {args.seed}, debounce 0"
    )
    results: dict[str, list] = {"file": [], "notebook": []}
    for round_ in range(args.rounds):
        profiles = {
            name: args.profile / f"{name}{round_}.prof" if args.profile else None for name in ("file", "notebook")
        }
        turns = Turns()
        with tempfile.TemporaryDirectory() as file_work, tempfile.TemporaryDirectory() as notebook_work:
            file, notebook = await asyncio.gather(
                run_file(Path(file_work), module.module, module, planned, args.quiet, profiles["file"], turns),
                run_notebook(Path(notebook_work), cells, module, planned, args.quiet, profiles["notebook"], turns),
            )
        results["file"].extend(file)
        results["notebook"].extend(notebook)
        for profile in profiles.values():
            if profile is not None:
                await asyncio.sleep(1)
                if profile.exists():
                    print_profile(profile, 25)
    print(f"after {args.rounds} round(s), load average {os.getloadavg()[0]:.2f}:")
    file = show("file", results["file"])
    notebook = show("notebook", results["notebook"])
    print(
        f"  notebook / file, to the end of the burst: p50 {notebook[0] / file[0]:.2f}, "
        f"p95 {notebook[1] / file[1]:.2f}, max {notebook[2] / file[2]:.2f} (target: p95 <= 1.20)"
    )


if __name__ == "__main__":
    asyncio.run(main())
