"""A direct deviceless compile for a TPU chip, without vmem-lsp's worker: what the tests hold the
tool's figures against. The caller's code (`setup`) makes `run` (a function) and `args` (its
ShapeDtypeStructs, placed with `sharding`) for the chip's first device; `run` is jitted whole and
compiled in a process of its own, which prints "fits" or the compiler's error."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

HEADER = """
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding
from vmem_lsp.tpu.chips import chip
device = topologies.get_topology_desc(platform="tpu", topology_name=chip({target!r}).topology).devices[0]
sharding = SingleDeviceSharding(device)
"""

TAIL = """
try:
    jax.jit(run).lower(*args).compile()
    print("fits")
except Exception as error:
    print(error)
"""


def module_from(name: str, path) -> str:
    """Setup lines that import the file at `path` as the module `name` (a test kernel, not a package)."""
    return (
        f"import importlib.util\n"
        f"_spec = importlib.util.spec_from_file_location({name!r}, {str(path)!r})\n"
        f"{name} = importlib.util.module_from_spec(_spec)\n"
        f"_spec.loader.exec_module({name})\n"
    )


def compile_directly(target: str, setup: str, modules: dict | None = None) -> str:
    """The compiler's words on `run(*args)` for `target`: "fits", or its error. `modules`: name ->
    path of test kernels `setup` uses, imported first."""
    imports = "".join(module_from(name, path) for name, path in (modules or {}).items())
    script = HEADER.format(target=target) + imports + textwrap.dedent(setup) + TAIL
    # As the worker does: beside other libtpu processes (pytest -n 2, a worker), not refused by its lockfile.
    env = {**os.environ, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
