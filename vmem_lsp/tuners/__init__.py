"""vmem-lsp inside the autotuners people run: each adapter drops the configs that cannot fit on
the target before the tuner compiles them, and says which and why.

- tokamax.py: tokamax's Autotuner (`BoundArguments.autotune(autotuner=PruningAutotuner(...))`).
- filter.py: FitFilter, for tuners that propose one config at a time (Optuna): the partial order
  first, vmem-lsp for the rest.
- For a list of configs of one's own: `vmem_lsp.prune` / `vmem_lsp.decide` (api.py).
"""
