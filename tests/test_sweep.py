"""`vmem-lsp sweep` and the tuner API: the real compiler, the CLI as a
subprocess, the API from a script as a tuner runs it."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from support import EXAMPLES, ROOT, line_of
from support.cli import run_cli

from vmem_lsp.source.directives import Example
from vmem_lsp.source.model import Span
from vmem_lsp.sweep.spec import SweepError, check_size, parse_spec, sweep_of

MATMUL = EXAMPLES / "matmul.py"
ARGS = "bf16[8192, 8192], bf16[8192, 8192]"


# ---- the spec ---------------------------------------------------------------------------------


def test_a_list_of_constants_is_an_axis_and_the_configs_are_their_product():
    sweep = parse_spec(f"{MATMUL}:matmul({ARGS}, bm=[256, 512], bk=1024, bn=[512, 1024, 2048])")
    assert [a.name for a in sweep.axes] == ["bm", "bn"] and sweep.size == 6
    assert sweep.configs()[1] == {"bm": 256, "bn": 1024}
    assert sweep.call_for({"bm": 512, "bn": 2048}) == f"matmul({ARGS}, bm=512, bk=1024, bn=2048)"


def test_lists_inside_a_call_and_tuples_are_axes_but_a_list_of_arrays_is_an_argument():
    nested = sweep_of(
        Example(
            "f.py",
            1,
            Span(1, 0, 1, 0),
            "f(bf16[1, 1, 2048, 128], block_sizes=BlockSizes(block_q=[512, 1024], block_b=1), "
            "tiling=[(512, 512), (1024, 1024)], xs=[f32[8, 128], f32[8, 128]])",
        )
    )
    assert [a.name for a in nested.axes] == ["BlockSizes.block_q", "tiling"]
    assert "block_q=1024" in nested.call_for({"BlockSizes.block_q": 1024, "tiling": (512, 512)})
    assert sweep_of(Example("f.py", 1, Span(1, 0, 1, 0), "f(xs=[f32[8, 128]], n=3)")) is None


@pytest.mark.parametrize(
    "call, says",
    [
        (f"matmul({ARGS}, bm=[])", "empty list"),
        (f"matmul({ARGS}, bm=512)", "has no axis"),
        (f"matmul({ARGS}, bm=[512,", "does not parse"),
    ],
)
def test_a_bad_spec_says_why(call, says):
    with pytest.raises(SweepError, match=says):
        parse_spec(f"{MATMUL}:{call}")


def test_more_than_ten_thousand_configs_need_a_compile_budget():
    values = ", ".join(str(v) for v in range(128, 128 * 120, 128))
    sweep = parse_spec(f"{MATMUL}:matmul({ARGS}, bm=[{values}], bk=[{values}])")
    with pytest.raises(SweepError, match="needs --budget-compiles"):
        check_size([sweep], None)
    check_size([sweep], 50)


# ---- the CLI ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """One sweep of the bundled matmul on v5e and v7x, and every config compiled (brute force, --table)."""
    folder = tmp_path_factory.mktemp("sweep")
    spec = f"{MATMUL}:matmul({ARGS}, bm=[512, 1024, 2048], bk=[512, 1024], bn=[512, 1024])"
    started = time.perf_counter()
    done = run_cli("sweep", spec, "--target", "v5e,v7x", "--format", "json", "--cache-dir", str(folder / "a"))
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    sweep = parse_spec(spec)
    table = [{"target": t, "example": f"{MATMUL}:{sweep.call_for(c)}"} for t in ("v5e", "v7x") for c in sweep.configs()]
    (folder / "table.json").write_text(json.dumps(table))
    brute = run_cli(
        "sweep", "--table", str(folder / "table.json"), "--format", "json", "--cache-dir", str(folder / "b")
    )
    return report, json.loads(brute.stdout), brute.returncode, seconds


def test_the_sweep_agrees_with_compiling_every_config_and_compiles_fewer(swept):
    report, brute, code, _ = swept
    assert code == 1  # some entry of the table overflows
    assert report["configs_total"] == len(brute) == 24
    truth = {(b["target"], b["example"].split("bm=")[1]): b["fits"] for b in brute}
    for c in report["configs"]:
        key = (c["target"], f"{c['params']['bm']}, bk={c['params']['bk']}, bn={c['params']['bn']})")
        assert c["fits"] == truth[key], c
    assert {c["decided_by"] for c in report["configs"]} <= {"model", "compiler", "monotonicity"}
    assert any(c["fits"] is False for c in report["configs"]) and any(c["fits"] for c in report["configs"])
    assert report["compiles"] <= 0.4 * len(brute)


QMM_MODULE = """import jax.numpy as jnp
from tpu_inference.kernels.quantized_matmul.kernel import quantized_matmul_kernel
from tpu_inference.kernels.quantized_matmul.tuned_block_sizes import TunedValue
"""


def test_sweep_table_checks_tpu_inferences_own_tuned_table(tmp_path):
    """Issue 43: tpu-inference keeps its quantized matmul's tuned blocks as a Python dict keyed by
    (tpu_version, n_batch, n_out, n_in, x dtype, w dtype). docs/tpu_inference_table.py turns the file
    of its PyPI wheel, as it is, into a --table file: its first v6e (int8) and v7x (fp8) entries fit
    on their chips; an entry planted with the whole of a 28672-wide weight as one block does not,
    and the table exits 1."""
    from support.tpu_inference_kernels import quantized_matmul

    kernel = quantized_matmul(tmp_path)
    (tmp_path / "qmm.py").write_text(QMM_MODULE, encoding="utf-8")
    entries = []
    for chip in ("v6e", "v7x"):
        made = subprocess.run(
            [
                sys.executable,
                str(ROOT / "docs" / "tpu_inference_table.py"),
                str(kernel.with_name("tuned_block_sizes.py")),
                "qmm.py",
                "--chips",
                chip,
                "--first",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        entries += json.loads(made.stdout)
    assert [e["target"] for e in entries] == ["v6e", "v7x"] and "f8e4m3fn[" in entries[1]["example"], entries
    planted = entries[0]["example"].split("(bf16")[0] + (
        "(bf16[1024, 4096], i8[28672, 4096], f32[28672], x_q_dtype=jnp.int8, tuned_value=TunedValue(1024, 28672, 4096))"
    )
    (tmp_path / "tuned.json").write_text(json.dumps([*entries, {"target": "v6e", "example": planted}]))
    done = run_cli(
        "sweep", "--table", "tuned.json", "--format", "json", "--cache-dir", str(tmp_path / "c"), cwd=tmp_path
    )
    assert done.returncode == 1, done.stderr
    rows = json.loads(done.stdout)
    assert [r["fits"] for r in rows] == [True, True, False], rows
    assert all(r["used"] <= r["limit"] for r in rows[:2]) and rows[2]["used"] > rows[2]["limit"], rows


def test_a_sweep_in_the_projects_python_never_reads_what_another_jax_compiled(tmp_path):
    """The cache's key holds the worker's compiler for sweep as for check: the same sweep, once the
    project names a Python with another jax, compiles again instead of reading back what vmem-lsp's
    own jax said (it did, sharing the cache folder), and its own answers are read back after."""
    from support.project_env import project_venv

    venv = project_venv()
    spec = f"{MATMUL}:matmul({ARGS}, bm=[1024, 2048], bk=[512, 1024], bn=[512, 1024])"
    project = tmp_path / "project"
    project.mkdir()
    sweep = ("sweep", spec, "--target", "v5e", "--format", "json", "--cache-dir", str(tmp_path / "cache"))
    own = json.loads(run_cli(*sweep, cwd=project).stdout)
    (project / "pyproject.toml").write_text(f'[tool.vmem-lsp]\npython = "{venv}"\n')
    other, again = (json.loads(run_cli(*sweep, cwd=project).stdout) for _ in range(2))
    assert own["compiles"] > 0 and other["compiles"] > 0
    assert other["cache_hits"] == 0, other
    assert again["cache_hits"] == again["compiles"] == other["compiles"]


def test_text_and_csv_say_the_same_and_name_who_decided(tmp_path, swept):
    spec = f"{MATMUL}:matmul({ARGS}, bm=[512, 1024], bk=1024, bn=1024)"
    text = run_cli("sweep", spec, "--target", "v5e", "--cache-dir", str(tmp_path)).stdout
    assert "TPU v5e" in text and "bm=1024" in text and " over " in text and "compiler" in text
    rows = run_cli(
        "sweep", spec, "--target", "v5e", "--format", "csv", "--cache-dir", str(tmp_path)
    ).stdout.splitlines()
    assert rows[0].startswith("target,bm,fits,used,limit,headroom,decided_by") and len(rows) == 3
    assert rows[2].startswith("v5e,1024,False,")


def test_a_plot_is_drawn_with_matplotlib(tmp_path):
    spec = f"{MATMUL}:matmul({ARGS}, bm=[512, 1024], bk=[512, 1024], bn=1024)"
    done = run_cli(
        "sweep", spec, "--target", "v5e", "--plot", str(tmp_path / "frontier.png"), "--cache-dir", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def cached(folder, spec: str, config: dict, compile: bool):
    """The cache's answer to the request `sweep` makes for one config on v5e, or None."""
    import dataclasses

    from vmem_lsp.compile.cache import ResultCache
    from vmem_lsp.config import load_settings
    from vmem_lsp.engine import request_for

    settings = dataclasses.replace(load_settings(str(ROOT)), cache_dir=str(folder))
    request = request_for(parse_spec(spec).example_for(config), "v5e", settings)
    return ResultCache(str(folder)).get(dataclasses.replace(request, compile=compile))


