"""Notebooks in the language server: LSP 3.17 notebook
document sync, driven over stdio as an editor drives it. A notebook is one
module inside; diagnostics, hovers, hints and quick fixes land on its cells."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import attrs
import nbformat
import pytest
from lsprotocol import types
from pygls.workspace.text_document import TextDocument
from support import EXAMPLES, line_of
from support.cli import run_cli
from support.lsp_client import (
    PULL_CAPABILITIES,
    PUSH_CAPABILITIES,
    apply_text_edits,
    compiler_tier,
    estimate_tier,
    running_server,
    wait_for,
)
from support.notebooks import write_notebook

from vmem_lsp.source.model import Span, TextEdit
from vmem_lsp.source.notebook import open_notebook, read_notebook

SEED = EXAMPLES / "copy_whole.py"
NOTEBOOK_SYNC = types.NotebookDocumentClientCapabilities(synchronization=types.NotebookDocumentSyncClientCapabilities())
NOTEBOOK_CAPABILITIES = attrs.evolve(PUSH_CAPABILITIES, notebook_document=NOTEBOOK_SYNC)


# ---- the module an open notebook makes, and back (pure) ---------------------------------------


def test_open_cells_make_the_module_the_disk_makes_and_positions_go_both_ways(tmp_path):
    path = tmp_path / "nb.ipynb"
    write_notebook([SEED], path)
    on_disk = read_notebook(path.read_text(), str(path))
    cells = [(f"cell:{cell.index}", cell.source) for cell in on_disk.cells]
    notebook = open_notebook(cells)
    assert notebook.module == on_disk.module
    module = notebook.module.split("\n")
    for cell in notebook.cells:
        for n, text in enumerate(cell.source.split("\n"), 1):
            line, col = notebook.to_module(cell.uri, n, 4)
            assert (line, col) == (cell.first_line + n - 1, 4)
            assert n in cell.masked or module[line - 1] == text
            placed, local = notebook.in_cell(Span(line, 4, line, 6))
            assert placed is cell and local == Span(n, 4, n, 6)
    assert notebook.to_module("markdown", 1, 0) is None


def test_an_unchanged_cell_is_not_masked_again_and_a_span_is_kept_inside_its_cell():
    first = open_notebook([("a", "%timeit f()\nx = 1"), ("b", "y = (1,\n")])
    assert first.module == "pass\nx = 1\ny = (1,\n" and first.cells[0].masked == {1}
    again = open_notebook([("b", "y = (1,\n"), ("a", "%timeit f()\nx = 1")], first)
    assert again.cells[1].text is first.cells[0].text and again.cell_of("a").first_line == 2
    # A span that runs on into the next cell (a bracket left open) ends at its own cell's end.
    assert again.in_cell(Span(1, 4, 3, 1)) == (again.cells[0], Span(1, 4, 1, 7))
    assert again.in_cell(Span(1, 4, 3, 1), strict=True) is None  # no edit across cells
    assert again.in_cell(Span(2, 0, 2, 4), strict=True) is None  # nor on a masked magic
    assert again.edits_by_cell([TextEdit("nb", Span(3, 4, 3, 5), "2")])[0][0] is again.cells[1]


# ---- an editor's side of notebook sync --------------------------------------------------------


@dataclasses.dataclass
class Cell:
    uri: str
    node: dict  # the nbformat cell: what is written to disk on save
    version: int = 1

    @property
    def code(self) -> bool:
        return self.node["cell_type"] == "code"

    @property
    def text(self) -> str:
        return self.node["source"]

    def item(self) -> types.TextDocumentItem:
        return types.TextDocumentItem(self.uri, "python" if self.code else "markdown", self.version, self.text)

    def lsp(self) -> types.NotebookCell:
        return types.NotebookCell(types.NotebookCellKind.Code if self.code else types.NotebookCellKind.Markup, self.uri)


class NotebookEditor:
    """Open, edit, restructure, save and close one notebook through a client, as
    VS Code does: cell URIs of its own scheme, incremental edits per cell, and
    the .ipynb on disk written on save."""

    def __init__(self, client, path: Path):
        self.client, self.path, self.uri, self.version = client, path, path.as_uri(), 1
        self.node = nbformat.read(str(path), as_version=4)
        self.made = 0
        self.cells = [self.new_cell(node) for node in self.node.cells]

    def new_cell(self, node) -> Cell:
        self.made += 1
        return Cell(f"vscode-notebook-cell:{self.path}#W{self.made}sZmlsZQ%3D%3D", node)

    def document(self) -> types.NotebookDocument:
        return types.NotebookDocument(self.uri, "jupyter-notebook", self.version, [c.lsp() for c in self.cells])

    def open(self) -> None:
        self.client.notebook_document_did_open(
            types.DidOpenNotebookDocumentParams(self.document(), [c.item() for c in self.cells])
        )

    def changed(self, cells: types.NotebookDocumentCellChanges | None = None, metadata: dict | None = None) -> None:
        self.version += 1
        self.client.notebook_document_did_change(
            types.DidChangeNotebookDocumentParams(
                types.VersionedNotebookDocumentIdentifier(self.version, self.uri),
                types.NotebookDocumentChangeEvent(metadata=metadata, cells=cells),
            )
        )

    def edit(self, index: int, start: tuple[int, int], end: tuple[int, int], text: str) -> None:
        """Type `text` over a range of a cell (LSP positions, UTF-16)."""
        cell = self.cells[index]
        change = types.TextDocumentContentChangePartial(types.Range(types.Position(*start), types.Position(*end)), text)
        document = TextDocument(cell.uri, cell.text)
        document.apply_change(change)
        cell.node["source"], cell.version = document.source, cell.version + 1
        self.changed(
            types.NotebookDocumentCellChanges(
                text_content=[
                    types.NotebookDocumentCellContentChanges(
                        types.VersionedTextDocumentIdentifier(cell.version, cell.uri), [change]
                    )
                ]
            )
        )

    def insert(self, index: int, source: str) -> Cell:
        cell = self.new_cell(nbformat.v4.new_code_cell(source))
        self.cells.insert(index, cell)
        self.changed(
            types.NotebookDocumentCellChanges(
                structure=types.NotebookDocumentCellChangeStructure(
                    types.NotebookCellArrayChange(index, 0, [cell.lsp()]), did_open=[cell.item()]
                )
            )
        )
        return cell

    def remove(self, index: int) -> Cell:
        cell = self.cells.pop(index)
        self.changed(
            types.NotebookDocumentCellChanges(
                structure=types.NotebookDocumentCellChangeStructure(
                    types.NotebookCellArrayChange(index, 1, []), did_close=[types.TextDocumentIdentifier(cell.uri)]
                )
            )
        )
        return cell

    def move(self, index: int, to: int) -> None:
        """A cell dragged to another place: the cells between are sent again, none reopened."""
        self.cells.insert(to, self.cells.pop(index))
        low, high = min(index, to), max(index, to)
        self.changed(
            types.NotebookDocumentCellChanges(
                structure=types.NotebookDocumentCellChangeStructure(
                    types.NotebookCellArrayChange(low, high - low + 1, [c.lsp() for c in self.cells[low : high + 1]])
                )
            )
        )

    def write(self, to: Path | None = None) -> None:
        self.node.cells = [c.node for c in self.cells]
        nbformat.write(self.node, str(to or self.path))

    def save(self) -> None:
        self.write()
        self.client.notebook_document_did_save(
            types.DidSaveNotebookDocumentParams(types.NotebookDocumentIdentifier(self.uri))
        )

    def close(self) -> None:
        self.client.notebook_document_did_close(
            types.DidCloseNotebookDocumentParams(
                types.NotebookDocumentIdentifier(self.uri), [types.TextDocumentIdentifier(c.uri) for c in self.cells]
            )
        )

    def diagnostics(self, cell: Cell) -> list[types.Diagnostic]:
        return list(self.client.diagnostics.get(cell.uri, []))

    def shown(self) -> dict[str, list]:
        """Every URI with diagnostics now, cells or not."""
        return {uri: found for uri, found in self.client.diagnostics.items() if found}

    def forget_shown(self) -> None:
        """Drop what the client was told, to see what the next publish says."""
        for cell in self.cells:
            self.client.diagnostics.pop(cell.uri, None)


class Publishes:
    """(URI, version) of each publishDiagnostics from now on, in order of arrival."""

    def __init__(self, client):
        self.seen: list[tuple[str, int | None]] = []
        original = client.protocol.fm.features.get(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

        def on_publish(params: types.PublishDiagnosticsParams):
            self.seen.append((params.uri, params.version))
            if original:
                original(params)

        client.protocol.fm.features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = on_publish


def notebook_project(tmp_path: Path, cache_dir: Path, seed: Path = SEED) -> tuple[Path, dict]:
    (tmp_path / "pyproject.toml").write_text(f'[tool.vmem-lsp]\ntargets = ["v6e"]\ncache-dir = "{cache_dir}"\n')
    return tmp_path / "nb.ipynb", write_notebook([seed], tmp_path / "nb.ipynb")


def seed_place(where: dict, needle: str, shape: str = "(n, m)", seed: Path = SEED) -> tuple[int, int, int]:
    """(cell number from 1, line in it 0-based, column 0-based) of `shape` on the seed's `needle` line."""
    line = line_of(seed, needle)
    cell, in_cell = where[(seed.name, line)]
    return cell, in_cell - 1, seed.read_text().splitlines()[line - 1].index(shape)


