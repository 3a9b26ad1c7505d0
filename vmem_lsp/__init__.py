"""vmem-lsp: TPU VMEM overflows of Pallas kernels, on the BlockSpec lines that cause them.

For autotuners: `vmem_lsp.fits(fn, *args, target=..., **kwargs)`,
`vmem_lsp.prune(fn, args, configs, targets=...)` and `vmem_lsp.rank(fn, args, configs,
target=...)`, the fitting configs fastest first (vmem_lsp/api.py)."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a tuner's type checker sees the API's signatures; at run time they load on first use
    from .api import Ranked, Verdict, fits, prune, rank

__all__ = ["Ranked", "Verdict", "__version__", "fits", "prune", "rank"]

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """The API (fits, prune, rank and their types), imported on first use: `import vmem_lsp` stays light."""
    if name in ("fits", "prune", "rank", "Verdict", "Ranked"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'vmem_lsp' has no attribute {name!r}")
