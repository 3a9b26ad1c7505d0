"""A pool sized by memory as well as cores, and a worker
over its memory share reported as such ("needed more than N GB"), not as a
crash. The sizing from numbers, the readers against a fake /proc and cgroup
tree, and the real CLI under a share and under a per-process limit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid

import pytest
from support import EXAMPLES, ROOT

from vmem_lsp.compile import memory, pool
from vmem_lsp.compile.client import CheckRequest
from vmem_lsp.config import ConfigError, Settings, apply
from vmem_lsp.results import ExampleResult

GB = memory.GB
PEAK = memory.DEFAULT_PEAK  # 1.2 GB, before any measurement

HOG = textwrap.dedent('''\
    """An example whose Python holds 2 GiB on the host before it reaches the kernel."""
    import jax
    import numpy as np
    from jax.experimental import pallas as pl


    def copy_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]


    # vmem: hog(f32[1024, 1024])
    def hog(x):
        held = np.ones(2**31, dtype=np.uint8)       # touched: 2 GiB resident
        return pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x) + held[0]


    # vmem: fits(f32[1024, 1024])
    def fits(x):
        return pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    ''')


# ---- sizing from numbers ---------------------------------------------------------


def test_sixteen_cores_and_sixteen_gigabytes_run_thirteen_workers():
    decided = memory.plan(cores=16, available=16 * GB, peak=PEAK)
    assert decided.jobs == 13  # not 15: 15 x 1.2 GB would swap
    assert decided.share_bytes >= PEAK and decided.share_bytes * 13 <= 16 * GB
    assert "13 jobs: 16.0 GB available" in decided.reason and "cores would allow 15" in decided.reason


def test_a_cgroup_limit_of_four_gigabytes_runs_three(tmp_path):
    for version, files, line in (
        ("v2", ("memory.max", "memory.current"), "0::/box/job"),
        ("v1", ("memory.limit_in_bytes", "memory.usage_in_bytes"), "4:memory:/box/job"),
    ):
        root = tmp_path / version
        own = root / ("" if version == "v2" else "memory") / "box" / "job"
        own.mkdir(parents=True)
        (own / files[0]).write_text(f"{5 * GB}\n")
        (own / files[1]).write_text(f"{1 * GB}\n")
        (own.parent / files[0]).write_text("max\n" if version == "v2" else "9223372036854771712\n")
        (own.parent / files[1]).write_text(f"{3 * GB}\n")
        room = memory.cgroup_room(f"{line}\n", str(root))
        assert room == 4 * GB, version
        available = memory.smallest(
            memory.meminfo_available("MemTotal: 33554432 kB\nMemAvailable: 16777216 kB\n"), room
        )
        assert memory.plan(16, available, PEAK).jobs == 3, version


def test_one_core_or_no_memory_still_runs_one():
    assert memory.plan(cores=1, available=64 * GB, peak=PEAK).jobs == 1
    assert memory.plan(cores=16, available=0, peak=PEAK).jobs == 1
    assert memory.plan(cores=16, available=None, peak=PEAK).jobs == 15  # unknown memory: cores decide


def test_settings_win_and_a_per_process_limit_caps_each_share():
    assert memory.plan(16, 16 * GB, PEAK, share=4 * GB).jobs == 4
    assert memory.plan(16, 16 * GB, PEAK, share=4 * GB).share_bytes == 4 * GB
    assert memory.plan(16, 16 * GB, PEAK, jobs=2).jobs == 2
    capped = memory.plan(4, 64 * GB, PEAK, process_cap=2 * GB)
    assert capped.jobs == 3 and capped.share_bytes == 2 * GB and "per-process" in capped.reason


def test_worker_memory_is_a_setting():
    assert apply(Settings(), {"worker-memory": "2GB"}, "pyproject.toml").worker_memory == 2 * GB
    assert apply(Settings(), {"worker-memory": "1.5GiB"}, "pyproject.toml").worker_memory == int(1.5 * GB)
    with pytest.raises(ConfigError, match="worker-memory"):
        apply(Settings(), {"worker-memory": "lots"}, "pyproject.toml")


def test_the_peak_file_never_fails_and_a_url_cache_keeps_it_locally(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    assert memory.worker_peak("s3://bucket/prefix") == PEAK
    assert memory.write_peak("s3://bucket/prefix", 3 * GB)
    assert (tmp_path / "home-cache" / "vmem-lsp" / memory.PEAK_FILE).is_file()
    assert memory.worker_peak("s3://bucket/prefix") == 3 * GB
    assert not memory.write_peak("s3://bucket/prefix", 2 * GB)  # the largest is kept
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert not memory.write_peak(str(blocked / "cache"), GB)  # cannot make the folder: no error
    assert memory.worker_peak(str(blocked / "cache")) == PEAK
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / memory.PEAK_FILE).write_text("{not json")
    assert memory.worker_peak(str(tmp_path / "bad")) == PEAK


def test_a_memory_overrun_is_not_retried_on_the_same_share(monkeypatch):
    calls = []

    class Worker:
        restarts = 0

        def __init__(self, command=None, share=None, peaks=None):
            self.share = share

        def check(self, request, limits):
            calls.append(self.share)
            return ExampleResult(request.target, None, error="needed more than 1.0 GB", error_kind="memory")

        def stop(self):
            pass

    monkeypatch.setattr(pool, "WorkerClient", Worker)
    workers = pool.WorkerPool(size=2, share=GB)
    result = workers.check(CheckRequest("f()", "v5e", path="x.py"), 10.0)
    assert result.error_kind == "memory" and calls == [GB]


def test_the_message_names_the_kernel_and_the_chip_and_how_to_fix_it():
    text = memory.needed_more_than("compile", "matmul_kernel", "v5e", int(2.5 * GB))
    assert text.startswith("the compile of kernel 'matmul_kernel' for v5e needed more than 2.5 GB (")
    assert "fewer --jobs" in text and 'worker-memory = "4GB"' in text
    limited = memory.needed_more_than("lower", "k", "v6e", 2 * GB, "the per-process limit RLIMIT_DATA (ulimit -d)")
    assert "needed more than 2.0 GB (the per-process limit RLIMIT_DATA (ulimit -d): raise it" in limited


def test_a_worker_killed_by_a_signal_near_a_process_limit_ran_out_of_memory():
    from vmem_lsp.compile.client import NEAR_LIMIT, WorkerClient

    client = WorkerClient()  # not started: only its last readings are set
    client.first_status = {"VmData": 1 * GB, "VmSize": 10 * GB}
    client.last_limits = {"VmData": 2 * GB, "VmSize": 18 * GB}
    client.last_status = {"VmData": int(1.9 * GB), "VmSize": 11 * GB}
    assert client._rlimit_hit(NEAR_LIMIT) == (2 * GB, "the per-process limit RLIMIT_DATA (ulimit -d)")
    client.last_status = {"VmData": int(0.5 * GB), "VmSize": 17 * GB}  # the worker's own cap: what it may add
    assert client._rlimit_hit(NEAR_LIMIT) == (
        8 * GB,
        "the worker's cap on what a request may add to its address space (vmem-lsp worker --max-memory-mb)",
    )
    client.last_status = {"VmData": int(0.5 * GB), "VmSize": 11 * GB}
    assert client._rlimit_hit(NEAR_LIMIT) is None  # far from both: a crash, not memory


def test_a_memory_overrun_is_not_cached(tmp_path):
    from vmem_lsp.compile.cache import ResultCache

    cache = ResultCache(str(tmp_path / "cache"))
    request = CheckRequest("hog(f32[8, 128])", "v5e", path=str(tmp_path / "hog.py"))
    cache.put(request, ExampleResult("v5e", None, error="needed more than 1.5 GB", error_kind="memory"))
    assert cache.get(request) is None


# ---- the real CLI ------------------------------------------------------------------


def run_marked(args, cwd, prefix=(), timeout=600, program=("-m", "vmem_lsp")):
    """The CLI (or another `program` of Python's) as a subprocess, its processes
    marked in their environment, and those still alive after it ended (a
    worker left behind)."""
    mark = uuid.uuid4().hex
    done = subprocess.run(
        [*prefix, sys.executable, *program, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "VMEM_TEST_MARK": mark},
    )
    return done, marked_processes(mark)


def marked_processes(mark: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"VMEM_TEST_MARK={mark}".encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def project(tmp_path, settings: str = ""):
    (tmp_path / "hog.py").write_text(HOG)
    (tmp_path / "pyproject.toml").write_text(f'[tool.vmem-lsp]\ntargets = ["v5e"]\n{settings}')
    return tmp_path


def diagnostic_on(report, needle: str, path) -> dict:
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if needle in text)
    [found] = [d for d in report["diagnostics"] if d["range"]["start_line"] == line]
    return found


def test_a_worker_over_its_share_is_stopped_and_reported(tmp_path):
    folder = project(tmp_path, 'worker-memory = "1.5GB"\n')
    done, left = run_marked(["check", "hog.py", "--no-cache", "--format", "json", "--verbose"], folder)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    found = diagnostic_on(report, "# vmem: hog(", folder / "hog.py")
    assert found["code"] == "VMEM010" and found["facts"]["error_kind"] == "memory"
    assert "the example's Python for v5e needed more than 1.5 GB" in found["message"]
    assert "fewer --jobs" in found["message"] and "worker-memory" in found["message"]
    assert "crash" not in found["message"] and "signal" not in found["message"]
    # The next example ran in a new worker, and nothing is left running.
    assert "1 error in 2 examples" in report["summary"]
    assert left == []
    assert "each worker may hold 1.5 GB (worker-memory)" in done.stderr


def test_a_per_process_limit_is_reported_as_memory(tmp_path):
    """Under `prlimit --data` (RLIMIT_DATA: libtpu compiles under 2 GiB of it;
    RLIMIT_AS: the next test) each share is capped at
    the limit, and the example that cannot allocate says which limit."""
    folder = project(tmp_path)
    done, left = run_marked(
        ["check", "hog.py", "--no-cache", "--format", "json", "--verbose"],
        folder,
        prefix=(shutil.which("prlimit"), f"--data={2 * GB}"),
    )
    assert done.returncode == 1, done.stderr
    found = diagnostic_on(json.loads(done.stdout), "# vmem: hog(", folder / "hog.py")
    assert found["facts"]["error_kind"] == "memory"
    assert "the example's Python for v5e needed more than 2.0 GB" in found["message"]
    assert "RLIMIT_DATA" in found["message"]
    assert "each worker may hold 2.0 GB (the per-process memory limit)" in done.stderr
    assert left == []


TUNER = """
import vmem_lsp
from hog import fits, hog

for fn in (hog, fits):
    verdict = vmem_lsp.fits(fn, "f32[1024, 1024]", target="v5e", compile=False)
    print(fn.__name__, verdict.decided_by, verdict.fits, verdict.error)
"""


def test_a_tuners_worker_over_its_share_is_stopped_and_the_next_call_answered(tmp_path):
    """The tuner API's workers are watched as the CLI's: a config whose Python
    holds more than worker-memory gets an error verdict that says so, and the
    next call is answered by a new worker."""
    folder = project(tmp_path, 'worker-memory = "1.5GB"\n')
    (folder / "tuner.py").write_text(TUNER)
    done, left = run_marked([], folder, program=("tuner.py",))
    assert done.returncode == 0, done.stderr
    hog, fits = done.stdout.strip().splitlines()[-2:]
    assert hog.startswith("hog error None") and "needed more than 1.5 GB" in hog, hog
    assert fits == "fits model True None"
    assert left == []


@pytest.mark.asyncio
async def test_the_servers_workers_are_watched_too(tmp_path):
    """The language server's workers (a lane per chip) each have a share: the
    hog is squiggled with what it needed, the example beside it is checked,
    and no worker outlives the server."""
    from support.lsp_client import Editor, running_server, wait_for

    folder = project(tmp_path, 'worker-memory = "1.5GB"\n')
    async with running_server(folder) as client:
        editor = Editor(client, folder / "hog.py")
        editor.open()
        [found] = await wait_for(
            lambda: [d for d in editor.diagnostics() if d.code == "VMEM010"], what="the hog's diagnostic"
        )
        assert "needed more than 1.5 GB" in found.message and found.range.start.line == 10, found
        ready = await wait_for(
            lambda: [m.message for m in client.log_messages if "worker ready" in m.message], what="worker ready log"
        )
        pids = [int(m.split("pid ")[1].split(")")[0]) for m in ready]
    await wait_for(
        lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids), timeout=10, what="the workers to exit"
    )


def test_an_address_space_limit_is_kept_and_reported(tmp_path):
    """Under `prlimit --as` (ulimit -v) the worker's own cap per request stays
    inside the limit it was given, where it once asked for more and every
    request was refused: the example that fits is checked, the hog is told
    which limit stopped it."""
    folder = project(tmp_path)
    done, left = run_marked(
        ["check", "hog.py", "--no-cache", "--format", "json"],
        folder,
        prefix=(shutil.which("prlimit"), f"--as={3 * GB}"),
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    found = diagnostic_on(report, "# vmem: hog(", folder / "hog.py")
    assert found["facts"]["error_kind"] == "memory", found
    assert "RLIMIT_AS" in found["message"]
    assert "1 error in 2 examples" in report["summary"]
    assert left == []


def test_the_peak_is_measured_kept_and_read_by_the_next_run(tmp_path):
    cache = tmp_path / "cache"
    args = ["check", str(EXAMPLES / "add_fits.py"), "--target", "v5e", "--cache-dir", str(cache), "--verbose"]
    first, _ = run_marked([*args, "--no-cache"], ROOT)
    assert first.returncode == 0, first.stderr
    assert "(assumed: none measured yet)" in first.stderr
    kept = json.loads((cache / memory.PEAK_FILE).read_text())
    assert 100 << 20 < kept["peak_bytes"] < 4 * GB, kept  # a worker that imported jax and compiled
    assert memory.worker_peak(str(cache)) == kept["peak_bytes"]
    second, _ = run_marked([*args, "--no-cache"], ROOT)
    assert f"a worker's peak {memory.gb(kept['peak_bytes'])}" in second.stderr
    assert "assumed" not in second.stderr
