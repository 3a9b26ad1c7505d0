"""A planted loss, for tests/test_server.py only: with this folder on PYTHONPATH, every
Python process the test starts imports this file, and the compile worker's jax "lacks"
what stamps BlockSpecs with their lines, as jax 0.6/0.7 do (issue 30). Compiling still
works; nothing in vmem_lsp knows of it."""

import vmem_lsp.compile.worker as _worker

_init = _worker.Worker.__init__


def _planted_init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.compat.lose("spec_origins")


_worker.Worker.__init__ = _planted_init
