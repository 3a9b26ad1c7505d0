"""Capture the CLI's text, JSON and SARIF output as golden files (issue 14).

Usage: python scripts/capture_golden.py [OUTDIR]     (default: tests/data/golden/<jax version>)

Runs `python -m vmem_lsp check --target v5e,v6e` in a subprocess, as a user would, on
examples/ and on copies of four of jax's own kernel files, each with an overflowing
`# vmem:` example appended (tests/jax_ops.py): matmul, flash_attention, paged and ragged
paged attention, the ones that compile in seconds. tests/test_golden.py captures again
and compares; re-run this script only when a change of output is intended (or when jax
or libtpu move: versions.txt says which were used), and review the diff of OUTDIR. Each jax
of the tested range has its own folder: jax's kernel files differ between versions, and so do
their verdicts (scripts/check_range.py runs tests/test_golden.py in each); capture with the
Python of that jax's environment.

Each subject is checked three times, JSON first with a fresh cache folder (every kernel
compiled), then text and SARIF, which read that cache: one capture pins both the cold
and the cached path and costs one compile per kernel and target.

What varies between machines and runs is replaced before storing and before comparing,
and nothing else: the paths of the repository, of the temporary folder and of the
site-packages that hold jax; the seconds in the summary (`12.3 s`) and any `*_seconds`
field; vmem-lsp's own version in JSON and in SARIF's tool.driver.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.jax_ops import EXAMPLES, copy_with_example  # noqa: E402

from vmem_lsp import __version__  # noqa: E402

GOLDEN = ROOT / "tests" / "data" / "golden" / version("jax")  # this jax's kernels and verdicts
TARGETS = "v5e,v6e"
FORMATS = {"json": "json", "text": "txt", "sarif": "sarif"}  # in this order: JSON compiles, the others hit the cache
JAX_OPS = (
    "matmul.py",
    "flash_attention.py",
    "paged_attention/paged_attention_kernel.py",
    "ragged_paged_attention/kernel.py",
)
SITE_PACKAGES = Path(importlib.util.find_spec("jax").origin).resolve().parent.parent
COMPILER_ENV = re.compile(r"LIBTPU_INIT_ARGS|XLA_FLAGS|JAX_\w*")  # would change the verdicts: not inherited

SUMMARY_SECONDS = re.compile(r"(\d+ compiled, \d+ cached, )\d+(?:\.\d+)? s\)")
FIELD_SECONDS = re.compile(r'("\w*_seconds": )-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?')
OWN_VERSION = re.compile(r'("version": )"' + re.escape(__version__) + '"')


def normalise(text: str, temporary: Path) -> str:
    """`text` with only what varies between machines and runs replaced."""
    for path, name in ((SITE_PACKAGES, "<site-packages>"), (temporary, "<tmp>"), (ROOT, "<root>")):
        text = text.replace(str(path), name)
    text = SUMMARY_SECONDS.sub(r"\g<1><seconds> s)", text)
    text = FIELD_SECONDS.sub(r'\g<1>"<seconds>"', text)
    return OWN_VERSION.sub(r'\g<1>"<version>"', text)


def versions() -> str:
    return "".join(f"{name} {version(name)}\n" for name in ("jax", "jaxlib", "libtpu"))


def check(paths: list[str], cwd: Path, fmt: str, cache: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not COMPILER_ENV.fullmatch(k)}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "vmem_lsp",
            "check",
            *paths,
            "--target",
            TARGETS,
            "--format",
            fmt,
            "--cache-dir",
            str(cache),
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        env={**env, "PYTHONUNBUFFERED": "1"},
    )


def capture() -> dict[str, str]:
    """{file name: normalised content} of one capture."""
    with tempfile.TemporaryDirectory(prefix="vmem-golden-") as folder:
        temporary = Path(folder).resolve()
        copies = temporary / "jax_ops"
        copies.mkdir()
        for name in JAX_OPS:
            copy_with_example(name, EXAMPLES[name], copies)
        files, status = {"versions.txt": versions()}, []
        for subject, cwd, paths in (("examples", ROOT, ["examples"]), ("jax_ops", copies, ["."])):
            cache = temporary / f"cache-{subject}"
            for fmt, extension in FORMATS.items():
                done = check(paths, cwd, fmt, cache)
                files[f"{subject}.{extension}"] = normalise(done.stdout, temporary)
                status.append(f"{subject} --format {fmt}: exit {done.returncode}\n")
                if done.returncode not in (0, 1):
                    raise RuntimeError(f"check {subject} --format {fmt} exited {done.returncode}:\n{done.stderr}")
        files["exit-status.txt"] = "".join(status)
    return files


def differences(captured: dict[str, str], folder: Path = GOLDEN) -> str:
    """A unified diff, stored -> captured, of every file that differs; '' when none does."""
    stored = {p.name: p.read_text() for p in folder.iterdir()} if folder.is_dir() else {}
    return "".join(
        "".join(
            difflib.unified_diff(
                stored.get(name, "").splitlines(keepends=True),
                captured.get(name, "").splitlines(keepends=True),
                f"stored/{name}",
                f"captured/{name}",
            )
        )
        for name in sorted({*stored, *captured})
    )


def write(captured: dict[str, str], folder: Path = GOLDEN) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.iterdir():
        if stale.name not in captured:
            stale.unlink()
    for name, text in captured.items():
        (folder / name).write_text(text)


if __name__ == "__main__":
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else GOLDEN
    captured = capture()
    changed = differences(captured, folder)
    write(captured, folder)
    print(changed or "no change", end="")
