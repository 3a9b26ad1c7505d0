"""A bug of ours is said where someone looks; a problem of the user's file is
not. The CLI: stderr and exit 2, with everything else still reported.

The bug is planted from outside the product: tests/data/faults/ goes on
PYTHONPATH, so every Python process the test starts imports its
sitecustomize.py, which makes the locator's _kernel_site raise."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from conftest import EXAMPLES, ROOT

FAULTS = ROOT / "tests" / "data" / "faults"
PLANTED = "IndexError: planted by tests/data/faults/sitecustomize.py"


def with_fault() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(FAULTS), os.environ.get("PYTHONPATH")) if p)}


def test_the_cli_says_an_internal_error_on_stderr_exits_2_and_reports_the_rest(tmp_path):
    shutil.copy(EXAMPLES / "copy_whole.py", tmp_path)
    (tmp_path / "bad_directive.py").write_text("# vmem: f(\n")
    done = subprocess.run([sys.executable, "-m", "vmem_lsp", "check", ".", "--no-compile", "--no-cache",
                           "--target", "v6e", "--format", "json"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=with_fault())
    assert done.returncode == 2, done.stderr
    assert "vmem-lsp: internal error locating the kernels of copy_whole.py:\nTraceback" in done.stderr
    assert PLANTED in done.stderr
    codes = {(d["path"], d["code"]) for d in json.loads(done.stdout)["diagnostics"]}
    assert {("bad_directive.py", "VMEM010"), ("copy_whole.py", "VMEM004")} <= codes