def test_an_unknown_parameter_is_refused_after_the_traces_and_before_any_compile(tmp_path):
    spec = f"{MATMUL}:matmul({ARGS}, bz=[1, 2])"
    done = run_cli("sweep", spec, "--target", "v5e", "--cache-dir", str(tmp_path))
    assert done.returncode == 2 and "takes no parameter 'bz'" in done.stderr and "Traceback" not in done.stderr, (
        done.stderr
    )
    assert cached(tmp_path, spec, {"bz": 1}, compile=False) is not None  # traced: that is how it knows
    assert (
        cached(tmp_path, spec, {"bz": 1}, compile=True) is None
        and cached(tmp_path, spec, {"bz": 2}, compile=True) is None
    )


def test_an_empty_axis_is_refused_before_anything_runs(tmp_path):
    done = run_cli("sweep", f"{MATMUL}:matmul({ARGS}, bm=[])", "--target", "v5e", "--cache-dir", str(tmp_path))
    assert done.returncode == 2 and "empty list" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_check_leaves_a_sweep_directive_to_sweep_and_sweep_runs_it(tmp_path):
    text = MATMUL.read_text().replace("bm=1024, bk=1024, bn=1024", "bm=[512, 1024], bk=1024, bn=1024")
    (tmp_path / "mm.py").write_text(text)
    done = run_cli("check", "mm.py", "--target", "v5e", "--format", "json", cwd=tmp_path)
    codes = [d["code"] for d in json.loads(done.stdout)["diagnostics"]]
    assert "VMEM022" in codes and "VMEM001" not in codes
    swept = json.loads(run_cli("sweep", "mm.py", "--target", "v5e", "--format", "json", cwd=tmp_path).stdout)
    assert [(c["params"]["bm"], c["fits"]) for c in swept["configs"]] == [(512, True), (1024, False)]


