"""Which kernel family a corpus case belongs to, and whether the layout model saw it.

No jax here: the harness's `--from` path and the tests read recorded results with it.

A family is one kind of kernel (copy, tiled matmul, flash attention, ...). The case id's
prefix decides it, so records made before families were recorded get one too.

The model's constants are fitted by hand, not by code: SPILL_SHARE, NO_SPILL_UP_TO and
attention_scores_bytes in vmem_lsp/tpu/layout.py were read off the compiler's reports of the
families their docstrings cite. Every family recorded on 2026-11-29 (the corpus the
model was written against) was *seen*: its disagreements were read, and the structural
rules (tiles, buffers, memory spaces) cite copy, buffering, scratch and space cases.
The families added after (HELD_OUT) were not: vmem_lsp/ was not changed after their
first run, so their figures are the model's agreement on kernels it never saw.

Issue 31 added kernels whose body makes large temporaries (BODY_TEMPORARIES). The live-value
rule's two shares were read off router, normalize, mask and reduce (elementwise shows what counts
nothing); scan and sort are held out (BODY_HELD_OUT): no constant was read off them, though their first run was
printed beside the others' while the rule was looked for (bench/MODEL.md says so).
"""

from __future__ import annotations

# (id prefix, family), longest prefix first where prefixes overlap.
PREFIXES = (
    ("copy-", "copy"),
    ("buffering-", "buffering"),
    ("large-", "large"),
    ("scratch-", "scratch"),
    ("any-dma-", "space"),
    ("smem-operand-", "space"),
    ("smem-scratch-", "space"),
    ("prefetch-", "space"),
    ("alias-", "space"),
    ("matmul-", "matmul"),
    ("rowsum-", "rowsum"),
    ("flash-", "flash"),
    ("jaxmatmul-", "jaxmatmul"),
    ("gmm-", "gmm"),
    # added for held-out measurement (issue 15 item 7)
    ("pipeline-", "pipeline"),
    ("qmatmul-", "quant_matmul"),
    ("paged-", "paged_attention"),
    ("ragged-", "paged_attention"),
    ("bsmm-", "sparse_matmul"),
    ("manualdma-", "manual_dma"),
    # body temporaries (issue 31): values of the kernel body that no spec names
    ("router-", "router"),
    ("softmax-", "normalize"),
    ("layernorm-", "normalize"),
    ("rmsnorm-", "normalize"),
    ("mask-", "mask"),
    ("reduce-", "reduce"),
    ("chain-", "elementwise"),
    ("scan-", "scan"),
    ("sort-", "sort"),
)

# What each constant of the model was read off (its docstring's citations in vmem_lsp/tpu/layout.py).
FITTED_ON = {
    "matmul": "SPILL_SHARE, NO_SPILL_UP_TO (matmul-bf16-{512,1024,2048}^3), accumulator_bytes (matmul-s8/f32-*)",
    "jaxmatmul": "NO_SPILL_UP_TO (jaxmatmul-bf16-512x512x512)",
    "flash": "attention_scores_bytes (flash-{bf16,f32}-b{256..2048})",
    # Held out at first (98.9% on v4, its one miss warned); the miss then taught accumulator_bytes to read
    # the windows an emit_pipeline brings in, so the family is no longer held out.
    "pipeline": "accumulator_bytes over pipeline_in windows (pipeline-matmul-bf16-1024x1024x1024)",
    # Body temporaries (issue 31): LIVE_SPILL_LEAST and LIVE_SPILL_MOST, the least and most share of
    # the live peak (capture.live_values) that the compiler spilled, read off these four families;
    # elementwise chains and iota masks (no whole-value op) are why loads and streams count nothing.
    "router": "LIVE_SPILL_MOST (router-grouped-bf16-e256-t256-h2048)",
    "normalize": "LIVE_SPILL_LEAST range, RELOADED (rmsnorm-f32-*: a loaded x spills nothing)",
    "mask": "LIVE_SPILL_LEAST (mask-bandmax-f32-b1024x1024), WHOLE_VALUE_OPS (mask-causal-*: none, no spill)",
    "reduce": "LIVE_SPILL_LEAST range (reduce-center-bf16-*, reduce-absmax-bf16-*)",
    "elementwise": "WHOLE_VALUE_OPS (chain-*: 8 MiB elementwise chains spill nothing)",
}
# Seen when the rules were written (in the 2026-11-29 corpus), but no constant is fitted on them.
SEEN = ("copy", "buffering", "large", "scratch", "space", "rowsum", "gmm")
HELD_OUT = ("quant_matmul", "paged_attention", "sparse_matmul", "manual_dma")
# Issue 31's held-out families: no constant of the live-value rule was read off them.
BODY_HELD_OUT = ("scan", "sort")
FAMILIES = tuple(FITTED_ON) + SEEN + HELD_OUT + BODY_HELD_OUT
# Issue 31's families: kernels whose VMEM is mostly what their body computes. The model bounds their
# spills (a share of the live peak, within measured limits) rather than sizing them, so they answer to
# issue 31's target (never a silent "fits"), measured on their own; issue 15's targets (verdicts,
# exact allocations, totals within 5%) stay on the other families.
BODY_TEMPORARIES = ("router", "normalize", "mask", "reduce", "elementwise", "scan", "sort")


def family_of(case_id: str) -> str:
    for prefix, family in PREFIXES:
        if case_id.startswith(prefix):
            return family
    raise KeyError(f"no family for case {case_id!r}: add its prefix to bench/families.py")


def role(family: str) -> str:
    """ "fitted" (a constant was read off it), "seen" (in the corpus the model was written
    against) or "held out" (added afterwards, the model unchanged since)."""
    if family in FITTED_ON:
        return "fitted"
    return "held out" if family in HELD_OUT + BODY_HELD_OUT else "seen"
