"""What every command shares: its exit codes, where its report goes, the
progress bar on a terminal, and vmem-lsp's own log on stderr."""

from __future__ import annotations

import sys
from typing import Any

EXIT_OK, EXIT_FOUND, EXIT_ERROR = 0, 1, 2


def emit(rendered: str, output: str | None) -> None:
    """The report, to --output or stdout."""
    if output:
        with open(output, "w") as f:
            f.write(rendered)
    else:
        sys.stdout.write(rendered)


class ProgressBar:
    """kernels done / total and the current file, on a terminal (tqdm): the
    engine's Progress as the CLI shows it."""

    bar: Any = None  # a tqdm bar while one is shown (tqdm has no types)

    def __init__(self, unit: str = "kernel"):
        self.unit = unit

    def start(self, total: int) -> None:
        """A new bar (a run may have phases: a sweep traces, then compiles)."""
        from tqdm import tqdm

        self.close()
        if total:
            self.bar = tqdm(total=total, unit=self.unit, file=sys.stderr, leave=False, dynamic_ncols=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def line(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)

    def advance(self, where: str) -> None:
        if self.bar is not None:
            self.bar.set_description(where, refresh=False)
            self.bar.update(1)


def progress_bar(unit: str = "kernel") -> ProgressBar | None:
    """A bar when stderr is a terminal; none in CI logs and pipes, where it would be noise."""
    return ProgressBar(unit) if sys.stderr.isatty() else None


def log_to_stderr() -> None:
    """vmem-lsp's own log (not its libraries') at INFO on stderr."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("vmem-lsp %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("vmem_lsp")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