# ---- the API ----------------------------------------------------------------------------------

TUNER = """
import sys, time, statistics
sys.path.insert(0, {examples!r})
import jax, jax.numpy as jnp
import vmem_lsp
from matmul import matmul

if __name__ == "__main__":
    x = jax.ShapeDtypeStruct((8192, 8192), jnp.bfloat16)
    over = vmem_lsp.fits(matmul, x, "bf16[8192, 8192]", target="v5e", bm=1024, bk=1024, bn=1024)
    model = vmem_lsp.fits(matmul, x, x, target="v5e", compile=False, bm=512, bk=512, bn=512)
    configs = [dict(bm=m, bk=1024, bn=1024) for m in (256, 512, 1024)]
    kept = vmem_lsp.prune(matmul, (x, x), configs, targets="v5e")  # as fits takes a chip
    from concurrent.futures import ThreadPoolExecutor      # autotuners call from many threads
    with ThreadPoolExecutor(4) as pool:
        used = list(pool.map(lambda m: vmem_lsp.fits(matmul, x, x, target="v6e", compile=False, bm=m).used,
                             (256, 512, 256, 512, 1024, 1024)))
    print(repr((over.fits, over.decided_by, over.used > over.limit, [p[0] for p in over.parts],
                model.fits, model.decided_by, [c["bm"] for c in kept], used)))
"""


