"""The language server: a thin LSP layer over the check pipeline."""
