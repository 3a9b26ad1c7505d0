"""A planted bug, for tests/test_internal_errors.py only: with this folder on
PYTHONPATH, Python imports this file at the start of every process (the
server, its parsing process, the CLI), and the locator's _kernel_site then
raises the IndexError of issue 12, whose sites once vanished without a word.
Nothing in vmem_lsp knows of it."""
import vmem_lsp.source.locate as _locate


def _kernel_site(*args, **kwargs):
    raise IndexError("planted by tests/data/faults/sitecustomize.py")


_locate._kernel_site = _kernel_site
