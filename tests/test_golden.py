"""The CLI's text, JSON and SARIF output, pinned:
examples/ and copies of four jax ops kernels, checked on v5e and v6e by the real
CLI and compiler, against tests/data/golden/<jax version>/, captured by
scripts/capture_golden.py in an environment of that jax (scripts/check_range.py runs
this test in each jax of the tested range). What the script normalises (paths, seconds, vmem-lsp's
version) is all that may differ; everything else is a fact."""

from __future__ import annotations

import sys

import pytest
from support import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from capture_golden import GOLDEN, capture, differences

pytestmark = [pytest.mark.compiler, pytest.mark.range]  # scripts/capture_golden.py runs the CLI

HOW_TO_RECAPTURE = """\
The CLI's output differs from the golden files in {folder} (diff: stored -> now).
If this change of output is not intended, it is a regression: fix the code.
If it is intended (or jax/libtpu moved: see versions.txt), capture again and review and commit
the new files with the change that made them:
    {python} scripts/capture_golden.py
"""


def test_cli_output_matches_the_golden_files():
    assert GOLDEN.is_dir(), (
        f"no golden files for this jax: capture them with {sys.executable} scripts/capture_golden.py"
    )
    changed = differences(capture(), GOLDEN)
    if changed:
        how = HOW_TO_RECAPTURE.format(folder=GOLDEN.relative_to(ROOT), python=sys.executable)
        pytest.fail(how + "\n" + changed, pytrace=False)
