"""Every code action on jax's own Pallas TPU kernels: applied
to each file of jax/experimental/pallas/ops/tpu it leaves a file that parses,
differs only in the intended tokens, and comes back byte for byte by undo.

Part A, static: every rewrite the fixes can make, at every kernel site of
every file, without a compiler. Part B, the real compiler: a `# vmem:` example
that overflows VMEM, appended to a copy of each file whose kernels can be made
to overflow here; every fix offered is checked as in part A, and the first is
applied and the copy compiled again. The kernel files that have no part B say
why in PART_A_ONLY, and a test holds each reason to what the worker answers."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from support.cli import run_json
from support.fixes import assert_intact, fixes_for, site_rewrites
from support.jax_ops import EXAMPLES, OPS, TARGET, copy_with_example

from vmem_lsp.compile.client import CheckRequest
from vmem_lsp.fixes.knobs import example_knobs
from vmem_lsp.source.directives import find_examples
from vmem_lsp.source.locate import locate
from vmem_lsp.source.text import apply_edits


@dataclass(frozen=True)
class PartAOnly:
    """A kernel file covered by part A only: the example tried, why it cannot
    serve part B, and the worker's words that show it."""

    example: str
    reason: str
    evidence: str | None  # in the worker's answer to the last request; None: that one is sound too
    compile: bool  # the requests compile (else trace only)
    requests: int  # how many times the example is sent


PRNG_REASON = (
    "its blocks are costly to compile, the body being many rounds over the whole block: on 2 "
    "cores philox's smallest overflowing block (1152 x 1024, two outputs) took 32 s, threefry's "
    "1024 x 2048, which just fits, 19 s, and its 2048 x 4096 174 s; a fix search compiles several. "
    "The module registers its PRNG at import (prng.register_prng); the worker keeps it loaded "
    "while unchanged, and asking twice works (the check below)."
)

PART_A_ONLY = {
    "all_gather.py": PartAOnly(
        "all_gather(f32[4096, 1024], mesh=jax.sharding.Mesh(jax.experimental.topologies.get_topology_desc("
        'platform="tpu", topology_name="v5e:2x2").devices, ("x",)), axis_name="x")',
        "a multi-device collective (remote DMAs, a barrier semaphore): it traces under shard_map, but "
        "vmem-lsp compiles each pallas_call alone on one device, which the compiler refuses.",
        "Cannot use communication in pallas_call without shard_map",
        compile=True,
        requests=1,
    ),
    "random/threefry.py": PartAOnly(
        "threefry_2x32_count(u32[2], (8192, 8192), (8192, 8192), block_size=(2048, 4096))",
        PRNG_REASON,
        None,
        compile=False,
        requests=2,
    ),
    "random/philox.py": PartAOnly(
        "philox_4x32_kernel(u32[2], (2304, 1024), (2304, 1024), block_size=(1152, 1024), fuse_output=False)",
        PRNG_REASON,
        None,
        compile=False,
        requests=2,
    ),
}


def kernel_files() -> list[str]:
    """Every ops/tpu file that holds a pallas_call, relative to OPS."""
    return sorted(str(p.relative_to(OPS)) for p in OPS.rglob("*.py") if "pallas_call" in p.read_text())


def test_every_kernel_file_has_an_example_or_a_reason():
    assert not set(EXAMPLES) & set(PART_A_ONLY)
    assert kernel_files() == sorted({*EXAMPLES, *PART_A_ONLY})


# ---- part A: every rewrite at every site, no compiler ---------------------------------------
# The edits are made to the text of jax's files, read in place: nothing is written.


@pytest.mark.parametrize("name", sorted(str(p.relative_to(OPS)) for p in OPS.rglob("*.py")))
def test_every_rewrite_at_every_site_keeps_the_file_intact(name):
    source = (OPS / name).read_text()
    located = locate(source, str(OPS / name))
    assert located.error is None
    assert bool(located.sites) == ("pallas_call" in source), name
    for site in located.sites:
        made = site_rewrites(site, source)
        for label, edits in made:
            if edits is not None:
                assert_intact(source, edits, f"{name}:{site.span.start_line} {label}")
        produced = {label.split()[0] for label, edits in made if edits}
        # Every site can take a limit, unless its value comes from a name (a
        # parameter passed through): a number there would cut that plumbing.
        passed_through = site.vmem_limit_bytes is not None and site.vmem_limit_bytes.text.strip().isidentifier()
        assert ("set_vmem_limit" in produced) != passed_through, site
        specs = [s for s in (*site.in_specs, *site.out_specs) if s.pipeline_mode is None]
        single = [label for label, edits in made if label.startswith("single_buffer") and edits]
        assert len(single) == len(specs), (site.function, made)  # and every spec a Buffered(1)
        if site.grid is not None or site.grid_spec is not None:
            assert "introduce_grid" not in produced  # never a second grid


def test_part_a_makes_every_kind_of_rewrite_on_jax():
    """So that part A cannot pass by making nothing: how many rewrites it
    checks across jax's kernels, by kind."""
    counts: dict[str, int] = {}
    for name in kernel_files():
        source = (OPS / name).read_text()
        for site in locate(source, str(OPS / name)).sites:
            for label, edits in site_rewrites(site, source):
                if edits:
                    kind = label.split()[0]
                    counts[kind] = counts.get(kind, 0) + 1
    assert counts["set_vmem_limit"] >= 14  # one per pallas_call site, but ragged's parameter
    assert counts["single_buffer"] >= 100  # one per BlockSpec written
    assert counts.get("Shrink", 0) >= 1  # ragged paged attention's literal 128


# ---- part B: the real compiler ----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_fixes_on_a_copy_of_each_jax_kernel_keep_it_intact_and_fit(name, tmp_path, worker):
    path = copy_with_example(name, EXAMPLES[name], tmp_path)
    [(_, fixes)] = fixes_for(path, (TARGET,), tmp_path / "cache", worker=worker)  # it overflows
    assert fixes, f"no fix offered for {name}"
    before = path.read_text()
    for fix in fixes:
        assert {e.path for e in fix.edits} == {str(path)}, fix.title
        assert_intact(before, list(fix.edits), fix.title)
    assert fixes[0].verified, [f.title for f in fixes]
    [example], _ = find_examples(before, str(path))
    if example_knobs(example):  # a block size written in the example: shrinking it is offered
        assert any(f.kind == "shrink" for f in fixes), [f.title for f in fixes]
    path.write_text(apply_edits(before, list(fixes[0].edits)))
    done, report = run_json("check", str(path), "--target", TARGET, "--no-cache")
    assert done.returncode == 0, (fixes[0].title, report)


@pytest.mark.parametrize("name", sorted(PART_A_ONLY))
def test_each_part_a_only_reason_holds(name, tmp_path, worker):
    """What the worker answers for the example tried: the reason given."""
    tried = PART_A_ONLY[name]
    path = copy_with_example(name, tried.example, tmp_path)
    request = CheckRequest(tried.example, TARGET, path=str(path), compile=tried.compile)
    answers = [worker.check(request, 300) for _ in range(tried.requests)]
    *earlier, last = answers
    assert all(a.error is None and a.calls for a in earlier), earlier  # the example itself is sound
    if tried.evidence is None:
        assert last.error is None and last.calls, last
        return
    said = " ".join([last.error or "", *(c.compiler_text or "" for c in last.calls)])
    assert tried.evidence in said, said
