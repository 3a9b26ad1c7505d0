"""tpu-inference's tuned table for its quantized matmul, as a `vmem-lsp sweep --table` file.

    python docs/tpu_inference_table.py PATH/tuned_block_sizes.py qmm.py [--chips v6e,v7x] [--first N] > tuned.json
    vmem-lsp sweep --table tuned.json          # exit 1 when an entry overflows or does not compile

tpu-inference (vllm-project/tpu-inference) keeps its tuned block sizes as Python:
`TUNED_BLOCK_SIZES_RAW = {(tpu_version, n_batch, n_out, n_in, x_q_dtype, w_q_dtype):
(batch_block_size, out_block_size, in_block_size[, n_lane_multiplier]), ...}` in
`tpu_inference/kernels/quantized_matmul/tuned_block_sizes.py`. The dict is read from the file's
text (its module imports vllm's logger, so it is not imported), and each entry becomes one check
of the kernel as tpu-inference calls it: bf16 activations [n_batch, n_in], quantized weights
[n_out, n_in], f32 scales [n_out], the activation quantized to x_q_dtype, the entry's blocks
passed as its `tuned_value`. `qmm.py` is your example module, beside the kernel's package:

    import jax.numpy as jnp
    from tpu_inference.kernels.quantized_matmul.kernel import quantized_matmul_kernel
    from tpu_inference.kernels.quantized_matmul.tuned_block_sizes import TunedValue

An entry whose dtype vmem-lsp's shapes cannot spell (float4_e2m1fn weights) is left out and
counted on stderr.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

from vmem_lsp.dtypes import TABLE

CHIPS = {6: "v6e", 7: "v7x", 5: "v5e", 4: "v4"}  # the table's tpu_version (from device_kind) -> vmem-lsp's chip
SPELLING = {d.jax: d.name for d in TABLE}  # a jax dtype name -> how a vmem-lsp shape spells it


def read_table(path: Path, name: str = "TUNED_BLOCK_SIZES_RAW") -> dict:
    """The dict literal assigned to `name` in the file, without importing it."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit(f"{path}: no {name} = {{...}} in it")


def entries(table: dict, module: str, chips: set[str] | None = None) -> tuple[list[dict], int]:
    """The {target, example} entries of `table`, and how many were left out for their dtypes."""
    out, skipped = [], 0
    for (version, n_batch, n_out, n_in, x_q_dtype, w_q_dtype), blocks in table.items():
        target = CHIPS.get(version)
        if target is None or (chips and target not in chips):
            continue
        if w_q_dtype not in SPELLING or x_q_dtype not in SPELLING:
            skipped += 1
            continue
        call = (
            f"quantized_matmul_kernel(bf16[{n_batch}, {n_in}], {SPELLING[w_q_dtype]}[{n_out}, {n_in}], f32[{n_out}], "
            f"x_q_dtype=jnp.{x_q_dtype}, tuned_value=TunedValue{tuple(blocks)})"
        )
        out.append({"target": target, "example": f"{module}:{call}"})
    return out, skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", type=Path, help="tpu-inference's tuned_block_sizes.py")
    parser.add_argument("module", help="your example module that imports the kernel (qmm.py)")
    parser.add_argument("--chips", help="only these chips, comma-separated (v6e, v7x)")
    parser.add_argument("--first", type=int, help="only the first N entries kept")
    args = parser.parse_args(argv)
    chips = set(args.chips.split(",")) if args.chips else None
    found, skipped = entries(read_table(args.table), args.module, chips)
    if skipped:
        print(f"{skipped} entries left out: a dtype vmem-lsp's shapes cannot spell", file=sys.stderr)
    json.dump(found[: args.first] if args.first else found, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
