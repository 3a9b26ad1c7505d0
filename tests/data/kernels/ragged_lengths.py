"""jax's ragged paged attention as a tuner calls it: its two block sizes as keywords, its
lengths (kv_lens, cu_q_lens, num_seqs) given as values, which tell how many times its loops
over sequences and kv blocks run (tests/test_loop_trips.py)."""

from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ragged_paged_attention


def rpa(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *, num_kv_pages_per_block, num_queries_per_block):
    return ragged_paged_attention(
        q,
        kv_pages,
        kv_lens,
        page_indices,
        cu_q_lens,
        num_seqs,
        num_kv_pages_per_block=num_kv_pages_per_block,
        num_queries_per_block=num_queries_per_block,
    )
