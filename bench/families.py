"""Which kernel family a corpus case belongs to, and whether the layout model saw it.

No jax here: the harness's `--from` path and the tests read recorded results with it.

A family is one kind of kernel (copy, tiled matmul, flash attention, ...). The case id's
prefix decides it, so records made before families were recorded get one too.

The model's constants are fitted by hand, not by code: SPILL_SHARE, NO_SPILL_UP_TO and
attention_scores_bytes in vmem_lsp/layout.py were read off the compiler's reports of the
families their docstrings cite. Every family recorded on 2026-11-29 (the corpus the
model was written against) was *seen*: its disagreements were read, and the structural
rules (tiles, buffers, memory spaces) cite copy, buffering, scratch and space cases.
The families added after (HELD_OUT) were not: vmem_lsp/ was not changed after their
first run, so their figures are the model's agreement on kernels it never saw.
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
)

# What each constant of the model was read off (its docstring's citations in vmem_lsp/layout.py).
FITTED_ON = {
    "matmul": "SPILL_SHARE, NO_SPILL_UP_TO (matmul-bf16-{512,1024,2048}^3), accumulator_bytes (matmul-s8/f32-*)",
    "jaxmatmul": "NO_SPILL_UP_TO (jaxmatmul-bf16-512x512x512)",
    "flash": "attention_scores_bytes (flash-{bf16,f32}-b{256..2048})",
    # Held out at first (98.9% on v4, its one miss warned); the miss then taught accumulator_bytes to read
    # the windows an emit_pipeline brings in, so the family is no longer held out.
    "pipeline": "accumulator_bytes over pipeline_in windows (pipeline-matmul-bf16-1024x1024x1024)",
}
# Seen when the rules were written (in the 2026-11-29 corpus), but no constant is fitted on them.
SEEN = ("copy", "buffering", "large", "scratch", "space", "rowsum", "gmm")
HELD_OUT = ("quant_matmul", "paged_attention", "sparse_matmul", "manual_dma")
FAMILIES = tuple(FITTED_ON) + SEEN + HELD_OUT


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
    return "held out" if family in HELD_OUT else "seen"
