"""`check --backend ray` on a real local Ray cluster of two nodes (`ray start
--head`, and a second node joined with `ray start --address`, on this
machine): the results equal the local pool's, a node killed mid-run loses no
example (Ray retries its task elsewhere), Ctrl-C cancels the tasks out,
without Ray the flag says how to install it, a cluster that is down is said
at once, and `doctor` compiles its tiny kernel there."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import EXAMPLES, ROOT
from support.cli import hide, run_cli

# Found, not imported: importing ray costs every collection, the fast tier's too (0.4 s).
if importlib.util.find_spec("ray") is None:
    pytest.skip("the test extras install ray", allow_module_level=True)
from support.ray_cluster import Cluster  # after the skip: it needs ray's CLI

SLOW = ROOT / "tests" / "data" / "ray" / "slow.py"


@pytest.fixture(scope="module")
def marks(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("marks")


@pytest.fixture(scope="module")
def cluster(marks):
    """Head plus one joined node, one CPU each; the slow examples on its nodes mark `marks`."""
    env = {**os.environ, "VMEM_RAY_MARKS": str(marks), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    cluster = Cluster(env)
    try:
        cluster.start(head=True)
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def slow_project(tmp_path: Path, seconds: int) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "slow.py").write_text(SLOW.read_text().replace("SECONDS", str(seconds)))
    return project


def wait_for_marks(marks: Path, suffix: str, count: int, timeout: float = 180) -> list[Path]:
    deadline = time.monotonic() + timeout
    while len(found := sorted(marks.glob(f"*.{suffix}"))) < count:
        assert time.monotonic() < deadline, f"only {len(found)} of {count} examples started"
        time.sleep(0.2)
    return found


def without_timing(report: dict) -> list:
    return report["diagnostics"]


def test_the_results_equal_the_local_pools(cluster, tmp_path):
    """pyproject's backend = "ray" and ray-address; the same diagnostics as the local pool, byte for byte."""
    project = tmp_path / "examples"
    shutil.copytree(EXAMPLES, project)
    (project / "pyproject.toml").write_text(
        f'[tool.vmem-lsp]\ntargets = ["v5e", "v6e"]\nbackend = "ray"\nray-address = "{cluster.address}"\n'
    )
    on_ray = run_cli("check", ".", "--no-cache", "--format", "json", cwd=project)
    local = run_cli("check", ".", "--no-cache", "--format", "json", "--backend", "local", cwd=project)
    assert on_ray.returncode == local.returncode == 1, on_ray.stderr + local.stderr
    ray_report, local_report = json.loads(on_ray.stdout), json.loads(local.stdout)
    assert ray_report["diagnostics"] == local_report["diagnostics"]
    assert any(d["code"] == "VMEM001" for d in ray_report["diagnostics"])
    assert "6 compiled" in ray_report["summary"], ray_report["summary"]


def test_a_node_killed_mid_run_loses_no_example(cluster, marks, tmp_path):
    """Three slow examples on three one-CPU nodes; the third node is killed
    while its example sleeps, and Ray's retry finishes that example elsewhere."""
    for old in marks.iterdir():
        old.unlink()
    doomed = cluster.start()
    project = slow_project(tmp_path, seconds=8)
    check = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vmem_lsp",
            "check",
            str(project),
            "--no-cache",
            "--target",
            "v5e",
            "--format",
            "json",
            "--backend",
            "ray",
            "--ray-address",
            cluster.address,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_marks(marks, "started", 3)
        cluster.kill(doomed)
        out, err = check.communicate(timeout=300)
    finally:
        check.kill()
    report = json.loads(out)
    assert check.returncode == 0, err + out
    assert [d for d in report["diagnostics"] if d["code"] != "VMEM007"] == [], report
    assert "3 examples" in report["summary"] and "3 compiled" in report["summary"], report["summary"]
    # The killed node's example started twice (once there, once on a live node) and all three finished.
    assert len(list(marks.glob("*.started"))) == 4
    assert sorted(p.name.split(".")[0] for p in marks.glob("*.done")) == ["1", "2", "3"]