def windows(diagnostics) -> list[tuple[int, int, int]]:
    return sorted(
        (d.range.start.line, d.range.start.character, d.range.end.character) for d in diagnostics if d.code == "VMEM001"
    )


@pytest.mark.asyncio
async def test_estimates_while_typing_and_the_verdict_on_save_land_on_the_kernel_cell(tmp_path, cache_dir):
    path, where = notebook_project(tmp_path, cache_dir)
    cell_number, line, col = seed_place(where, "in_specs=")
    _, out_line, out_col = seed_place(where, "out_specs=")
    async with running_server(tmp_path, options={"compileOnOpen": False}, capabilities=NOTEBOOK_CAPABILITIES) as client:
        notebook = NotebookEditor(client, path)
        notebook.open()
        kernel = notebook.cells[cell_number - 1]
        notebook.save()  # the compiler tier runs on the notebook's save
        found = await wait_for(lambda: compiler_tier(notebook.diagnostics(kernel)), what="the verdict after save")
        assert windows(found) == [(line, col, col + 6), (out_line, out_col, out_col + 6)]
        assert all("TPU v6e" in d.message and "[compiler]" in d.message for d in found if d.code == "VMEM001")
        assert set(notebook.shown()) == {kernel.uri}

        hover = await client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(kernel.uri), types.Position(line, col + 1))
        )
        assert "TPU v6e" in hover.contents.value and "input 0 window" in hover.contents.value
        call = kernel.text.split("\n").index("    return pl.pallas_call(")
        hovers = [
            await client.text_document_hover_async(
                types.HoverParams(types.TextDocumentIdentifier(kernel.uri), types.Position(n, 6))
            )
            for n in (call - 1, call)
        ]
        assert hovers[0] is None and hovers[1] is not None  # the call's first line, not the one above

        # The notebook's metadata changed, not its code: the compiler's verdict stays, and no
        # cell is told again (the hint request is answered after the change is taken).
        published = Publishes(client)
        notebook.changed(metadata={"kernelspec": {"name": "python3", "display_name": "TPU"}})
        hints = await client.text_document_inlay_hint_async(
            types.InlayHintParams(
                types.TextDocumentIdentifier(kernel.uri), types.Range(types.Position(0, 0), types.Position(40, 0))
            )
        )
        assert "64.00M x1" in [h.label for h in hints] and all(h.position.line <= out_line for h in hints)
        kept = notebook.diagnostics(kernel)
        assert windows(compiler_tier(kept)) == windows(found) and not estimate_tier(kept)
        assert published.seen == []

        # Typing a line at the top of the cell: the estimates follow it, on the same cell.
        notebook.edit(cell_number - 1, (0, 0), (0, 0), "# typed in the cell\n")
        moved = await wait_for(
            lambda: estimate_tier(notebook.diagnostics(kernel)), timeout=10, what="estimates after typing in a cell"
        )
        assert windows(moved) == [(line + 1, col, col + 6), (out_line + 1, out_col, out_col + 6)]
        assert all("estimate" in d.message for d in moved) and set(notebook.shown()) == {kernel.uri}

        notebook.save()
        again = await wait_for(lambda: compiler_tier(notebook.diagnostics(kernel)), what="the verdict after save")
        assert windows(again) == windows(moved)


