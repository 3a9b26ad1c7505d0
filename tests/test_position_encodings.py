"""Position encodings at the LSP edge: the server counts
columns in code points and speaks the encoding negotiated at initialize,
chosen as ruff chooses (UTF-8, then UTF-32, then UTF-16). The real server
over stdio, with the real compiler, on a kernel whose lines hold non-ASCII
and astral text before the tokens it squiggles."""

from __future__ import annotations

import ast
import asyncio
import sys

import attrs
import pytest
from lsprotocol import types
from pytest_lsp import make_test_lsp_client
from support.lsp_client import PUSH_CAPABILITIES, Editor, lsp_lines, running_server, wait_for

pytestmark = pytest.mark.asyncio

UTF8, UTF16, UTF32 = (
    types.PositionEncodingKind.Utf8,
    types.PositionEncodingKind.Utf16,
    types.PositionEncodingKind.Utf32,
)

# examples/copy_whole.py with non-ASCII and astral names, strings and comments
# before the tokens the compiler's verdict lands on.
KERNEL = '''"""The seed copy kernel, whole arrays: over v6e's VMEM by 64 KiB. Ünïcödé 𝔘."""
import jax
from jax.experimental import pallas as pl


def double_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


# vmem: cöpy_𐐀(f32[4096, 4096])
def cöpy_𐐀(x):
    ñ, m = x.shape
    ü = "😀𝔘"; spéc_𐐀 = pl.BlockSpec((ñ, m), lambda: (0, 0))  # ü 𝔘
    ü = "ß"; return pl.pallas_call(  # 𝔘 out_shape=
        double_kernel,
        out_shape=jax.ShapeDtypeStruct((ñ, m), x.dtype),
        in_specs=[spéc_𐐀],
        out_specs=pl.BlockSpec((ñ, m), lambda: (0, 0)),  # 😀
    )(x)
'''


def units(text: str, encoding: str) -> int:
    """How many code units of `encoding` the text takes."""
    if encoding == UTF8:
        return len(text.encode("utf-8"))
    return len(text.encode("utf-16-le")) // 2 if encoding == UTF16 else len(text)


def to_index(text: str, position: types.Position, encoding: str) -> int:
    """The string index of a position in the client's units, as an editor finds it."""
    lines = lsp_lines(text)
    start = sum(len(line) + 1 for line in lines[: position.line])
    line, count = lines[position.line], 0
    for index, char in enumerate(line):
        if count >= position.character:
            return start + index
        count += units(char, encoding)
    assert count == position.character, (line, position)  # never inside a character
    return start + len(line)


def at(text: str, needle: str, line_holding: str, encoding: str) -> types.Range:
    """The range of `needle` on the line that holds `line_holding`, in the client's units."""
    number, line = next((i, line) for i, line in enumerate(lsp_lines(text)) if line_holding in line)
    column = line.index(needle, line.index(line_holding))
    return types.Range(
        types.Position(number, units(line[:column], encoding)),
        types.Position(number, units(line[: column + len(needle)], encoding)),
    )


def apply_text_edits(text: str, edits: list[types.TextEdit], encoding: str) -> str:
    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = (
            text[: to_index(text, edit.range.start, encoding)]
            + edit.new_text
            + text[to_index(text, edit.range.end, encoding) :]
        )
    return text


async def quick_fixes(client, uri: str, diagnostics: list[types.Diagnostic]) -> list[types.CodeAction]:
    """The code actions on a diagnostic, once the fix search has found some."""
    for _ in range(1200):
        actions = await client.text_document_code_action_async(
            types.CodeActionParams(
                types.TextDocumentIdentifier(uri),
                diagnostics[0].range,
                types.CodeActionContext(diagnostics=diagnostics),
            )
        )
        if actions:
            return actions
        await asyncio.sleep(0.2)
    raise AssertionError("no quick fix offered")


def with_encodings(*offered: str) -> types.ClientCapabilities:
    return attrs.evolve(PUSH_CAPABILITIES, general=types.GeneralClientCapabilities(position_encodings=list(offered)))


