"""`check --shard K/N` and `merge` end to end: the real compiler, the CLI as a
subprocess, as a CI matrix runs them. The shards' JSON must show every
(example, chip) pair done once, and their merge must be the unsharded run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support import EXAMPLES
from support.cli import run_cli

TARGETS = ("v5e", "v6e")


def check_args(cache_dir, *paths: str, targets: str = ",".join(TARGETS)) -> tuple:
    return ("check", *(paths or ("examples",)), "--target", targets, "--cache-dir", str(cache_dir))


def shard_runs(count: int, folder: Path, args: tuple) -> list[tuple]:
    """[(process, report, file)] of the N shards of one `check` (args), each written with -o as CI would."""
    folder.mkdir(parents=True, exist_ok=True)
    runs = []
    for index in range(1, count + 1):
        out = folder / f"shard-{index}-of-{count}.json"
        done = run_cli(*args, "--format", "json", "-o", str(out), "--shard", f"{index}/{count}")
        assert done.returncode in (0, 1), done.stderr
        runs.append((done, json.loads(out.read_text()), out))
    return runs


def pairs(report: dict) -> list[tuple[str, str]]:
    return [(p["example"], p["target"]) for p in report["shard"]["work"]]


def written_examples(folder: Path) -> set[str]:
    """ "path:line" of each `# vmem:` line under `folder`, read here, not by vmem-lsp."""
    return {
        f"{path.relative_to(folder.parent).as_posix()}:{number}"
        for path in sorted(folder.glob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.match(r"\s*# vmem: ", line)
    }


def merged(files, *options: str):
    return run_cli("merge", *map(str, files), *options)


@pytest.fixture(scope="module", params=[2, 4])
def sharded(request, tmp_path_factory, cache_dir, examples_check):
    """examples/ on v5e and v6e in N shards (after the unsharded run: the cache is warm)."""
    return request.param, shard_runs(
        request.param, tmp_path_factory.mktemp(f"shards{request.param}"), check_args(cache_dir)
    )


def test_the_shards_do_every_pair_once(sharded):
    count, runs = sharded
    done = [pair for _, report, _ in runs for pair in pairs(report)]
    assert len(done) == len(set(done)), "a pair was checked by two shards"
    expected = {(example, target) for example in written_examples(EXAMPLES) for target in TARGETS}
    assert len(expected) == 8 and set(done) == expected  # examples/' four examples on two chips
    sizes = [len(pairs(report)) for _, report, _ in runs]
    assert max(sizes) - min(sizes) <= 1, sizes  # round-robin: balanced
    for index, (_, report, _) in enumerate(runs, 1):
        shard = report["shard"]
        assert (shard["index"], shard["count"]) == (index, count)
        assert shard["plan"]["pairs"] == 8 and shard["plan"]["examples"] == 4


def test_the_merge_is_the_unsharded_run(sharded, examples_check, cache_dir):
    _, runs = sharded
    whole, whole_report = examples_check
    files = [out for _, _, out in reversed(runs)]  # any order
    done = merged(files, "--format", "json")
    assert done.returncode == whole.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["diagnostics"] == whole_report["diagnostics"]
    assert set(report) == {"version", "summary", "diagnostics"}
    text = merged(files)
    unsharded = run_cli(*check_args(cache_dir))
    assert text.stdout.splitlines()[:-1] == unsharded.stdout.splitlines()[:-1]
    assert text.stdout.splitlines()[-1].startswith(unsharded.stdout.splitlines()[-1].split(" (")[0])
    assert text.returncode == unsharded.returncode == 1


def test_one_cause_across_two_shards_merges_as_one_run_merges_chips(sharded):
    """copy_whole's BlockSpec fails on v5e in one shard and on v6e in another: one diagnostic, both chips."""
    count, runs = sharded
    report = json.loads(merged([out for _, _, out in runs], "--format", "json").stdout)
    spec = [d for d in report["diagnostics"] if d["path"] == "examples/copy_whole.py" and d["code"] == "VMEM001"]
    assert spec and all(d["target"] == "v5e,v6e" for d in spec)
    holders = [i for i, (_, r, _) in enumerate(runs) if any("copy_whole" in e for e, _ in pairs(r))]
    assert len(holders) == 2, "the test wants copy_whole's chips in two shards"


