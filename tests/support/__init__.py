"""What the tests share: the checkout's paths here, and one module a concern
beside them (the CLI as a subprocess, the LSP client, fixes and their edits,
process trees, sshd, a Ray cluster, jax's own kernels, notebooks, the fuzz
properties, the layout model's recorded corpus). Test modules import from
here, never from one another or from conftest.py, which keeps only fixtures
and hooks."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = ROOT / "examples"
KERNELS = ROOT / "tests" / "data" / "kernels"


def line_of(path: Path, needle: str, nth: int = 0) -> int:
    """1-based number of the nth line of `path` that contains `needle`."""
    hits = [i for i, text in enumerate(path.read_text().splitlines(), 1) if needle in text]
    return hits[nth]
