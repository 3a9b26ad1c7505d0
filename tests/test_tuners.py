"""vmem-lsp inside tokamax's autotuner (vmem_lsp/tuners/tokamax.py): the real tokamax from PyPI, in
an environment of its own (jax 0.12, Python 3.12, made once and kept: support/old_compilers.py),
driven as a user drives it, and what it skipped compiled directly to see that it could not fit."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
import tomllib

import pytest
from support import ROOT
from support.cli import own_libtpu
from support.old_compilers import old_compiler

TOKAMAX = "tokamax==0.0.12"
JAX = "0.12.0.1"  # tokamax's TPU ops want jax >= 0.9.2; 0.12 is the newest the project supports
SHAPE = "8192,4096,4096,8"  # lhs bf16[8192, 4096], rhs bf16[8, 4096, 4096]: tokamax's space overflows v5e often


def runtime_dependencies() -> tuple[str, ...]:
    """vmem-lsp's own requirements but jax and libtpu (the environment's jax[tpu] pins those):
    the tuner imports vmem-lsp from this checkout (PYTHONPATH), not from an install."""
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return tuple(d for d in listed if re.match(r"[\w.-]+", d)[0] not in ("jax", "libtpu"))  # type: ignore[index]


@pytest.fixture(scope="module")
def tokamax_python() -> str:
    return str(old_compiler(JAX, python=(3, 12), packages=(TOKAMAX, *runtime_dependencies())))


def run_in(python: str, *args: str, cwd=None, timeout: float = 1200) -> subprocess.CompletedProcess:
    """A Python of the tokamax environment, with this checkout's vmem_lsp importable."""
    env = {**own_libtpu(), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    return subprocess.run([python, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


TUNE = """
import json, random, sys
import jax, jax.numpy as jnp
from tokamax._src.ops.ragged_dot import pallas_mosaic_tpu
from vmem_lsp.tuners.tokamax import DoesNotFit, PruningAutotuner

def main():
    m, k, n, g = (int(x) for x in sys.argv[1].split(","))
    lhs, rhs = jax.ShapeDtypeStruct((m, k), jnp.bfloat16), jax.ShapeDtypeStruct((g, k, n), jnp.bfloat16)
    ba = pallas_mosaic_tpu.PallasMosaicTpuRaggedDot().bind(lhs, rhs, group_sizes=jax.ShapeDtypeStruct((g,), jnp.int32))
    # tokamax's own configs for this call, a sample of them: the test's time, not the adapter's limit
    configs = set(random.Random(0).sample(sorted(ba.autotuning_configs, key=repr), int(sys.argv[2])))
    data = ba.autotune(configs, autotuner=PruningAutotuner(targets=sys.argv[3]), cache_results=False)  # the one line
    print(json.dumps([
        {"knobs": [c.tile_m, c.tile_k, c.tile_n, c.input_buffer_count], "result": type(r).__name__, "said": str(r)[:300]}
        for c, r in data.items()
    ]))

if __name__ == "__main__":
    main()
"""


def test_tokamax_autotune_with_one_line_skips_what_cannot_fit_and_says_why(tokamax_python, tmp_path):
    """`ba.autotune(configs, autotuner=PruningAutotuner(targets="v5e"))`: every config is in tokamax's
    result, the skipped ones as DoesNotFit with vmem-lsp's reason, the others as tokamax's own outcome
    (on this machine, no TPU: tokamax's "Not supported on cpu"); each skipped config on the frontier
    (none smaller skipped) does not fit when compiled directly for v5e, and nothing kept on the
    other edge overflows."""
    (tmp_path / "tune.py").write_text(TUNE)
    done = run_in(tokamax_python, "tune.py", SHAPE, "48", "v5e", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == 48
    skipped = [r for r in results if r["result"] == "DoesNotFit"]
    assert skipped and len(skipped) < len(results), results
    assert all(r["said"].startswith("skipped by vmem-lsp: v5e: ") for r in skipped), skipped
    assert all("Not supported on cpu" in r["said"] for r in results if r["result"] != "DoesNotFit")
    # held to the compiler: the frontier of both sides compiled directly, no vmem-lsp in the way
    frontier = compile_frontier(
        tokamax_python,
        tmp_path,
        [r["knobs"] for r in skipped],
        [r["knobs"] for r in results if r["result"] != "DoesNotFit"],
    )
    assert frontier["pruned_compiled"] > 0 and frontier["kept_compiled"] > 0
    assert frontier["pruning_errors"] == [], frontier
    assert frontier["kept_but_over"] == [], frontier


FRONTIER = """
import json, sys
from bench_tuners import bound, compile_directly, frontier
from tokamax._src.ops.ragged_dot import pallas_mosaic_tpu

def main():
    shape, target, pruned, kept = json.loads(sys.stdin.read())
    sys.argv[1:] = []  # tokamax reads absl flags
    ba = bound(tuple(shape))
    config = lambda knobs: pallas_mosaic_tpu.Config(tile_m=knobs[0], tile_k=knobs[1], tile_n=knobs[2], input_buffer_count=knobs[3])
    pruned, kept = [config(k) for k in pruned], [config(k) for k in kept]
    low, high = frontier(pruned, smallest=True), frontier(kept, smallest=False)
    wrong = [[c.tile_m, c.tile_k, c.tile_n, c.input_buffer_count, why] for c in low for fits, _, why in [compile_directly(ba, c, target)] if fits is not False]
    over = [[c.tile_m, c.tile_k, c.tile_n, c.input_buffer_count] for c in high if compile_directly(ba, c, target)[0] is False]
    print(json.dumps({"pruned_compiled": len(low), "kept_compiled": len(high), "pruning_errors": wrong, "kept_but_over": over}))

if __name__ == "__main__":
    main()
"""


def compile_frontier(python: str, folder, pruned: list, kept: list, target: str = "v5e") -> dict:
    """Each pruned config no smaller pruned one is below, and each kept one no larger kept one is
    above, compiled directly (bench/bench_tuners.compile_directly: jax.jit(...).compile() on the
    deviceless chip)."""
    (folder / "frontier.py").write_text(FRONTIER)
    env = {**own_libtpu(), "PYTHONPATH": os.pathsep.join((str(ROOT), str(ROOT / "bench")))}
    done = subprocess.run(
        [python, "frontier.py"],
        input=json.dumps([[int(x) for x in SHAPE.split(",")], target, pruned, kept]),
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_factory_that_is_not_a_tokamax_op_keeps_every_config_and_says_so(tokamax_python, tmp_path):
    """What the adapter cannot send to vmem-lsp's worker it does not judge: all kept, a warning."""
    (tmp_path / "own.py").write_text(
        textwrap.dedent(
            """
            import logging
            from vmem_lsp.tuners.tokamax import PruningAutotuner
            logging.basicConfig(level=logging.INFO)
            skipped = PruningAutotuner(targets="v5e").skipped(lambda config: (lambda x: x * config), {1, 2, 3}, 1.0)
            print(len(skipped))
            """
        )
    )
    done = run_in(tokamax_python, "own.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "0"
    assert "configs not checked, all kept: the factory makes a function, not a tokamax op" in done.stderr


EDGE = """
import json, sys
from bench_tuners import bound, compile_directly
from tokamax._src.ops.ragged_dot import pallas_mosaic_tpu
from vmem_lsp.tuners.tokamax import PruningAutotuner

def main():
    sys.argv[1:] = []  # tokamax reads absl flags
    ba = bound((8192, 4096, 14336, 8))
    configs = [pallas_mosaic_tpu.Config(tile_m=m, tile_k=k, tile_n=n, input_buffer_count=b) for m, k, n, b in
               ((128, 4096, 1792, 3), (512, 4096, 896, 4))]
    skipped = PruningAutotuner(targets="v7x").skipped(lambda c: ba.op.replace(config=c), set(configs), *ba.args, **ba.kwargs)
    print(json.dumps({"skipped": [str(s) for s in skipped.values()], "direct": [compile_directly(ba, c, "v7x")[0] for c in configs]}))

if __name__ == "__main__":
    main()
"""


def test_a_pipeline_whose_buffers_the_compiler_sizes_below_the_model_is_compiled_not_pruned(tokamax_python, tmp_path):
    """tokamax's ragged_dot on a Mixtral shape (k 4096 in one step), v7x: the layout model's windows
    come to 32.75M and 33.50M of 32.00M, the compiler's to 31.88M and 31.75M (it fits). The model
    must not prune them on its windows alone: a pipeline's are measured over by up to 6.7% on v7x.
    (bench_tuners found both among 334 pruned, with its frontier compiled directly.)"""
    (tmp_path / "edge.py").write_text(EDGE)
    env = {**own_libtpu(), "PYTHONPATH": os.pathsep.join((str(ROOT), str(ROOT / "bench")))}
    done = subprocess.run(
        [tokamax_python, "edge.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["direct"] == [True, True]  # the compiler takes both
    assert found["skipped"] == [], found