@pytest.mark.asyncio
async def test_a_quick_fix_edits_the_cell_and_the_notebook_then_fits(tmp_path, cache_dir):
    path, where = notebook_project(tmp_path, cache_dir)
    cell_number, line, _ = seed_place(where, "in_specs=")
    async with running_server(tmp_path, capabilities=NOTEBOOK_CAPABILITIES) as client:
        notebook = NotebookEditor(client, path)
        notebook.open()
        kernel = notebook.cells[cell_number - 1]
        found = await wait_for(lambda: compiler_tier(notebook.diagnostics(kernel)), what="the verdict on open")
        window = next(d for d in found if d.code == "VMEM001" and d.range.start.line == line)
        offered = []
        while not offered:
            offered = await client.text_document_code_action_async(
                types.CodeActionParams(
                    types.TextDocumentIdentifier(kernel.uri),
                    window.range,
                    types.CodeActionContext(diagnostics=[window]),
                )
            )
            offered = [a for a in offered or [] if a.edit is not None and a.is_preferred]
            await asyncio.sleep(0.2)
        [fix] = offered
        assert "compiler-verified" in fix.title and set(fix.edit.changes) == {kernel.uri}
        fixed = apply_text_edits(kernel.text, fix.edit.changes[kernel.uri])
        assert fixed != kernel.text and "grid=" in fixed
        # The edit applied to the notebook's cell makes it fit: the CLI says so, reading the .ipynb.
        kernel.node["source"] = fixed
        notebook.write(tmp_path / "fixed.ipynb")
        done = run_cli("check", "fixed.ipynb", "--target", "v6e", cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.asyncio
async def test_cells_added_moved_and_removed_carry_the_diagnostics_and_close_clears_them(tmp_path, cache_dir):
    path, where = notebook_project(tmp_path, cache_dir)
    cell_number, line, col = seed_place(where, "in_specs=")
    _, out_line, out_col = seed_place(where, "out_specs=")
    expected = [(line, col, col + 6), (out_line, out_col, out_col + 6)]
    async with running_server(tmp_path, capabilities=NOTEBOOK_CAPABILITIES) as client:
        notebook = NotebookEditor(client, path)
        notebook.open()
        kernel = notebook.cells[cell_number - 1]
        await wait_for(lambda: compiler_tier(notebook.diagnostics(kernel)), what="the verdict on open")

        published = Publishes(client)

        async def shown_on(cell: Cell, change) -> list:
            """What the cells show after `change`, once the estimate for it is in: a
            space typed at the end of `cell` after it, which is told its new version."""
            change()
            last = cell.text.split("\n")
            notebook.edit(
                notebook.cells.index(cell), (len(last) - 1, len(last[-1])), (len(last) - 1, len(last[-1])), " "
            )
            await wait_for(
                lambda: (cell.uri, cell.version) in published.seen,
                timeout=10,
                what="the typed cell told its version after a change of cells",
            )
            found = estimate_tier(notebook.diagnostics(cell))
            assert set(notebook.shown()) == {cell.uri}, notebook.shown()
            return windows(found)

        # Three lines above the kernel's cell, in a new cell: the module moves, the cell's lines do not.
        assert await shown_on(kernel, lambda: notebook.insert(1, "import os\nimport sys\nx = 1")) == expected
        # The kernel's cell dragged above the kernel function's cell (a def may come after its caller).
        at = notebook.cells.index(kernel)
        assert await shown_on(kernel, lambda: notebook.move(at, at - 1)) == expected
        assert await shown_on(kernel, lambda: notebook.remove(1)) == expected
        # Half-typed cells never take the server down: a syntax error, then the cell removed.
        broken = notebook.insert(len(notebook.cells), "def f(:\n    pl.pallas_call(\n")
        notebook.edit(len(notebook.cells) - 1, (1, 0), (1, 4), "((((")
        document = types.TextDocumentIdentifier(broken.uri)
        assert await client.text_document_hover_async(types.HoverParams(document, types.Position(0, 3))) is None
        await client.text_document_code_lens_async(types.CodeLensParams(document))
        await client.text_document_code_action_async(
            types.CodeActionParams(
                document, types.Range(types.Position(0, 0), types.Position(0, 0)), types.CodeActionContext([])
            )
        )
        assert await shown_on(kernel, lambda: notebook.remove(len(notebook.cells) - 1)) == expected
        # The kernel's cell removed: its squiggles go; added back as a new cell: they come on it.
        gone = notebook.remove(notebook.cells.index(kernel))
        await wait_for(
            lambda: gone.uri in client.diagnostics and not client.diagnostics[gone.uri],
            timeout=10,
            what="the removed cell's diagnostics cleared",
        )
        assert not notebook.shown()
        notebook.forget_shown()
        readded = notebook.insert(len(notebook.cells) - 1, kernel.text)
        found = await wait_for(
            lambda: estimate_tier(notebook.diagnostics(readded)), timeout=10, what="estimates on the cell added back"
        )
        assert windows(found) == expected and set(notebook.shown()) == {readded.uri}
        notebook.close()
        await wait_for(
            lambda: readded.uri in client.diagnostics and not client.diagnostics[readded.uri],
            timeout=10,
            what="diagnostics cleared on close",
        )
        assert client._server.returncode is None


UNICODE_LINE = "        in_specs=[pl.BlockSpec((n, m), lambda: (0, 0))],\n"
UNICODE_SPEC = (
    "        # «é» the whole array in one window\n"
    "        in_specs=[pl.BlockSpec(index_map=lambda é𠀀=0: (0, 0), block_shape=(n, m))],\n"
)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "encoding, units",
    [
        (types.PositionEncodingKind.Utf16, lambda text: len(text.encode("utf-16-le")) // 2),
        (types.PositionEncodingKind.Utf8, lambda text: len(text.encode("utf-8"))),
    ],
)
async def test_a_range_after_non_ascii_text_in_a_cell_counts_the_client_units(tmp_path, cache_dir, encoding, units):
    seed = tmp_path / "copy_whole.py"
    seed.write_text(SEED.read_text().replace(UNICODE_LINE, UNICODE_SPEC))
    path, _ = notebook_project(tmp_path, cache_dir, seed)
    seed.unlink()
    source = UNICODE_SPEC.splitlines()[1]
    prefix = source[: source.index("(n, m)")]
    before = units(prefix)  # the client's units before the range
    assert before > len(prefix)  # 𠀀 takes two UTF-16 units (four bytes), é two bytes
    capabilities = attrs.evolve(
        NOTEBOOK_CAPABILITIES, general=types.GeneralClientCapabilities(position_encodings=[encoding])
    )
    async with running_server(tmp_path, capabilities=capabilities) as client:
        notebook = NotebookEditor(client, path)
        notebook.open()
        kernel = next(c for c in notebook.cells if "«é»" in c.text)
        line = kernel.text.split("\n").index(source)
        found = await wait_for(lambda: compiler_tier(notebook.diagnostics(kernel)), what="the verdict on open")
        [window] = [d for d in found if d.code == "VMEM001" and d.range.start.line == line]
        assert (window.range.start.character, window.range.end.character) == (before, before + 6)
        hover = await client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(kernel.uri), types.Position(line, before + 1))
        )
        assert "input 0 window" in hover.contents.value


