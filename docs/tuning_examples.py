"""vmem-lsp for autotuners: runnable examples of `vmem_lsp.fits`, `vmem_lsp.prune`, `vmem_lsp.rank` and `vmem_lsp.decide`.

    .venv/bin/python docs/tuning_examples.py

Each example asks about the bundled matmul (examples/matmul.py) with bf16[8192, 8192] inputs,
on chips this machine does not have: the answers come from the TPU compiler (deviceless) and
the layout model, in a worker process. The function is imported there by its file, so it must be
defined at the top level of a module, and this script's own work sits under `__main__`.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from matmul import matmul

import vmem_lsp

X = jax.ShapeDtypeStruct((8192, 8192), jnp.bfloat16)  # or the string "bf16[8192, 8192]"


def plain_loop() -> list[dict]:
    """1. A loop over block sizes: the compiler's verdict for each (cached on disk)."""
    kept = []
    for bm, bk in itertools.product((512, 1024), (512, 1024)):
        verdict = vmem_lsp.fits(matmul, X, X, target="v5e", bm=bm, bk=bk, bn=1024)
        print(
            f"bm={bm} bk={bk}: {'fits' if verdict.fits else 'over'}, {verdict.used / 2**20:.1f} of "
            f"{verdict.limit / 2**20:.0f} MiB ({verdict.decided_by})"
        )
        if verdict.fits:
            kept.append({"bm": bm, "bk": bk, "bn": 1024})
    return kept


def tune_jax_hyperparams() -> dict:
    """2. tune-jax's `hyperparams` (a dict of lists, tried as their product): keep the configs
    that fit on every chip, before tune-jax compiles and times each one."""
    hyperparams = {"bm": [256, 512, 1024], "bk": [512, 1024], "bn": [512, 1024]}
    configs = [dict(zip(hyperparams, values)) for values in itertools.product(*hyperparams.values())]
    fitting = vmem_lsp.prune(matmul, (X, X), configs, targets=("v5e", "v6e"))
    print(f"tune-jax: {len(fitting)} of {len(configs)} configs fit on v5e and v6e")
    return {"configs": fitting}


@dataclasses.dataclass(frozen=True)
class MatmulConfig:
    """3. A tokamax-style config object: a dataclass of block sizes."""

    bm: int
    bk: int
    bn: int


def tokamax_configs() -> list[MatmulConfig]:
    candidates = [MatmulConfig(bm, bk, bn) for bm in (512, 1024) for bk in (512, 1024) for bn in (512, 1024)]
    kept = vmem_lsp.prune(matmul, (X, X), [dataclasses.asdict(c) for c in candidates], targets=("v5e",))
    fitting = [MatmulConfig(**c) for c in kept]
    print(f"tokamax-style: {len(fitting)} of {len(candidates)} configs fit on v5e")
    return fitting


@dataclasses.dataclass
class TritonStyleConfig:
    """4. Triton's `triton.Config` keeps the kernel's keyword arguments in `.kwargs`."""

    kwargs: dict


def early_config_prune(configs, named_args, **kwargs):
    """A `prune_configs_by={"early_config_prune": early_config_prune}` callable: Triton calls it
    with the configs and the kernel's arguments; it returns the configs that fit."""
    inputs = (named_args["x"], named_args["y"])
    kept = vmem_lsp.prune(matmul, inputs, [c.kwargs for c in configs], targets=("v5e",))
    return [c for c in configs if c.kwargs in kept]


def fastest_first() -> list:
    """5. Which of the configs that fit is fastest on v6e, by the compiler's own cycle estimate:
    the roofline's best 3 are estimated (each costs a few compiles' time), fastest first."""
    configs = [{"bm": bm, "bk": 1024, "bn": bn} for bm in (512, 1024, 2048) for bn in (512, 1024)]
    ranked = vmem_lsp.rank(matmul, (X, X), configs, target="v6e", top=3)
    for r in ranked:
        said = f"{r.estimated_cycles:,} cycles, rank {r.rank}" if r.rank else f"no estimate ({r.no_estimate})"
        print(f"rank: {r.config}: {said}")
    best = vmem_lsp.prune(matmul, (X, X), configs, targets="v6e", top=2)  # the two fastest, as rank has them
    print(f"prune(top=2): {best}")
    return ranked


def what_was_skipped() -> list:
    """6. What a tuner skips and why: decide() is prune's verdict on each config, with its reason."""
    configs = [{"bm": bm, "bk": 1024, "bn": 1024} for bm in (512, 1024, 2048)]
    decided = vmem_lsp.decide(matmul, (X, X), configs, targets=("v5e",))
    for d in decided:
        print(f"decide: bm={d.config['bm']}: {'fits' if d.fits else d.why_not}")
    return decided


if __name__ == "__main__":
    plain_loop()
    tune_jax_hyperparams()
    tokamax_configs()
    triton = [TritonStyleConfig({"bm": bm, "bk": 1024, "bn": 1024}) for bm in (256, 512, 1024)]
    kept = early_config_prune(triton, {"x": X, "y": X})
    print(f"Triton-style early_config_prune: kept {[c.kwargs['bm'] for c in kept]} of bm in 256, 512, 1024")
    fastest_first()
    what_was_skipped()
