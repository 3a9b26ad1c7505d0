"""vmem-lsp inside the autotuners people run: each adapter drops the configs that cannot fit on
the target before the tuner compiles them, and says which and why.

- tokamax.py: tokamax's Autotuner (`BoundArguments.autotune(autotuner=PruningAutotuner(...))`).
- For a loop of one's own: `vmem_lsp.prune` / `vmem_lsp.decide` (api.py).
"""
