"""The docs a newcomer reads: every relative link of README.md and docs/*.md reaches a file (and,
for a Markdown file, the heading its #anchor names), and README.md opens with the set-up commands
CI runs. Fast: reads files, starts nothing."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CI = ROOT / ".ci" / "run"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```.*?^```[ \t]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)

# What the first command must do on a fresh machine: a venv, vmem-lsp and what running it needs
# (not the test extras: ray, moto, atheris... are no part of checking a kernel), and a first check.
SETUP = "python3 -m venv .venv && .venv/bin/pip install -e '.[tpu]' && .venv/bin/vmem-lsp check examples/"
# The sdist carries the docs and the tests but not .ci/: from an unpacked sdist there is no CI to agree with.
needs_ci = pytest.mark.skipif(not CI.exists(), reason="no .ci/run here (an unpacked sdist)")


def prose(text: str) -> str:
    """The text without fenced blocks and code spans, whose brackets are code, not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: pathlib.Path) -> set[str]:
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        name, n = slug(heading), 1
        while name in found:  # GitHub numbers a repeated heading's anchor: name-1, name-2
            name, n = f"{slug(heading)}-{n}", n + 1
        found.add(name)
    return found


def relative_links(page: pathlib.Path) -> list[str]:
    return [t for t in LINK.findall(prose(page.read_text())) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def first_block(text: str) -> tuple[int, list[str]]:
    """Where the first fenced block starts, and its lines."""
    block = re.search(r"^```\w*\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert block, "README.md has no code block"
    return block.start(), block.group(1).splitlines()


def ci_lines() -> list[str]:
    return [line.strip() for line in CI.read_text().splitlines() if line.strip() and not line.startswith("#")]


def without_quiet(command: str) -> str:
    """A pip command without the flags that only quiet it in CI's log."""
    return re.sub(r" --(quiet|disable-pip-version-check)\b", "", command)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_reach_files_and_headings(page):
    links = relative_links(page)
    broken = []
    for link in links:
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(f"{link}: no file {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{link}: no heading '#{anchor}' in {path.relative_to(ROOT)}")
    assert broken == [], f"{page.relative_to(ROOT)}: broken links"


EXTENSION = ROOT / "editors" / "vscode"


def links_leaving(folder: pathlib.Path, page: pathlib.Path) -> list[str]:
    """The relative links of a page that point outside a folder."""
    return [
        link
        for link in relative_links(page)
        if link.partition("#")[0] and not (page.parent / link.partition("#")[0]).resolve().is_relative_to(folder)
    ]


def test_the_extension_readme_links_only_inside_the_vsix():
    """The extension's README is packed into the .vsix, where a link out of editors/vscode/ has no
    target: `vsce package` refuses it (no repository to rewrite it against), which CI sees only at
    its last step."""
    assert links_leaving(EXTENSION, EXTENSION / "README.md") == []


def test_a_link_out_of_the_extension_is_seen(tmp_path):
    (tmp_path / "ext").mkdir()
    page = tmp_path / "ext" / "README.md"
    page.write_text("[in](LICENSE), [here](#title), [out](../../docs/tool-install.md)\n")
    assert links_leaving(tmp_path / "ext", page) == ["../../docs/tool-install.md"]


def test_every_docs_page_is_linked_from_the_readme_or_another_page():
    reached = {(page.parent / link.partition("#")[0]).resolve() for page in PAGES for link in relative_links(page)}
    orphans = [str(page.relative_to(ROOT)) for page in PAGES[1:] if page.resolve() not in reached]
    assert orphans == []


def test_the_link_checker_sees_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title), [gone](missing.md), [no heading](#nowhere), `[code](not-a-link)`\n")
    assert relative_links(page) == ["#title", "missing.md", "#nowhere"]
    assert anchors(page) == {"title"}
    assert slug("Limits: which step hangs") == "limits-which-step-hangs"
    assert slug("A shared cache: S3, GCS") == "a-shared-cache-s3-gcs"
    assert slug("`vmem-lsp check`") == "vmem-lsp-check"


def test_readme_opens_with_the_two_setup_commands():
    text = README.read_text()
    start, lines = first_block(text)
    assert "\n## " not in text[:start], "the set-up commands come before any section"
    assert len(lines) == 2, lines
    assert lines[0] == SETUP
    install, run = lines[1].split(" && ")
    assert install == ".venv/bin/pip install -e '.[test]'"
    assert run.startswith(".venv/bin/python -m pytest ")


@needs_ci
def test_readme_sets_up_as_ci_does():
    """CI makes the same venv and installs the same test extras as the README's commands."""
    _, (setup, test) = first_block(README.read_text())
    ci = ci_lines()
    assert setup.split(" && ")[0] in ci
    installs = [without_quiet(line) for line in ci if line.startswith(".venv/bin/pip install")]
    assert test.split(" && ")[0] in installs, installs


@needs_ci
def test_readme_test_command_is_the_one_ci_runs():
    _, (_, test) = first_block(README.read_text())
    runs = [line for line in ci_lines() if line.startswith(".venv/bin/python -m pytest")]
    assert runs == [test.split(" && ")[1]]


def unnamed_modules(page: str, package: pathlib.Path) -> list[str]:
    """The package's modules (paths below the package, `compile/backend.py`) that `page` does
    not name; a package's `__init__.py` counts as named when its folder is, e.g. `source/`."""
    missing = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative in page:
            continue
        if path.name == "__init__.py" and (
            path.parent == package or f"{path.parent.relative_to(package).as_posix()}/" in page
        ):
            continue
        # a handler named in the handlers/ row by its file name
        if relative.startswith("server/handlers/") and f"`{path.name}`" in page:
            continue
        missing.append(relative)
    return missing


def test_architecture_names_every_module():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert unnamed_modules(page, ROOT / "vmem_lsp") == []


def test_a_module_left_out_of_the_architecture_is_seen(tmp_path):
    (tmp_path / "compile").mkdir()
    for name in ("__init__.py", "engine.py", "compile/__init__.py", "compile/backend.py", "compile/new.py"):
        (tmp_path / name).write_text("")
    assert unnamed_modules("`engine.py` and `compile/backend.py` in compile/", tmp_path) == ["compile/new.py"]


def test_the_first_checks_output_in_the_readme_is_the_golden_output():
    """README's "The first check" shows what `vmem-lsp check examples/` prints: the golden text
    output of the suite's jax (tests/test_golden.py holds it to a real run), line for line but the
    summary's counts of compiles and its seconds (README shows a first run, the golden a cached one)."""
    from importlib.metadata import version

    text = README.read_text()
    start = text.index("```text\n", text.index("## The first check")) + len("```text\n")
    shown = text[start : text.index("```\n", start)].splitlines()
    golden = (ROOT / "tests" / "data" / "golden" / version("jax") / "examples.txt").read_text().splitlines()
    counts = re.compile(r"\(\d+ compiled, \d+ cached, [^)]* s\)")
    assert [counts.sub("(...)", line) for line in shown] == [counts.sub("(...)", line) for line in golden]
