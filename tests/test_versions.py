"""versions.py: the tested range and the facts keyed by the compiler's version, as
scripts/measure_chips.py measured them on each libtpu (pure: no compiler starts)."""

from __future__ import annotations

from vmem_lsp import versions
from vmem_lsp.render import size
from vmem_lsp.tpu import model_error
from vmem_lsp.tpu.chips import CHIPS, chip


def printed(libtpu: str | None) -> dict[str, tuple[str, str]]:
    return {name: (size(chip(name, libtpu).capacity), size(chip(name, libtpu).scoped_limit)) for name in CHIPS}


def test_chip_figures_per_libtpu_as_measured():
    common = {"v4": ("16.00M", "16.00M"), "v5e": ("128.00M", "16.00M"), "v5p": ("63.94M", "16.00M")}
    assert printed("0.0.32.1") == {**common, "v6e": ("128.00M", "32.00M"), "v7x": ("64.00M", "32.00M")}
    assert printed("0.0.42.1") == {**common, "v6e": ("127.94M", "32.00M"), "v7x": ("64.00M", "32.00M")}
    assert printed("0.0.50.1") == {**common, "v6e": ("127.94M", "32.00M"), "v7x": ("63.94M", "32.00M")}
    # No version known: the default libtpu's figures, which CHIPS holds.
    assert (
        printed(None)
        == printed(versions.DEFAULT_LIBTPU)
        == {n: (size(c.capacity), size(c.scoped_limit)) for n, c in CHIPS.items()}
    )
    # Older than every entry: the oldest figures; newer than every entry: the newest.
    assert printed("0.0.17.1") == printed("0.0.32.1") and printed("0.0.52") == printed("0.0.50.1")


def test_the_budget_uses_the_compilers_figures():
    from vmem_lsp.results import CapturedCall
    from vmem_lsp.tpu.budget import from_compile

    call = CapturedCall("k", None, None, (1,), 0, (), (), 100 * 2**20, True, None, 0.0)
    assert from_compile(call, None, "v7x", "0.0.50.1").capacity == 64 * 2**20 - 64 * 2**10
    assert from_compile(call, None, "v7x", "0.0.42.1").capacity == 64 * 2**20


def test_model_error_is_keyed_by_libtpu():
    import json

    measured = json.loads(model_error.TABLE.read_text())
    assert {"0.0.42.1", "0.0.50.1"} <= set(measured)

    def bound(libtpu):
        return model_error.bound("compute", "v7x", libtpu)

    for libtpu in ("0.0.42.1", "0.0.50.1"):
        assert bound(libtpu) == model_error.ErrorBound(**measured[libtpu]["bounds"]["compute"]["v7x"])
    assert bound("0.0.42.1") != bound("0.0.50.1")
    # No version known: the default libtpu's; between keys the older one; older than all, the oldest.
    assert bound(None) == bound(versions.DEFAULT_LIBTPU) and bound("0.0.48") == bound("0.0.42.1")
    assert bound("0.0.52") == bound("0.0.50.1") and bound("0.0.32.1") == bound("0.0.42.1")


def test_version_keys():
    assert versions.key("0.0.42.1") < versions.key("0.0.48") < versions.key("0.0.50.1")
    assert versions.key("0.12.0.1") > versions.key("0.9.2") and versions.key(None) == ()


def test_the_sweep_judges_a_config_with_the_bounds_and_figures_of_the_compiler_that_traced_it():
    from vmem_lsp.families import family_of
    from vmem_lsp.results import CapturedCall, ExampleResult
    from vmem_lsp.sweep.decide import Config, compiled_verdict, size_up

    call = CapturedCall("k", None, None, (1,), 0, (), (), 100 * 2**20, True, None, 0.0)
    limits = {}
    for libtpu in ("0.0.42.1", "0.0.50.1"):
        traced = ExampleResult("v7x", "TPU7x", (call,), libtpu=libtpu)
        item = Config(0, {}, "v7x", traced)
        size_up(item, family_of("v7x"))
        limits[libtpu] = (item.model_limit, compiled_verdict(item, traced, family_of("v7x")).limit)
    assert limits == {"0.0.42.1": (64 * 2**20,) * 2, "0.0.50.1": (64 * 2**20 - 64 * 2**10,) * 2}