def test_ctrl_c_cancels_the_tasks(cluster, marks, tmp_path):
    """Ctrl-C while two examples sleep for minutes: the CLI ends as Ctrl-C
    ends it (130), and the workers running the examples are gone within
    seconds: the tasks were cancelled, not left to finish."""
    for old in marks.iterdir():
        old.unlink()
    project = slow_project(tmp_path, seconds=300)
    check = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vmem_lsp",
            "check",
            str(project),
            "--no-cache",
            "--target",
            "v5e",
            "--backend",
            "ray",
            "--ray-address",
            cluster.address,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        started = wait_for_marks(marks, "started", 2)
        check.send_signal(signal.SIGINT)
        check.wait(timeout=30)
    finally:
        check.kill()
    assert check.returncode in (130, -signal.SIGINT), check.returncode
    workers = [int(p.name.split(".")[1]) for p in started]
    deadline = time.monotonic() + 15
    while any(Path(f"/proc/{pid}").exists() for pid in workers):
        assert time.monotonic() < deadline, f"the examples' workers still run after Ctrl-C: {workers}"
        time.sleep(0.2)
    assert not list(marks.glob("*.done"))
    # The cluster is left as it was: both nodes serve the next run.
    assert cluster.alive() == 2


def test_without_ray_the_backend_says_how_to_install(tmp_path):
    done = run_cli(
        "check",
        str(EXAMPLES / "matmul.py"),
        "--backend",
        "ray",
        "--no-cache",
        env={"PYTHONPATH": hide(tmp_path / "no_ray", "ray")},
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pip install 'vmem-lsp[ray]'" in done.stderr, done.stderr


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_cluster_that_is_down_is_said_at_once(tmp_path):
    """ray.init tried an address where nothing listens for 5.5 minutes; the
    backend asks the address first and says so in a second (check and doctor)."""
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = run_cli("check", str(EXAMPLES / "matmul.py"), "--backend", "ray", "--ray-address", address, "--no-cache")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"cannot reach the Ray cluster at {address}: nothing answers there" in done.stderr, done.stderr
    assert time.monotonic() - started < 60
    (tmp_path / "pyproject.toml").write_text(f'[tool.vmem-lsp]\nbackend = "ray"\nray-address = "{address}"\n')
    report = json.loads(run_cli("doctor", "--format", "json", cwd=tmp_path).stdout)
    [backend] = [c for c in report["checks"] if c["section"] == "backend"]
    assert backend["status"] == "problem" and "nothing answers there" in backend["message"], backend
    assert "ray start --head" in backend["fix"]


def test_doctor_compiles_its_tiny_kernel_on_the_cluster(cluster, tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.vmem-lsp]\ntargets = ["v6e"]\nbackend = "ray"\nray-address = "{cluster.address}"\n'
    )
    done = run_cli("doctor", "--format", "json", cwd=tmp_path)
    report = json.loads(done.stdout)
    [backend] = [c for c in report["checks"] if c["section"] == "backend"]
    assert backend["status"] == "ok", backend
    assert f"the Ray cluster {cluster.address}: 2 nodes, 2 CPUs; a tiny compile for v6e ran there" in backend["message"]


@pytest.mark.asyncio
async def test_the_language_server_compiles_on_ray(cluster, tmp_path):
    """The editor's settings backend "ray" and rayAddress: the save's compile
    runs as Ray tasks and its verdict is on the BlockSpec, as the local worker's is."""
    from support.lsp_client import Editor, running_server, wait_for

    work = tmp_path / "project"
    work.mkdir()
    shutil.copy(EXAMPLES / "matmul.py", work / "matmul.py")
    (work / "pyproject.toml").write_text('[tool.vmem-lsp]\ncache-dir = ".cache"\n')
    options = {"targets": ["v5e"], "backend": "ray", "rayAddress": cluster.address}
    async with running_server(work, options=options) as client:
        editor = Editor(client, work / "matmul.py")
        editor.open()
        found = await wait_for(
            lambda: [d for d in editor.diagnostics() if d.data and d.data.get("tier") == "compiler"],
            what="v5e diagnostics from Ray",
        )
        assert any("18.36M of 16.00M scoped VMEM on TPU v5e" in d.message for d in found)
        assert any("compiling on Ray: 2 CPUs" in m.message for m in client.log_messages), [
            m.message for m in client.log_messages
        ]