@pytest.mark.parametrize(
    "offered, chosen",
    [
        ((), UTF16),
        ((UTF16,), UTF16),
        ((UTF16, UTF32), UTF32),
        ((UTF16, UTF32, UTF8), UTF8),
        ((UTF8, UTF16), UTF8),
        (("utf-7", UTF32), UTF32),
    ],
)
async def test_the_encoding_is_chosen_as_ruff_chooses(offered, chosen, tmp_path):
    client = make_test_lsp_client()
    await client.start_io(sys.executable, "-m", "vmem_lsp", "serve", cwd=str(tmp_path))
    capabilities = with_encodings(*offered) if offered else PUSH_CAPABILITIES
    result = await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities,
            root_uri=tmp_path.as_uri(),
            initialization_options={"compile_on_open": False, "compile_on_save": False},
        )
    )
    await client.shutdown_session()
    assert result.capabilities.position_encoding == chosen


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One compile cache for the three clients: the kernel is compiled once."""
    return tmp_path_factory.mktemp("cache")


@pytest.mark.parametrize("encoding", [UTF8, UTF16, UTF32])
async def test_ranges_and_edits_in_the_clients_units_on_non_ascii_lines(encoding, tmp_path, cache):
    (tmp_path / "pyproject.toml").write_text(f'[tool.vmem-lsp]\ntargets = ["v6e"]\ncache-dir = "{cache}"\n')
    path = tmp_path / "kernel.py"
    path.write_text(KERNEL)
    async with running_server(tmp_path, capabilities=with_encodings(encoding, UTF16)) as client:
        editor = Editor(client, path)
        editor.open()
        found = await wait_for(
            lambda: (d := editor.diagnostics()) and any(x.data.get("tier") == "compiler" for x in d) and d,
            what="the compiler's diagnostics",
        )
        text = editor.text
        windows = sorted((d.range for d in found if d.code == "VMEM001"), key=lambda r: r.start.line)
        assert windows == [at(text, "(ñ, m)", "spéc_𐐀 = ", encoding), at(text, "(ñ, m)", "out_specs=", encoding)]
        [total] = [d for d in found if d.code == "VMEM002"]
        assert total.range == at(text, "pallas_call", "return pl.pallas_call(", encoding)
        example = at(text, "cöpy_𐐀(f32[4096, 4096])", "# vmem: ", encoding)
        related = [r.location.range for r in total.related_information]
        assert example in related and all(r in [*windows, example] for r in related)

        # Inlay hints: after each block shape and at the end of the pallas_call line.
        hints = await client.text_document_inlay_hint_async(
            types.InlayHintParams(
                types.TextDocumentIdentifier(editor.uri), types.Range(types.Position(0, 0), types.Position(40, 0))
            )
        )
        line_end = at(text, "# 𝔘 out_shape=", "return pl.pallas_call(", encoding).end
        assert sorted((h.position.line, h.position.character) for h in hints) == sorted(
            (p.line, p.character) for p in [*(w.end for w in windows), line_end]
        )

        # The quick fix (a grid), applied in the client's units: the same text in every encoding.
        actions = await quick_fixes(client, editor.uri, [d for d in found if d.range == windows[0]])
        fixed = apply_text_edits(text, actions[0].edit.changes[editor.uri], encoding)
        assert "grid=(" in fixed and 'ü = "😀𝔘"; spéc_𐐀 = pl.BlockSpec((' in fixed
        ast.parse(fixed)

        # didChange in the client's units on the astral lines: the server's text
        # follows, so its estimate squiggles the new block shape, and the hints
        # sit at the new line ends.
        editor.version += 1
        changes = [
            (at(text, "(ñ, m)", "spéc_𐐀 = ", encoding), "(m, ñ)"),
            (at(text, "# 𝔘 out_shape=", "return pl.pallas_call(", encoding), "# 😀 é 𝔘"),
        ]
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                types.VersionedTextDocumentIdentifier(version=editor.version, uri=editor.uri),
                [types.TextDocumentContentChangePartial(range=r, text=new) for r, new in changes],
            )
        )
        editor.text = text = apply_text_edits(text, [types.TextEdit(r, new) for r, new in changes], encoding)
        moved = await wait_for(
            lambda: (d := editor.diagnostics()) and all(x.data.get("tier") == "estimate" for x in d) and d,
            timeout=30,
            what="estimates after the edit",
        )
        assert at(text, "(m, ñ)", "spéc_𐐀 = ", encoding) in [d.range for d in moved if d.code == "VMEM001"]
        hints = await client.text_document_inlay_hint_async(
            types.InlayHintParams(
                types.TextDocumentIdentifier(editor.uri), types.Range(types.Position(0, 0), types.Position(40, 0))
            )
        )
        assert at(text, "# 😀 é 𝔘", "return pl.pallas_call(", encoding).end in [h.position for h in hints]
