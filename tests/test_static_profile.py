"""The compiler's static cycle estimate, read from profiles libtpu wrote
(scripts/capture_static_profiles.py, one folder per libtpu), and kept in the
cache apart from the verdict alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmem_lsp.compile.cache import ResultCache
from vmem_lsp.compile.client import CheckRequest
from vmem_lsp.compile.cut_grids import cut_grids, extrapolate
from vmem_lsp.tpu.static_profile import ProfileError, parse_static_profile

PROFILES = Path(__file__).parent / "data" / "static_profiles"
CAPTURED = sorted(PROFILES.glob("*/*.textproto"))
ZERO = "flash-batch2"  # jax's flash attention with block_b=2: libtpu estimates it at 0 cycles


def cycles(libtpu: str, name: str) -> int:
    (op,) = parse_static_profile((PROFILES / libtpu / f"{name}.textproto").read_text())
    return op.cycles


@pytest.mark.parametrize("path", [p for p in CAPTURED if ZERO not in p.stem], ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_captured_profile_gives_one_named_estimate(path):
    (op,) = parse_static_profile(path.read_text())
    assert op.cycles > 0
    assert op.hlo_op.startswith("add" if path.stem.endswith("-add") else "_lambda_"), op


def test_the_profiles_were_captured_for_the_compilers_in_range():
    assert {p.parent.name for p in CAPTURED} >= {"0.0.42.1", "0.0.50.1"}


@pytest.mark.parametrize("libtpu", ["0.0.42.1", "0.0.50.1"])
@pytest.mark.parametrize("chip", ["v5e", "v6e"])
def test_larger_matmul_blocks_are_estimated_faster(libtpu, chip):
    """128x128 blocks: 256 grid steps, each reloading its operands; 512x512: 16 steps."""
    assert cycles(libtpu, f"{chip}-matmul-512") < cycles(libtpu, f"{chip}-matmul-128") / 2


def test_a_profile_without_an_estimate_is_an_error_that_shows_the_text():
    with pytest.raises(ProfileError, match="hlo_op_estimate"):
        parse_static_profile('hlo_op_estimate {\n  hlo_op_name: "x.1"\n}\n')
    with pytest.raises(ProfileError):
        parse_static_profile("")


def test_a_zero_estimate_is_read_at_its_own_depth_and_is_no_estimate(tmp_path, monkeypatch):
    """The 0-cycle block nests the op's hlo_instruction (with a `name:` and braces of its
    own): its fields are not the estimate's, and 0 cycles is never ranked fastest."""
    from vmem_lsp.tpu import profile as speed

    [path] = [p for p in CAPTURED if p.stem.endswith(ZERO)]
    (op,) = parse_static_profile(path.read_text())
    assert (op.hlo_op, op.cycles, op.dma) == ("flash_attention.1", 0, "DMA_INSTRUCTION_TYPE_REMOTE")
    (tmp_path / f"flash_attention.1{speed.PROFILE_SUFFIX}").write_text(path.read_text())
    monkeypatch.setenv(speed.SPEED_FOLDER, str(tmp_path))
    cycles, why = speed.estimate_of()
    assert cycles is None and why is not None and "estimated 0 cycles for flash_attention.1" in why


def test_several_ops_are_each_read():
    one = (PROFILES / "0.0.50.1" / "v6e-add.textproto").read_text()
    two = one + one.replace('"add.1"', '"add.2"')
    assert [op.hlo_op for op in parse_static_profile(two)] == ["add.1", "add.2"]


def test_an_estimate_is_cached_apart_and_a_verdict_keeps_its_key(tmp_path):
    cache = ResultCache(str(tmp_path))
    plain = CheckRequest("f(f32[8, 128])", "v6e", path=str(tmp_path / "kernel.py"))
    asked = CheckRequest("f(f32[8, 128])", "v6e", path=str(tmp_path / "kernel.py"), estimate=True)
    assert cache.key(plain) != cache.key(asked)


@pytest.mark.parametrize(
    "grid, cuts",
    [
        ((4, 4, 4), [(4, 4, 4)]),  # 64 steps: the grid itself
        ((8, 8, 8), [(3, 3, 3), (4, 4, 4)]),
        ((1000,), [(63,), (64,)]),
        ((2, 500), [(2, 31), (2, 32)]),
        ((1, 1, 100, 3), [(1, 1, 20, 3), (1, 1, 21, 3)]),  # k=21: 63 steps
    ],
)
def test_a_long_grid_is_estimated_on_two_cut_grids_of_at_most_64_steps(grid, cuts):
    assert cut_grids(grid) == cuts


def test_the_cycles_are_extrapolated_along_the_steps():
    """v6e's matmul of 512-blocks, measured whole on 27, 64 and 512 steps: 32285, 71680, 550240 cycles."""
    assert abs(extrapolate([(27, 32285), (64, 71680)], 512) - 550240) / 550240 < 0.01
    assert extrapolate([(64, 71680)], 64) == 71680
    assert extrapolate([(10, 1000)], 40) == 4000
    # A block larger than its array makes a grid of no step: its estimate is what it is (was a ZeroDivisionError).
    assert cut_grids((0, 4)) == [(0, 4)] and extrapolate([(0, 500)], 0) == 500
