"""Fixes that are known to fit: shrink a block, introduce a grid, raise the
scoped limit, single-buffer a window; each as text edits, verified by the
compiler when one is at hand."""
