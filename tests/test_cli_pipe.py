"""The CLI under a reader that stops early, as `| head` does: it ends quietly, no traceback."""

from __future__ import annotations

import subprocess
import sys


def test_a_reader_that_closes_the_pipe_gets_no_traceback():
    # The read end is closed before the CLI has started, so its first write meets a closed pipe.
    cli = subprocess.Popen(
        [sys.executable, "-m", "vmem_lsp", "--version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert cli.stdout is not None and cli.stderr is not None
    cli.stdout.close()
    code = cli.wait(timeout=60)
    stderr = cli.stderr.read().decode()
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
    assert code == 141
