"""One module owns the differences between jax versions (compile/jax_compat.py):
a part of jax that is missing is found by looking, has a fallback or becomes a
named loss the user reads, and a failure of vmem-lsp's own capture is an
internal error naming the jax version, never "the example raised", and never
counted as compiled."""

from __future__ import annotations

import os
import shutil
from types import SimpleNamespace

import jax
from support import EXAMPLES, ROOT
from support.cli import run_cli

from vmem_lsp.compile import jax_compat

FAULT = ROOT / "tests" / "data" / "faults" / "capture"


def parts() -> dict:
    """This module's view of the running jax, as detect() reads it."""
    return dict(vars(jax_compat))


def test_the_running_jax_has_every_part_and_loses_nothing():
    assert jax_compat.detect(parts()) == []
    assert jax_compat.losses() == ()


def test_each_missing_part_is_a_named_loss_with_a_sentence_naming_the_jax():
    cases = {
        "BlockSpec": ["spec_origins"],
        "pallas_call_module": ["spec_origins"],
        "MemoryRef": ["scratch_origins"],
        "BufferedRef": ["scoped_origins"],
        "run_scoped_p": ["scoped"],
        "pjit": ["trace_caches"],
    }
    for part, lost in cases.items():
        assert jax_compat.detect({**parts(), part: None}) == lost, part
    for name in lost:
        assert jax_compat.VERSION in jax_compat.SENTENCES[name].format(v=jax_compat.VERSION)
    no_run_scoped = SimpleNamespace()  # a primitives module without run_scoped
    assert jax_compat.detect({**parts(), "pallas_primitives": no_run_scoped}) == ["scoped_origins"]


def test_scratch_and_array_avals_fall_back_to_what_jax_0_6_and_0_7_call_them():
    refs = [SimpleNamespace(aval=f"ref{i}") for i in range(4)]
    mapping = SimpleNamespace(slice_scratch_ops=slice(2, 4))  # no scratch_avals
    eqn = SimpleNamespace(params={"grid_mapping": mapping, "jaxpr": SimpleNamespace(invars=refs)})
    assert jax_compat.scratch_avals(eqn) == ("ref2", "ref3")
    mapping.scratch_avals = ("new",)
    assert jax_compat.scratch_avals(eqn) == ("new",)
    assert jax_compat.array_aval(SimpleNamespace(array_shape_dtype="old")) == "old"
    assert jax_compat.array_aval(SimpleNamespace(array_aval="new", array_shape_dtype="old")) == "new"
    try:
        jax_compat.array_aval(SimpleNamespace())
    except jax_compat.CompatError as error:
        assert jax_compat.VERSION in str(error)
    else:
        raise AssertionError("a BlockMapping with neither field is a CompatError")


def test_a_pipeline_buffer_count_falls_back_to_the_window_leading_dimension():
    window = SimpleNamespace(shape=(2, 8, 128))
    old = SimpleNamespace(window_ref=window, buffer_type=SimpleNamespace(is_input=True), spec="spec")
    assert jax_compat.buffered(old) == (True, "spec", 2, window)
    new = SimpleNamespace(**vars(old), buffer_count=1)
    assert jax_compat.buffered(new) == (True, "spec", 1, window)


def test_an_undeclared_dependency_of_jax_is_said_with_its_install_line():
    inside_jax = os.path.join(os.path.dirname(jax.__file__), "_src", "planted.py")
    code = compile("raise ModuleNotFoundError(\"No module named 'absl'\", name='absl')", inside_jax, "exec")
    try:
        exec(code)
    except ModuleNotFoundError as error:
        said = jax_compat.undeclared_dependency(error)
        assert said is not None and "-m pip install absl-py" in said and jax_compat.VERSION in said
    try:
        import absl_of_the_user  # type: ignore[import-not-found]  # noqa: F401
    except ModuleNotFoundError as error:
        assert jax_compat.undeclared_dependency(error) is None  # the user's own missing module: theirs


def test_a_failure_of_our_own_capture_is_an_internal_error_naming_jax_and_is_not_counted_compiled(tmp_path):
    """And what the worker's jax lacks reaches the user once per run, on stderr."""
    shutil.copy(EXAMPLES / "copy_whole.py", tmp_path)
    shutil.copy(EXAMPLES / "add_fits.py", tmp_path)
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(FAULT), os.environ.get("PYTHONPATH")) if p)}
    done = run_cli("check", ".", "--no-cache", "--target", "v6e", cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"vmem-lsp internal error on jax {jax.__version__}" in done.stdout
    assert "scratch_avals" in done.stdout and "the example raised" not in done.stdout
    summary = done.stdout.strip().splitlines()[-1]
    assert "(0 compiled, 2 not checked, 0 cached" in summary, summary
    lost = f"vmem-lsp: no provenance for BlockSpecs on jax {jax.__version__}: errors land on the pallas_call line"
    assert done.stderr.count(lost) == 1, done.stderr


def test_an_error_raised_in_our_hooks_is_ours_and_one_raised_deeper_in_user_code_is_not(tmp_path):
    from vmem_lsp.compile.worker import raised_in

    ours, user = str(tmp_path / "capture.py"), str(tmp_path / "kernel.py")
    user_code = compile("def kernel():\n    raise ValueError('the user')\n", user, "exec")
    hook_code = compile(
        "def hook(f):\n    return f()\ndef broken():\n    return object().scratch_avals\n", ours, "exec"
    )
    scope: dict = {}
    exec(user_code, scope)
    exec(hook_code, scope)
    for call, expected in ((lambda: scope["hook"](scope["kernel"]), False), (scope["broken"], True)):
        try:
            call()
        except Exception as error:
            assert raised_in(error, {ours}) is expected
    assert raised_in(MemoryError(), {ours}) is False
    # a hook handing on arguments the wrapped function does not take: the user's TypeError
    wrapper = compile("def invoke(f, **kw):\n    return f(**kw)\n", ours, "exec")
    exec(wrapper, scope)
    try:
        scope["invoke"](scope["kernel"], check_rep=True)
    except TypeError as error:
        assert raised_in(error, {ours}) is False


def test_compiler_params_held_in_a_mapping_that_is_not_a_dict_name_their_platform():
    """jax 0.8 keeps a kernel's compiler params in a FrozenDict keyed by the backend ("triton",
    "mosaic_tpu"), a Mapping but no dict: a Triton kernel was compiled for a TPU chip there (the
    compiler refused it: VMEM011) instead of being left alone (VMEM015), and a vmem_limit_bytes
    given that way was not read."""
    from types import MappingProxyType

    from vmem_lsp.compile.capture import _vmem_limit, params_platform

    assert params_platform(MappingProxyType({"triton": SimpleNamespace(num_warps=4)})) == "gpu"
    assert params_platform(MappingProxyType({"mosaic_tpu": SimpleNamespace()})) == "tpu"
    assert _vmem_limit(MappingProxyType({"mosaic_tpu": MappingProxyType({"vmem_limit_bytes": 1 << 25})})) == 1 << 25
    assert _vmem_limit(MappingProxyType({"mosaic_tpu": SimpleNamespace(vmem_limit_bytes=1 << 24)})) == 1 << 24
    assert _vmem_limit(GetWithoutDefault(mosaic_tpu=GetWithoutDefault(vmem_limit_bytes=1 << 23))) == 1 << 23


class GetWithoutDefault(dict):
    """jax 0.8's FrozenDict: a Mapping whose get takes the key alone."""

    def get(self, key):  # type: ignore[override]
        return super().get(key)
