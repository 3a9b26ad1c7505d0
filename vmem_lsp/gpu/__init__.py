"""NVIDIA GPUs through XLA's CUDA plugin: one hardware family (family.Family), registered in
families.py. family.py ties its parts together; only the worker process imports worker.py,
compile.py's compiling parts and kernel.py."""
