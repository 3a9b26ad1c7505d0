"""The GPU compiler's verdict on `# vmem:` examples, had directly: each example's call jitted
whole and compiled with jax.experimental.topologies for a compile-only CUDA device made from
the target's GpuTargetConfig (vmem_lsp/gpu/targets.py), none of vmem-lsp's worker, capture or
report parser in the way. What tests/test_gpu_corpus.py holds `vmem-lsp check` to.

Run as a child (`python tests/support/gpu_direct.py FOLDER TARGET,...`, JAX_PLATFORMS=cpu: the
CUDA plugin registers without a driver only then); prints one JSON line per example and target:
{"file", "line", "call", "target", "fits", "requested", "available", "error"}."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from support.tiers import COMPILER, starts

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLE = re.compile(r"^# vmem: (?P<call>.+)$")
ARRAY = re.compile(r"\b(?P<dtype>[a-z]+\d*)\[(?P<dims>[\d, ]*)\]")
DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "s32": "int32", "s8": "int8"}
REQUESTED = re.compile(r"requested (\d+), available: (\d+)")


def examples(path: Path) -> list[tuple[int, str]]:
    return [(n, m["call"]) for n, line in enumerate(path.read_text().splitlines(), 1) if (m := EXAMPLE.match(line))]


def compile_example(namespace: dict, call: str, mesh) -> dict:
    """Compile the example's call whole for the mesh's one device: its arrays become
    ShapeDtypeStructs on that device, everything else in the call is as written."""
    import jax
    import numpy as np

    shapes = []

    def placeholder(match: re.Match) -> str:
        dims = tuple(int(d) for d in match["dims"].replace(" ", "").split(",") if d)
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        shapes.append(jax.ShapeDtypeStruct(dims, np.dtype(DTYPES[match["dtype"]]), sharding=sharding))
        return f"__arrays[{len(shapes) - 1}]"

    function = eval(f"lambda *__arrays: {ARRAY.sub(placeholder, call)}", namespace)
    try:
        jax.jit(function).lower(*shapes).compile()
    except Exception as error:  # the compiler's verdict
        said = REQUESTED.search(str(error))
        if said is None:
            return {"fits": False, "requested": None, "available": None, "error": str(error)[:500]}
        return {"fits": False, "requested": int(said[1]), "available": int(said[2]), "error": None}
    return {"fits": True, "requested": None, "available": None, "error": None}


def main(folder: str, targets: str) -> None:
    import runpy

    import jax
    from jax.experimental import topologies

    from vmem_lsp.gpu.targets import gpu

    files = sorted(Path(folder).glob("*.py"))
    namespaces = {path: runpy.run_path(str(path)) for path in files}
    for target in targets.split(","):
        topology = topologies.get_topology_desc(
            platform="cuda", target_config=gpu(target).target_config(), topology="1x1x1"
        )
        mesh = topologies.make_mesh(topology, (1,), ("x",))
        for path in files:
            for line, call in examples(path):
                said = compile_example(namespaces[path], call, mesh)
                record = {"file": path.name, "line": line, "call": call, "target": target, **said}
                print(json.dumps(record), flush=True)
        jax.clear_caches()


@starts(COMPILER)
def direct_verdicts(folder: Path, targets: str, timeout: float = 900) -> list[dict]:
    """Every example of `folder`'s files compiled directly for each of `targets`."""
    done = subprocess.run(
        [sys.executable, __file__, str(folder), targets],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": os.pathsep.join((str(ROOT), str(ROOT / "tests")))},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


if __name__ == "__main__":
    main(*sys.argv[1:])
