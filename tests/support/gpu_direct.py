"""A direct deviceless compile of one function for a GPU target, without vmem-lsp's worker:
what the tests hold the tool's verdict against. Run as a script (jax in a process of its own, one per target: Mosaic GPU keeps the first
architecture a process compiled for): `python -m support.gpu_direct '{"file", "target", "calls":
[{"function", "args": [[shape, dtype]], "kwargs"}]}'` prints {"fits", "requested",
"available", "error"} as a line of JSON per call, as each is known.

Two things a real GPU would give that a machine without one does not are given as the tool
gives them (and said here): Mosaic GPU checks shared memory against the device it runs on, or
227 KiB without one, so its bound is set to the target's limit; and the CUDA runtime version
that attention_mgpu asks for is the one the target's config names.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the CUDA plugin registers without a driver

REQUEST = re.compile(r"smem_bytes=(\d+) > max_smem_bytes=(\d+)|requested (\d+), available: (\d+)")


def compile_directly(file: str, target: str, calls: list[dict]) -> list[dict]:
    import jax
    import jax.numpy as jnp
    from jax._src.lib import cuda_versions
    from jax.experimental import topologies
    from jax.experimental.mosaic.gpu import core as mosaic_core
    from jax.sharding import SingleDeviceSharding

    from vmem_lsp.gpu.targets import RUNTIME_VERSION, gpu

    config = gpu(target)
    mosaic_core._SMEM_SIZE_BOUND = config.shared_memory_limit
    cuda_versions.cuda_runtime_get_version = lambda: RUNTIME_VERSION[0] * 1000 + RUNTIME_VERSION[1] * 10
    topology = topologies.get_topology_desc(platform="cuda", target_config=config.target_config(), topology="1x1x1")
    device = topology.devices[0]
    spec = importlib.util.spec_from_file_location("kernels_under_test", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sharding = SingleDeviceSharding(device)
    verdicts = []
    for call in calls:
        shapes = [
            jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype), sharding=sharding) for shape, dtype in call["args"]
        ]
        run, kwargs = getattr(module, call["function"]), call["kwargs"]
        try:
            with jax.default_device(device):
                jax.jit(lambda *a: run(*a, **kwargs)).lower(*shapes).compile()
        except Exception as error:
            text = f"{error}\n{error.__cause__ or ''}"
            found = REQUEST.search(text)
            numbers = [int(n) for n in found.groups() if n] if found else [None, None]
            verdicts.append({"fits": False, "requested": numbers[0], "available": numbers[1], "error": text[:2000]})
            print(json.dumps(verdicts[-1]), flush=True)
            continue
        verdicts.append({"fits": True, "requested": None, "available": None, "error": None})
        print(json.dumps(verdicts[-1]), flush=True)  # as it comes: a later compile may end the process
    return verdicts


def in_a_process(file: str, target: str, calls: list[dict]) -> list[dict]:
    """compile_directly in a process of its own (this module run as a script), for a test
    whose own process must not import jax's GPU compiler."""
    import subprocess
    from pathlib import Path

    tests = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "support.gpu_direct", json.dumps({"file": file, "target": target, "calls": calls})],
        capture_output=True,
        text=True,
        cwd=tests,
        env={**os.environ, "PYTHONPATH": str(tests)},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


if __name__ == "__main__":
    compile_directly(**json.loads(sys.argv[1]))  # prints each verdict, a line of JSON, as it comes