def test_fits_and_prune_from_a_tuner_script(tmp_path):
    (tmp_path / "tune.py").write_text(TUNER.format(examples=str(EXAMPLES)))
    done = subprocess.run([sys.executable, "tune.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    over, by, above, parts, model_fits, model_by, kept, used = eval(done.stdout.strip().splitlines()[-1])
    assert used[0] == used[2] < used[1] == used[3] < used[4] == used[5]
    assert (over, by, above) == (False, "compiler", True)
    assert parts[:2] == ["input 0 window bf16[1024,1024]", "input 1 window bf16[1024,1024]"]
    assert (model_fits, model_by) == (True, "model")
    assert kept == [256, 512]


@pytest.mark.compiler  # vmem_lsp.fits traces in a worker
def test_a_trace_only_fits_is_the_models_verdict_and_a_check_after_it_keeps_its_origins(tmp_path, monkeypatch):
    """fits(compile=False) asks the worker for no origins (the provenance hooks
    cost 0.3 ms of the 5 ms target): its verdict is still the one a trace with
    origins gives, and neither the worker (jax keeps the unstamped trace) nor
    the disk cache (were a trace without origins ever kept there) hands a check
    of the same example a result without the lines that made its specs."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    from vmem_lsp import api
    from vmem_lsp.engine import run_example

    monkeypatch.chdir(tmp_path)  # the engine's disk cache: this test's own
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from matmul import matmul

    engine = api.Engine()
    monkeypatch.setattr(api, "ENGINE", engine)
    x = jax.ShapeDtypeStruct((8192, 8192), jnp.bfloat16)
    specs = [
        line_of(MATMUL, "pl.BlockSpec((bm, bk)"),
        line_of(MATMUL, "pl.BlockSpec((bk, bn)"),
        line_of(MATMUL, "out_specs=pl.BlockSpec"),
    ]
    try:
        verdicts = []
        for config in (dict(bm=1024, bk=1024, bn=1024), dict(bm=2048, bk=8192, bn=2048)):
            verdict = api.fits(matmul, x, x, target="v6e", compile=False, **config)
            request = api.fits_request(api.example_for(matmul, (x, x), config), "v6e", engine.ready().settings, False)
            assert (request.compile, request.origins) == (False, False)
            traced = engine.ready().workers.check(
                dataclasses.replace(request, origins=True), engine.ready().settings.limits()
            )
            assert [o.origin.line for o in traced.calls[0].operands] == specs
            assert verdict == api.model_verdict(traced, "v6e")
            verdicts.append(verdict.fits)
        assert verdicts == [True, False]

        example = api.example_for(matmul, (x, x), dict(bm=512, bk=512, bn=512))
        request = api.fits_request(example, "v6e", engine.ready().settings, False)
        bare = engine.ready().workers.check(request, engine.ready().settings.limits())
        assert [o.origin for o in bare.calls[0].operands] == [None, None, None] and bare.error is None
        engine.ready().cache.put(request, bare)
        checked, cached = run_example(
            example,
            "v6e",
            dataclasses.replace(engine.ready().settings, compile=False),
            engine.ready().cache,
            engine.ready().workers,
        )
        assert not cached
        assert [o.origin.line for o in checked.calls[0].operands] == specs
        assert checked.calls[0].call_origin.col is not None
    finally:
        engine.stop()


CLEARING = """
import json, sys
sys.path.insert(0, {examples!r})
from vmem_lsp.compile import worker
from vmem_lsp.compile.worker import Worker
from vmem_lsp.compile.worker_server import plain
w = Worker()
clears = []
forget = w.provenance.forget_traces
w.provenance.forget_traces = lambda: clears.append(1) or forget()


def ask(bm):
    return plain(w.check({{"example": f"matmul(bf16[8192, 8192], bf16[8192, 8192], bm={{bm}}, bk=512, bn=512)",
                           "target": "v6e", "path": {path!r}, "compile": False, "origins": False}}))


kept = [ask(bm) for bm in (256, 512, 1024)]
worker.BARE_TRACES_KEPT = 1
cleared = [ask(bm) for bm in (256, 512, 1024)]
print(json.dumps([kept == cleared, len(clears), [c["calls"][0]["operands"][0]["block_shape"] for c in cleared]]))
"""


def test_trace_only_requests_clear_jax_traces_now_and_then_and_answer_the_same(tmp_path):
    """jax keeps every config's trace of a jitted kernel under one hash, so a
    tuner's traces slowed as they piled up (4.6 ms at first, 6.8 ms after 300
    configs): the worker clears them every BARE_TRACES_KEPT requests without origins."""
    (tmp_path / "clearing.py").write_text(CLEARING.format(examples=str(EXAMPLES), path=str(MATMUL)))
    done = subprocess.run([sys.executable, "clearing.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    same, clears, blocks = json.loads(done.stdout.strip().splitlines()[-1])
    assert same and clears >= 2 and blocks == [[256, 512], [512, 512], [1024, 512]]


EVICTING = """
import json, sys
sys.path.insert(0, {examples!r})
from jax._src import pjit
from jax._src.interpreters import partial_eval as pe
from vmem_lsp.compile.worker import Worker
from vmem_lsp.compile.worker_server import plain
w = Worker()


def ask(bm):
    return plain(w.check({{"example": f"matmul(bf16[8192, 8192], bf16[8192, 8192], bm={{bm}}, bk=512, bn=512)",
                           "target": "v6e", "path": {path!r}, "compile": False, "origins": False}}))


def kept():
    # the entries of the kernel's own function (jnp.dot's, one per shape, are jax's and few)
    return [sum(1 for key in cache.cache_keys() if getattr(key[0](), "__name__", None) == "matmul")
            for cache in (pe.trace_to_jaxpr, pjit._infer_params_cached)]


ask(128)
before = kept()
blocks = [ask(bm)["calls"][0]["operands"][0]["block_shape"] for bm in (256, 512, 1024, 2048)]
print(json.dumps([before, kept(), blocks]))
"""


def test_a_trace_only_request_leaves_no_trace_of_the_kernel_in_jax(tmp_path):
    """jax files a jitted kernel's traces for every config under one hash (its
    static block sizes are left out), so each lookup compared with all traces
    before it; the worker evicts the traced function's entries after each
    trace-only request: the caches stay the size they were, answers the same."""
    (tmp_path / "evicting.py").write_text(EVICTING.format(examples=str(EXAMPLES), path=str(MATMUL)))
    done = subprocess.run([sys.executable, "evicting.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    before, after, blocks = json.loads(done.stdout.strip().splitlines()[-1])
    assert blocks == [[256, 512], [512, 512], [1024, 512], [2048, 512]]
    assert after == before == [0, 0]


def test_the_tuning_examples_in_the_docs_run(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "tuning_examples.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    assert "bm=1024 bk=1024: over" in done.stdout and "kept [256, 512]" in done.stdout
    ranked = [line for line in done.stdout.splitlines() if line.startswith("rank: ")]
    # Five fit on v6e (bm=2048, bn=1024 is over); the roofline's best three are estimated, fastest first.
    assert (
        len(ranked) == 5 and [", rank 1" in ranked[0], ", rank 2" in ranked[1], ", rank 3" in ranked[2]] == [True] * 3
    )
    assert all("not among the 3 best by roofline" in line for line in ranked[3:]), ranked
    (pruned,) = [line for line in done.stdout.splitlines() if line.startswith("prune(top=2): ")]
    assert (
        pruned.removeprefix("prune(top=2): ") == f"[{ranked[0][6:].split('}')[0]}}}, {ranked[1][6:].split('}')[0]}}}]"
    )
    # decide: prune's verdicts with their reasons; bm=1024 over by the compiler's own figure
    decided = [line for line in done.stdout.splitlines() if line.startswith("decide: ")]
    assert decided[0] == "decide: bm=512: fits", decided
    assert decided[1].startswith("decide: bm=1024: v5e: the compiler needs ") and decided[1].endswith(" of 16.00M")
    assert decided[2].startswith("decide: bm=2048: v5e: "), decided


EAGER = """
import sys
sys.path.insert(0, {examples!r})
import vmem_lsp
from matmul import matmul


