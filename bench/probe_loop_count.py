"""How the compiler's static cycle estimate counts a loop in a kernel body (issue 43, item 3).

    python bench/probe_loop_count.py [--target v6e]

One kernel, a grid of 4 steps, whose body adds a bf16[512,512] product to an f32 carry in a loop,
compiled deviceless under the static profile flag in several forms:

- static N: the loop's bound is a Python int (N trips, known when it compiles);
- fori: `c < n`, n read from a scalar-prefetch ref (the form Pallas lowers to a counted loop);
- while: `2 * c < n`, the same n (a general while loop, as ragged paged attention's);
- fori x2 / while x2: the same loops with the body done twice a trip.

Prints the cycles of each. What it showed (jax 0.10.2, libtpu 0.0.42.1, v6e, 2026-12-04): the
run-time loops' cycles are the same with the body once or twice a trip and below the static
one-trip loop's: the estimate leaves a loop of run-time length out, body and all.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental import topologies
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import SingleDeviceSharding

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vmem_lsp.tpu.chips import chip
from vmem_lsp.tpu.static_profile import PROFILE_FLAG, parse_static_profile

FORMS = ("static 1", "static 2", "static 8", "fori", "fori x2", "while", "while x2")


def looped(form: str):
    """The kernel's call in `form`."""
    kind, _, how = form.partition(" ")
    twice = how == "x2"

    def kernel(n_ref, x_ref, o_ref):
        bound = int(how) if kind == "static" else n_ref[0]

        def body(carry):
            count, total = carry
            return count + 1, total + jnp.dot(x_ref[...], x_ref[...], preferred_element_type=jnp.float32)

        def cond(carry):
            return 2 * carry[0] < bound if kind == "while" else carry[0] < bound

        step = (lambda c: body(body(c))) if twice else body
        _, total = jax.lax.while_loop(cond, step, (0, jnp.zeros(o_ref.shape, jnp.float32)))
        o_ref[...] = total

    def call(n, x):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((512, 512), jnp.float32),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,
                grid=(4,),
                in_specs=[pl.BlockSpec((512, 512), lambda i, n: (0, 0))],
                out_specs=pl.BlockSpec((512, 512), lambda i, n: (0, 0)),
            ),
        )(n, x)

    return call


def cycles(target: str, form: str, folder: str) -> int:
    """The cycles libtpu's static profile (written to `folder`, which main() gave it) gives `form`."""
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))
    device = topologies.get_topology_desc(platform="tpu", topology_name=chip(target).topology).devices[0]
    placed = SingleDeviceSharding(device)
    args = (
        jax.ShapeDtypeStruct((4,), jnp.int32, sharding=placed),
        jax.ShapeDtypeStruct((512, 512), jnp.bfloat16, sharding=placed),
    )
    with jax.default_device(device):
        jax.jit(looped(form)).lower(*args).compile()
    return sum(op.cycles for name in os.listdir(folder) for op in parse_static_profile(Path(folder, name).read_text()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="v6e")
    parser.add_argument("--forms", default=",".join(FORMS))
    args = parser.parse_args(argv)
    # libtpu reads its flags when the first device is asked for, not when jax is imported.
    folder = tempfile.mkdtemp(prefix="probe-loop-")
    os.environ["LIBTPU_INIT_ARGS"] = f"{os.environ.get('LIBTPU_INIT_ARGS', '')} {PROFILE_FLAG}={folder}".strip()
    os.environ.setdefault("TPU_LOG_DIR", tempfile.mkdtemp(prefix="probe-loop-logs-"))
    jax.config.update("jax_platforms", "cpu")
    print("| loop | cycles |")
    print("|---|---|")
    for form in args.forms.split(","):
        print(f"| {form} | {cycles(args.target, form, folder)} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
