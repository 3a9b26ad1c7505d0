"""vmem-lsp: TPU VMEM overflows of Pallas kernels, on the BlockSpec lines that cause them."""
__version__ = "0.1.0"