def mine(x, y, bm=512):
    return matmul(x, y, bm=bm)


verdict = vmem_lsp.fits(mine, "bf16[8192, 8192]", "bf16[8192, 8192]", target="v5e", bm=1024)   # no __main__ guard
print(verdict.decided_by, verdict.error)
"""


def test_a_module_that_tunes_at_import_is_refused_in_the_worker_not_recursed(tmp_path):
    (tmp_path / "eager.py").write_text(EAGER.format(examples=str(EXAMPLES)))
    done = subprocess.run([sys.executable, "eager.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("error ") and "inside the vmem-lsp worker" in done.stdout


OPTUNA = """
import json, sys
sys.path.insert(0, {examples!r})
import jax, jax.numpy as jnp
import optuna
from matmul import matmul
from vmem_lsp.tuners.filter import FitFilter

if __name__ == "__main__":
    x = jax.ShapeDtypeStruct((8192, 8192), jnp.bfloat16)
    fits = FitFilter(matmul, (x, x), targets="v5e")
    space = {{"bm": [256, 512, 1024, 2048], "bk": [512, 1024], "bn": [512, 1024]}}

    def objective(trial):
        config = {{name: trial.suggest_categorical(name, values) for name, values in space.items()}}
        verdict = fits(config)
        if not verdict.fits:
            raise optuna.TrialPruned(verdict.why_not)
        return config["bm"] * config["bk"] * config["bn"]  # a stand-in for a timed run

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.GridSampler(space, seed=0))
    study.optimize(objective, n_trials=16)
    print(json.dumps({{
        "pruned": [t.params for t in study.trials if t.state == optuna.trial.TrialState.PRUNED],
        "complete": [t.params for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE],
        "asked": fits.asked,
        "by_order": [d.why_not for d in [fits(t.params) for t in study.trials] if "no smaller than" in d.why_not],
    }}))