def test_an_empty_shard_is_fine(tmp_path, cache_dir, examples_check):
    runs = shard_runs(9, tmp_path, check_args(cache_dir))  # 8 pairs, 9 shards
    done, last, _ = runs[-1]
    assert pairs(last) == [] and done.returncode == 0
    # It owns a file, so it may say a kernel there is not reached: the merge knows better.
    assert {d["code"] for d in last["diagnostics"]} <= {"VMEM020"}
    whole, whole_report = examples_check
    merge = merged([out for _, _, out in runs], "--format", "json")
    assert merge.returncode == whole.returncode
    assert json.loads(merge.stdout)["diagnostics"] == whole_report["diagnostics"]


def test_the_split_does_not_depend_on_the_order_paths_are_given(tmp_path, cache_dir, examples_check):
    by_folder = shard_runs(2, tmp_path / "folder", check_args(cache_dir))
    listed = check_args(
        cache_dir, "examples/matmul.py", "examples/gpu_matmul.py", "examples/copy_whole.py", "examples/add_fits.py"
    )
    by_files = shard_runs(2, tmp_path / "files", listed)
    assert [pairs(r) for _, r, _ in by_files] == [pairs(r) for _, r, _ in by_folder]
    assert len({r["shard"]["plan"]["digest"] for _, r, _ in by_files + by_folder}) == 1


@pytest.fixture(scope="module")
def two(tmp_path_factory, cache_dir, examples_check):
    folder = tmp_path_factory.mktemp("two")
    return shard_runs(2, folder / "two", check_args(cache_dir)), folder


def refused(files, needle: str):
    done = merged(files)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert needle in done.stderr, done.stderr
    assert done.stdout == ""


def test_merge_refuses_a_missing_shard(two):
    runs, _ = two
    refused([runs[0][2]], "shard 2/2 missing")


def test_merge_refuses_a_shard_given_twice(two):
    runs, _ = two
    refused([runs[0][2], runs[0][2], runs[1][2]], "shard 1/2 given more than once")


def test_merge_refuses_shards_of_different_counts(two, cache_dir):
    runs, folder = two
    four = shard_runs(4, folder / "four", check_args(cache_dir))
    refused([runs[0][2], four[1][2]], "the shards split the run differently")


def test_merge_refuses_shards_of_different_runs(two, cache_dir):
    runs, folder = two
    other = shard_runs(2, folder / "v6e", check_args(cache_dir, targets="v6e"))
    refused([runs[0][2], other[1][2]], "the shards checked different runs")


def test_merge_refuses_different_versions(two):
    runs, folder = two
    report = runs[1][1]
    older = folder / "older.json"
    older.write_text(json.dumps({**report, "version": "0.0.1"}))
    refused([runs[0][2], older], "different vmem-lsp versions")


def test_merge_refuses_overlapping_work(two):
    runs, folder = two
    first = runs[0][1]
    stolen = {**first, "shard": {**first["shard"], "work": first["shard"]["work"] + runs[1][1]["shard"]["work"][:1]}}
    (folder / "overlap.json").write_text(json.dumps(stolen))
    refused([folder / "overlap.json", runs[1][2]], "was checked by both")


def test_merge_refuses_a_report_that_is_no_shard(examples_check, two):
    runs, folder = two
    (folder / "whole.json").write_text(json.dumps(examples_check[1]))
    refused([folder / "whole.json", runs[1][2]], "not the JSON of `vmem-lsp check --shard")


LIB = '''"""Kernels with no example of their own: one reached from a.py, one from nowhere."""
import jax
from jax.experimental import pallas as pl


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def add(x, y):
    spec = pl.BlockSpec((512, x.shape[1]), lambda i: (i, 0))
    return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(x.shape[0] // 512,), in_specs=[spec, spec], out_specs=spec)(x, y)


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def unused(x):
    return pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
'''