@pytest.mark.asyncio
async def test_a_client_that_pulls_still_gets_the_cells_pushed_and_may_pull_one(tmp_path, cache_dir):
    """VS Code's client pulls diagnostics only for documents open in a text tab,
    never for a notebook's cells: those are pushed, and a pull on a cell answers too."""
    path, where = notebook_project(tmp_path, cache_dir)
    cell_number, line, col = seed_place(where, "in_specs=")
    async with running_server(
        tmp_path, capabilities=attrs.evolve(PULL_CAPABILITIES, notebook_document=NOTEBOOK_SYNC)
    ) as client:
        notebook = NotebookEditor(client, path)
        notebook.open()
        kernel = notebook.cells[cell_number - 1]
        pushed = await wait_for(lambda: compiler_tier(notebook.diagnostics(kernel)), what="the verdict, pushed")
        pulled = await client.text_document_diagnostic_async(
            types.DocumentDiagnosticParams(types.TextDocumentIdentifier(kernel.uri))
        )
        assert windows(pulled.items) == windows(pushed) and (line, col, col + 6) in windows(pushed)
        other = await client.text_document_diagnostic_async(
            types.DocumentDiagnosticParams(types.TextDocumentIdentifier(notebook.cells[cell_number - 2].uri))
        )
        assert not other.items