"""


def test_an_optuna_study_prunes_the_trials_that_cannot_fit_asking_vmem_lsp_least(tmp_path):
    """tuners/filter.FitFilter in an Optuna objective (tpu-inference's tuner is Optuna): the trials
    that cannot fit on v5e are pruned before they would run, the partial order deciding some without
    vmem-lsp; the smallest pruned ones, compiled directly, overflow, and the largest that ran fit."""
    from support.tpu_direct import compile_directly

    (tmp_path / "study.py").write_text(OPTUNA.format(examples=str(EXAMPLES)))
    done = subprocess.run([sys.executable, "study.py"], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    pruned, complete = found["pruned"], found["complete"]
    assert len(pruned) + len(complete) == 16 and pruned and complete
    assert found["asked"] < 16 and found["by_order"], found  # the order spared vmem-lsp some configs
    smaller = lambda a, b: a != b and all(a[k] <= b[k] for k in a)
    edge = [p for p in pruned if not any(smaller(q, p) for q in pruned)]
    top = [c for c in complete if not any(smaller(c, d) for d in complete)]
    said = {
        tuple(c.values()): compile_directly(
            "v5e",
            f"""
            import sys
            sys.path.insert(0, {str(EXAMPLES)!r})
            from matmul import matmul
            x = jax.ShapeDtypeStruct((8192, 8192), jnp.bfloat16, sharding=sharding)
            run, args = (lambda a, b: matmul(a, b, bm={c["bm"]}, bk={c["bk"]}, bn={c["bn"]})), (x, x)
            """,
        )
        for c in edge + top
    }
    assert all("fits" not in said[tuple(c.values())] for c in edge), said
    assert all(said[tuple(c.values())].strip() == "fits" for c in top), said
