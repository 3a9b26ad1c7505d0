"""What `check` writes into the files it checked: --fix (the best
compiler-verified fix of each overflowing example), --diff (the same as a
unified diff, nothing written) and --add-examples (`# vmem:` templates)."""

from __future__ import annotations

import os
import sys

from .common import EXIT_OK


def add_examples(outcome, settings) -> int:
    """--add-examples: each template on a new line above its function, as
    `ruff --add-noqa` writes its comments; what was written goes to stderr."""
    from .. import render
    from ..engine import SourceFiles, example_templates
    from ..render import display_path
    from ..source.model import Span, TextEdit

    sources = outcome.sources or SourceFiles()
    by_path: dict = {}
    for template in example_templates(outcome, settings):
        by_path.setdefault(template.path, []).append(template)
    for path, templates in sorted(by_path.items()):
        edits = [TextEdit(path, Span(t.line, 0, t.line, 0), t.directive) for t in templates]
        text = sources.text(path)
        problem = "it could not be read when it was checked" if text is None else write_edits(path, text, edits)
        if problem is not None:
            print(f"{display_path(path)}: not written: {problem}", file=sys.stderr)
            continue
        for t in templates:
            found = f" (shapes from {t.found_in})" if t.found_in else " (fill in the shapes)" if t.unfinished else ""
            print(f"{render.at(path, t.line)}: added # vmem: {t.call}{found}", file=sys.stderr)
    count = sum(len(t) for t in by_path.values())
    print(f"{count} example{'s' * (count != 1)} added", file=sys.stderr)
    return EXIT_OK


def fix_files(outcome, settings, worker, use_cache: bool, write: bool) -> int:
    """Find fixes for the overflowing examples; write them (--fix) or print
    them as a diff (--diff). Returns how many files change."""
    from .. import render
    from ..engine import SourceFiles, find_fixes

    edits_by_path: dict = {}
    for example, fixes in find_fixes(outcome, settings, worker, use_cache):
        where = render.at(example.path, example.line)
        best = next((f for f in fixes if f.verified), None)
        if best is None:
            print(
                f"{where}: no compiler-verified fix found"
                + (f" ({len(fixes)} estimated: {fixes[0].title})" if fixes else ""),
                file=sys.stderr,
            )
            continue
        print(f"{where}: {'fixed' if write else 'would fix'}: {best.title} [{best.compiles} compiles]", file=sys.stderr)
        for edit in best.edits:
            edits_by_path.setdefault(edit.path, []).append(edit)
    return apply_fixes(edits_by_path, outcome.sources or SourceFiles(), write)


def apply_fixes(edits_by_path: dict, sources, write: bool) -> int:
    """Each file's edits written (`write`) or printed as a unified diff, against
    the text the check read (`sources`, an engine.SourceFiles). A file whose text
    could not be read is left alone and said so: there is nothing to diff or to
    compare the disk with. Returns how many files change."""
    from ..fixes.plan import unified_diff
    from ..render import display_path
    from ..source.text import apply_edits

    changed = 0
    for path, edits in sorted(edits_by_path.items()):
        before = sources.text(path)
        if before is None:
            print(f"{display_path(path)}: not fixed: it could not be read when it was checked", file=sys.stderr)
            continue
        changed += 1
        if not write:
            notebook = sources.notebook(path)
            for label, old, new in (
                notebook.edited_cells(edits) if notebook else [("", before, apply_edits(before, edits))]
            ):
                sys.stdout.write(unified_diff(path, old, new, display_path(path) + label))
        elif (problem := write_edits(path, before, edits)) is not None:
            print(f"{display_path(path)}: not fixed: {problem}", file=sys.stderr)
    return changed


def write_edits(path: str, checked: str, edits: list) -> str | None:
    """Apply edits to the file on disk, keeping its line ends, all or nothing
    (a temporary file renamed over it). Refuses when the file no longer holds
    the text that was checked. Returns why it did not write, or None."""
    import shutil
    import tempfile

    from ..fixes.edits import in_line_endings
    from ..source.notebook import NotebookError, is_notebook, read_notebook
    from ..source.text import apply_edits

    try:
        with open(path, encoding="utf-8", newline="") as f:
            raw = f.read()
    except (OSError, UnicodeDecodeError) as error:
        return f"cannot read it again ({error})"
    if is_notebook(path):
        try:
            notebook = read_notebook(raw, path)
            if notebook.module != checked:
                return "it changed on disk while fixes were searched; run the check again"
            after = notebook.apply_edits(edits)
        except NotebookError as error:
            return str(error)
    else:
        if raw.replace("\r\n", "\n").replace("\r", "\n") != checked:
            return "it changed on disk while fixes were searched; run the check again"
        if "\r" in raw.replace("\r\n", ""):
            return "it has lone \\r line ends, which fixes do not edit"
        after = apply_edits(raw, in_line_endings(edits, raw))
    folder = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile(
        "w",
        encoding="utf-8",
        newline="",
        dir=folder,
        delete=False,
        prefix=".vmem-fix-",
        suffix=os.path.splitext(path)[1],
    ) as temporary:
        temporary.write(after)
    try:
        shutil.copymode(path, temporary.name)
        os.replace(temporary.name, path)
    except OSError as error:
        os.unlink(temporary.name)
        return f"cannot replace it ({error})"
    return None