@pytest.mark.asyncio
async def test_an_untrusted_folder_gets_estimates_and_no_compile_of_its_notebook(tmp_path, cache_dir):
    path, where = notebook_project(tmp_path, cache_dir)
    directive = line_of(SEED, "# vmem:")
    cell_number, line = where[(SEED.name, directive)]
    async with running_server(tmp_path, capabilities=NOTEBOOK_CAPABILITIES, trusted=False) as client:
        notebook = NotebookEditor(client, path)
        notebook.open()
        kernel = notebook.cells[cell_number - 1]
        [held] = await wait_for(lambda: notebook.diagnostics(kernel), what="the not-run notice")
        assert held.code == "VMEM013" and held.range.start.line == line - 1 and "not a trusted folder" in held.message
        notebook.save()
        await asyncio.sleep(3)
        assert not [m for m in client.log_messages if m.message.startswith("v6e: ")]  # nothing compiled
        assert set(notebook.shown()) == {kernel.uri}


KERNEL_CELL = """def kernel_{n}(x_ref, o_ref):
    o_ref[...] = x_ref[...] + {n}


def call_{n}(x):
    return pl.pallas_call(kernel_{n}, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)"""


@pytest.mark.asyncio
async def test_typing_in_a_cell_tells_that_cell_and_the_cells_whose_diagnostics_changed_only(tmp_path, cache_dir):
    """A notebook of three kernels with no example (VMEM020 on each, from the static
    tier): each keystroke sends one publishDiagnostics, the typed cell's at its new
    version, not one per cell with diagnostics; a cell whose diagnostics left is cleared."""
    (tmp_path / "pyproject.toml").write_text(f'[tool.vmem-lsp]\ntargets = ["v6e"]\ncache-dir = "{cache_dir}"\n')
    path = tmp_path / "nb.ipynb"
    nbformat.write(
        nbformat.v4.new_notebook(
            cells=[
                nbformat.v4.new_markdown_cell("# Three kernels"),
                nbformat.v4.new_code_cell("import jax\nfrom jax.experimental import pallas as pl"),
                *(nbformat.v4.new_code_cell(KERNEL_CELL.format(n=n)) for n in (1, 2, 3)),
            ]
        ),
        str(path),
    )
    async with running_server(
        tmp_path, options={"compileOnOpen": False, "debounceMs": 0}, capabilities=NOTEBOOK_CAPABILITIES
    ) as client:
        notebook = NotebookEditor(client, path)
        notebook.open()
        kernels = notebook.cells[2:]
        unreached = lambda cell: [d.range.start.line for d in notebook.diagnostics(cell) if d.code == "VMEM020"]
        await wait_for(
            lambda: all(unreached(cell) == [5] for cell in kernels), timeout=30, what="VMEM020 on each kernel's cell"
        )
        published = Publishes(client)

        async def told_after(change, cell: Cell) -> list:
            """What was published once `change` is in: the typed `cell` at its version, and the rest."""
            change()
            await wait_for(
                lambda: (cell.uri, cell.version) in published.seen,
                timeout=10,
                what="the typed cell told its new version",
            )
            await asyncio.sleep(0.5)  # anything else this change publishes has come by now
            told, published.seen[:] = list(published.seen), []
            return told

        # A space at the end of the second kernel's cell: its diagnostics are the same, one message.
        second = kernels[1]
        end = (5, len(second.text.split("\n")[5]))
        assert await told_after(lambda: notebook.edit(3, end, end, " "), second) == [(second.uri, second.version)]
        # A line typed at the top of the first kernel's cell: its squiggle moves; every later
        # line of the module moves too, but not within the later cells, which are not told.
        first = kernels[0]
        assert await told_after(lambda: notebook.edit(2, (0, 0), (0, 0), "# typed\n"), first) == [
            (first.uri, first.version)
        ]
        assert unreached(first) == [6] and unreached(second) == [5] and unreached(kernels[2]) == [5]
        # The third kernel's cell removed: only it is told (cleared); then typing in the first tells the first.
        third = notebook.remove(4)
        await wait_for(
            lambda: (third.uri, None) in published.seen or (third.uri, third.version) in published.seen,
            timeout=10,
            what="the removed cell cleared",
        )
        assert not client.diagnostics[third.uri] and [uri for uri, _ in published.seen] == [third.uri]
        published.seen.clear()
        end = (6, len(first.text.split("\n")[6]))
        assert await told_after(lambda: notebook.edit(2, end, end, " "), first) == [(first.uri, first.version)]
        assert set(notebook.shown()) == {first.uri, second.uri}
