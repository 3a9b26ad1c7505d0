"""The bundled examples and their non-ASCII twins get the same verdict and the
same fixes, with the real compiler. A twin renames names
to non-ASCII and astral ones of the same length, puts a string statement
with astral text before the tokens of each simple statement's line and a
non-ASCII comment after each line of code; its ASCII twin (test_unicode_edits)
has every token at the same line and code-point column, so diagnostics and
fixes must be equal but for the renamed text. The case that forced the rule is here too:
`BLÖCK = 1024` used in matmul's example is shrunk to `BLÖCK = 512`, as
`BLOCK` is."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest
from support import EXAMPLES
from support.cli import run_cli
from support.fixes import fixes_for
from support.twins import LETTERS, ascii_twin

from vmem_lsp.config import Settings
from vmem_lsp.engine import check

TARGETS = ("v5e",)  # 16 MiB of scoped VMEM: matmul and copy_whole overflow it, add_fits does not
PREFIX = '_ñ = "ß😀𝔘"; '
COMMENT = "  # ü 𝔘ж\x85\u2028 out_shape= in_specs=["  # \x85, U+2028: line ends to str.splitlines

MATMUL = (EXAMPLES / "matmul.py").read_text()


def renamed(*names: str) -> dict[str, str]:
    """Each name with its letters non-ASCII where LETTERS has one: its ASCII twin is the name again."""
    return {name: "".join(LETTERS.get(c, c) for c in name) for name in names}


SOURCES = {
    "copy_whole.py": ((EXAMPLES / "copy_whole.py").read_text(), renamed("copy_whole", "double_kernel", "n")),
    "matmul.py": (MATMUL, renamed("matmul", "matmul_kernel", "bk", "acc_ref", "kk")),
    "add_fits.py": ((EXAMPLES / "add_fits.py").read_text(), renamed("BLOCK_ROWS", "add", "spec", "rows")),
    # Two BlockSpecs on one line: the worker's column of each (a byte column in Python) must find its own.
    "matmul_one_line.py": (
        MATMUL.replace("\n            pl.BlockSpec((bk, bn)", " pl.BlockSpec((bk, bn)"),
        renamed("matmul", "bk", "kk"),
    ),
    # The case that forced the rule: a module constant used in the example.
    "matmul_constant.py": (
        MATMUL.replace("import functools\n", "import functools\n\nBLOCK = 1024\n", 1).replace(
            "bk=1024, bn=1024)", "bk=BLOCK, bn=1024)"
        ),
        {"BLOCK": "BLÖCK"},
    ),
}


def twin(source: str, renames: dict[str, str]) -> str:
    """The non-ASCII twin of an ASCII example."""
    assert source.isascii() and all(len(a) == len(u) for a, u in renames.items())
    edits = []  # (start, end, text) with (line, column) positions
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.string in renames:
            edits.append((token.start, token.end, renames[token.string]))
        elif token.type == tokenize.STRING and token.string[1:-1] in renames:  # static_argnames=["bk"]
            edits.append((token.start, token.end, token.string[0] + renames[token.string[1:-1]] + token.string[0]))
        elif token.type == tokenize.COMMENT and token.string.startswith("# vmem:"):
            renamed = re.sub(r"\w+", lambda m: renames.get(m[0], m[0]), token.string)
            edits.append((token.start, token.end, renamed))
        elif (
            token.type in (tokenize.NEWLINE, tokenize.NL)
            and token.line[: token.start[1]].strip()
            and "#" not in token.line
        ):
            edits.append((token.start, token.start, COMMENT))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.Return)):
            at = (node.lineno, node.col_offset)
            edits.append((at, at, PREFIX))
    lines = source.split("\n")
    for (line, start), (end_line, end), text in sorted(edits, reverse=True):
        assert line == end_line
        lines[line - 1] = lines[line - 1][:start] + text + lines[line - 1][end:]
    return "\n".join(lines)


def verdict_and_fixes(path: Path, worker) -> tuple[list, list]:
    """(diagnostics, fixes) of one file, as comparable data: paths by name."""
    fixes = fixes_for(path, TARGETS, path.parent / "cache", worker=worker)
    outcome = check([str(path)], Settings(targets=TARGETS, cache_dir=str(path.parent / "cache")), worker=worker)
    name = lambda p: Path(p).name
    said = lambda message: message.replace(f"{path.parent}/", "")  # the twins are in two folders
    diagnostics = [
        (name(d.path), d.span, d.code, said(d.message), [(name(r.path), r.span, said(r.message)) for r in d.related])
        for d in sorted(
            outcome.diagnostics, key=lambda d: (d.span.start_line, d.span.start_col, d.code, ascii_twin(d.message))
        )
    ]
    planned = [
        (
            example.line,
            [(f.kind, said(f.title), f.verified, [(name(e.path), e.span, e.new_text) for e in f.edits]) for f in found],
        )
        for example, found in fixes
    ]
    return diagnostics, planned


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_non_ascii_twin_gets_the_same_diagnostics_and_fixes(name, tmp_path, worker):
    source, renames = SOURCES[name]
    made = twin(source, renames)
    assert ascii_twin(made) == ascii_twin(twin(source, {})) != source  # the ASCII twin has the names of the original
    for folder, text in (("twin", made), ("ascii", ascii_twin(made))):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / name).write_text(text)
    diagnostics, fixes = verdict_and_fixes(tmp_path / "twin" / name, worker)
    expected = verdict_and_fixes(tmp_path / "ascii" / name, worker)
    assert (diagnostics and fixes) or name == "add_fits.py"
    assert translated((diagnostics, fixes)) == expected


def translated(value):
    """Every string in a nest of tuples and lists, as in the ASCII twin."""
    if isinstance(value, str):
        return ascii_twin(value)
    if isinstance(value, (tuple, list)):
        return type(value)(translated(v) for v in value)
    return value


def test_a_non_ascii_constant_is_shrunk_where_it_is_written(tmp_path):
    """`--diff` on matmul with `BLÖCK = 1024` in its example offers the shrink
    of that constant, as it does for `BLOCK`, and writes `BLÖCK = 512`."""
    source, renames = SOURCES["matmul_constant.py"]
    path = tmp_path / "matmul.py"
    path.write_text(source.replace("BLOCK", "BLÖCK"))
    done = run_cli("check", str(path), "--target", "v5e", "--diff", "--cache-dir", str(tmp_path / "cache"))
    assert "-BLÖCK = 1024\n+BLÖCK = 512\n" in done.stdout, done.stdout + done.stderr
    assert "Shrink blocks: BLÖCK=512 (module constant)" in done.stderr, done.stderr


def test_noqa_and_diff_count_lines_as_python_does(tmp_path):
    """A comment holding U+2028, \\x85 and \\f (line ends to str.splitlines, not
    to Python or an editor) above the kernel: `# noqa` still silences its own
    line, and `--diff` numbers its hunk by the file's lines and applies."""
    source = (
        (EXAMPLES / "copy_whole.py")
        .read_text()
        .replace("# vmem: copy_whole", "# a comment with \u2028, \x85 and \x0c in it\n# vmem: copy_whole")
        .replace(
            "in_specs=[pl.BlockSpec((n, m), lambda: (0, 0))],",
            "in_specs=[pl.BlockSpec((n, m), lambda: (0, 0))],  # noqa",
        )
    )
    path = tmp_path / "copy_whole.py"
    path.write_text(source)
    lines = source.split("\n")
    number = lambda needle: next(i for i, line in enumerate(lines, 1) if needle in line)
    done = run_cli("check", str(path), "--target", "v6e", "--no-compile")
    squiggled = {int(line.split(":")[1]) for line in done.stdout.splitlines() if " VMEM001 " in line}
    assert squiggled == {number("out_specs=")}, done.stdout
    diff = run_cli("check", str(path), "--target", "v6e", "--diff", "--cache-dir", str(tmp_path / "cache")).stdout
    assert f"@@ -{number('n, m = x.shape')},7 +{number('n, m = x.shape')},8 @@" in diff, diff
    patched = tmp_path / "patched.py"
    subprocess.run(["patch", "-s", "-o", str(patched), str(path)], input=diff, text=True, check=True)
    run_cli("check", str(path), "--target", "v6e", "--fix", "--cache-dir", str(tmp_path / "cache"))
    assert patched.read_text() == path.read_text() != source