PROJECT = {
    "pyproject.toml": '[tool.vmem-lsp]\ntargets = ["v6e"]\n',
    "lib.py": LIB,
    "a.py": "from lib import add\n\n\n# vmem: twice(f32[1024, 512])\ndef twice(x):\n    return add(x, x)\n",
    "b.py": "from lib import pl, jax, copy_kernel\n\n\n# vmem: copy(f32[1024, 512])\ndef copy(x):\n"
    "    return pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)\n",
    "c.py": "# vmem: nothing_here(f32[8, 128]\ndef nothing_here(x):\n    return x\n",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A kernel reached only from another file, one reached from nowhere, a directive that does not parse."""
    folder = tmp_path_factory.mktemp("project")
    for name, text in PROJECT.items():
        (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize("count", [2, 3])
def test_diagnostics_of_no_pair_come_once_and_vmem020_as_one_run_gives_it(project, tmp_path, cache_dir, count):
    """lib.py's owner (shard 2 of 2 or of 3) runs b.py, not a.py: it sees `add` unreached, which a.py's
    shard reached; the merge drops that VMEM020 and keeps `unused`'s, as one run does."""
    args = ("check", str(project), "--cache-dir", str(cache_dir), "--no-compile")
    whole = run_cli(*args, "--format", "json")
    whole_report = json.loads(whole.stdout)
    assert sorted(d["code"] for d in whole_report["diagnostics"]) == ["VMEM007", "VMEM007", "VMEM010", "VMEM020"]
    runs = shard_runs(count, tmp_path, args)
    shown = [d["code"] for _, r, _ in runs for d in r["diagnostics"] if d["code"] == "VMEM010"]
    assert shown == ["VMEM010"], "the bad directive must be reported by one shard"
    told = [d for _, r, _ in runs for d in r["shard"]["parts"] if d["code"] == "VMEM020"]
    assert any("add_kernel" in d["message"] for d in told), "the test wants `add` unreached in its owner's shard"
    merge = merged([out for _, _, out in runs], "--format", "json")
    assert merge.returncode == whole.returncode == 1, merge.stderr
    assert json.loads(merge.stdout)["diagnostics"] == whole_report["diagnostics"]


INT8_MATMUL = """import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def int8_matmul_kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.int32)


# vmem: int8_matmul(s8[256, 256], s8[256, 256])
def int8_matmul(a, b):
    return pl.pallas_call(
        int8_matmul_kernel, out_shape=jax.ShapeDtypeStruct((a.shape[0], b.shape[1]), jnp.int32))(a, b)
"""


def test_where_a_failing_kernel_compiles_is_told_across_shards(tmp_path, cache_dir):
    """An int8 matmul fails on v4 and compiles on v6e; with 2 shards each holds one chip, and the
    merged error still says "compiles on TPU v6e", as one run does."""
    (tmp_path / "int8.py").write_text(INT8_MATMUL)
    args = ("check", str(tmp_path / "int8.py"), "--target", "v4,v6e", "--cache-dir", str(cache_dir))
    whole_done = run_cli(*args, "--format", "json")
    whole = json.loads(whole_done.stdout)["diagnostics"]
    assert any(d["message"].endswith("fails on TPU v4; compiles on TPU v6e") for d in whole), whole
    runs = shard_runs(2, tmp_path / "shards", args)
    assert [[t for _, t in pairs(r)] for _, r, _ in runs] == [["v4"], ["v6e"]]
    merge = merged([out for _, _, out in runs], "--format", "json")
    assert json.loads(merge.stdout)["diagnostics"] == whole and merge.returncode == whole_done.returncode == 1


@pytest.mark.parametrize("bad", ["0/2", "3/2", "1", "one/two"])
def test_a_shard_that_is_not_k_of_n_is_refused(bad):
    done = run_cli("check", "examples", "--shard", bad)
    assert done.returncode == 2 and "--shard wants K/N with 1 <= K <= N" in done.stderr, done.stderr


def test_fixes_want_the_whole_run():
    done = run_cli("check", "examples", "--shard", "1/2", "--fix")
    assert done.returncode == 2 and "--shard checks part of a run" in done.stderr, done.stderr


def test_merge_refuses_a_malformed_report(two):
    runs, folder = two
    cut = {**runs[0][1], "shard": {k: v for k, v in runs[0][1]["shard"].items() if k != "covered"}}
    (folder / "cut.json").write_text(json.dumps(cut))
    refused([folder / "cut.json", runs[1][2]], "a shard report is malformed")


def test_a_shard_that_reaches_two_kernels_of_one_file_writes_its_report(tmp_path):
    """Found by bench/bench_shards.py: the reached sites of one file were sorted
    as [path, dict] pairs, and two in one file made every such shard exit 2."""
    kernels = Path(__file__).parent / "data" / "kernels" / "pytree_specs.py"
    out = tmp_path / "shard.json"
    done = run_cli(
        "check",
        str(kernels),
        "--target",
        "v6e",
        "--no-compile",
        "--format",
        "json",
        "-o",
        str(out),
        "--shard",
        "1/1",
        "--cache-dir",
        str(tmp_path / "c"),
    )
    assert done.returncode in (0, 1), done.stderr
    covered = json.loads(out.read_text())["shard"]["covered"]
    assert len({tuple(sorted(span.items())) for path, span in covered if path.endswith("pytree_specs.py")}) >= 2
