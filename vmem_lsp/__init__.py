"""vmem-lsp: TPU VMEM overflows of Pallas kernels, on the BlockSpec lines that cause them.

For autotuners: `vmem_lsp.fits(fn, *args, target=..., **kwargs)` and
`vmem_lsp.prune(fn, args, configs, targets=...)` (vmem_lsp/api.py)."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """fits, prune and Verdict, imported on first use: `import vmem_lsp` stays light."""
    if name in ("fits", "prune", "Verdict"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'vmem_lsp' has no attribute {name!r}")
