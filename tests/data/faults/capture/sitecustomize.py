"""A planted bug, for tests/test_jax_compat.py only: with this folder on
PYTHONPATH, every Python process the test starts imports this file, and the
compile worker's capture then fails the way it did on jax 0.7.2 (issue 30),
where GridMapping had no scratch_avals: after the trace, inside vmem-lsp's
own reading of the pallas_call; and the worker's jax "lacks" BlockSpec, a loss. Nothing in vmem_lsp knows of it."""

import vmem_lsp.compile.worker as _worker

_init = _worker.Worker.__init__


def _describe(eqn, provenance):
    raise AttributeError("'GridMapping' object has no attribute 'scratch_avals' (planted)")


def _planted_init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.capture.describe = _describe
    self.compat.lose("spec_origins")  # as if this jax had no BlockSpec to stamp


_worker.Worker.__init__ = _planted_init
