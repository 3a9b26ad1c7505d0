"""TPU chips through libtpu: one hardware family (family.Family), registered in families.py.
family.py ties its parts together; only the worker process imports worker.py and body.py."""
