"""vmem-lsp: TPU VMEM overflows of Pallas kernels, on the BlockSpec lines that cause them.

For autotuners: `vmem_lsp.fits(fn, *args, target=..., **kwargs)`,
`vmem_lsp.prune(fn, args, configs, targets=...)` (`vmem_lsp.decide`: each config with why) and
`vmem_lsp.rank(fn, args, configs, target=...)`, the fitting configs fastest first (vmem_lsp/api.py);
tokamax's autotuner: vmem_lsp/tuners/tokamax.py."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a tuner's type checker sees the API's signatures; at run time they load on first use
    from .api import Decided, Ranked, Verdict, decide, fits, prune, rank

__all__ = ["Decided", "Ranked", "Verdict", "__version__", "decide", "fits", "prune", "rank"]

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """The API (fits, prune, rank and their types), imported on first use: `import vmem_lsp` stays light."""
    if name in ("fits", "prune", "decide", "rank", "Verdict", "Ranked", "Decided"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'vmem_lsp' has no attribute {name!r}")
