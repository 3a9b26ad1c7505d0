"""The compiler's cycle estimate from a worker started with --estimate: given
where libtpu can estimate, an error (never a verdict lost) where it aborts."""

from __future__ import annotations

import dataclasses

import pytest
from support import EXAMPLES

from vmem_lsp.compile.backend import estimate_runner
from vmem_lsp.config import Settings
from vmem_lsp.engine import request_for
from vmem_lsp.source.directives import find_examples
from vmem_lsp.versions import installed

pytestmark = pytest.mark.compiler


@pytest.fixture(scope="module")
def estimated():
    """The bundled add on v5e, v6e and v4 (whose DMA model has no estimate: libtpu aborts)."""
    path = str(EXAMPLES / "add_fits.py")
    (example,), _ = find_examples(open(path).read(), path)
    settings = Settings(jobs=1)
    runner = estimate_runner(settings)
    try:
        return [
            (
                chip,
                runner.check(
                    dataclasses.replace(request_for(example, chip, settings), estimate=True), settings.limits()
                ),
            )
            for chip in ("v5e", "v6e", "v4", "v6e")  # v6e again, after v4's abort
        ]
    finally:
        runner.stop()


def test_a_fitting_kernel_gets_the_compilers_cycle_estimate(estimated):
    for chip, result in estimated[:2]:
        (call,) = result.calls
        assert call.fits and call.estimated_cycles and call.estimated_cycles > 1000, (chip, call)
        assert call.no_estimate is None


def test_an_abort_under_the_profile_is_the_requests_error_and_the_worker_comes_back(estimated):
    """v4's worker dies in libtpu; the pool starts another, which estimates v6e again."""
    if installed().get("libtpu") not in ("0.0.42.1", "0.0.50.1"):
        pytest.skip("measured with libtpu 0.0.42.1 and 0.0.50.1")
    (_, v6e), (_, v4), (_, again) = estimated[1:]
    assert v4.error and "signal 6" in v4.error, v4
    assert again.calls and again.calls[0].estimated_cycles == v6e.calls[0].estimated_cycles, again


def test_a_grid_of_no_step_has_no_estimate_and_says_why(tmp_path):
    """A block larger than its array makes a grid of no step: it compiles, and does no work;
    0 cycles would rank it fastest (bench_rank_tuned found it as a ZeroDivisionError)."""
    path = tmp_path / "empty_grid.py"
    path.write_text(
        (EXAMPLES / "matmul.py").read_text()
        + "\n# vmem: matmul(bf16[1024, 1024], bf16[1024, 1024], bm=512, bk=2048, bn=512)\n"
    )
    examples, _ = find_examples(path.read_text(), str(path))
    settings = Settings(jobs=1)
    runner = estimate_runner(settings)
    try:
        request = dataclasses.replace(request_for(examples[-1], "v6e", settings), estimate=True)
        result = runner.check(request, settings.limits())
    finally:
        runner.stop()
    (call,) = result.calls
    assert call.estimated_cycles is None and "no step" in (call.no_estimate or ""), result
