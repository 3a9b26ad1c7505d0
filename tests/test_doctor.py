"""`vmem-lsp doctor`: the real CLI as a subprocess, as a user runs it when
something does not work: all well, the JSON report, libtpu hidden, a worker
command that does not start, and bad usage. Each run starts one worker and
compiles one tiny kernel per chip (a few seconds)."""

from __future__ import annotations

import json
import re
import shutil
from importlib.metadata import version

import pytest
from support.cli import hide, run_cli, without_libtpu
from support.old_compilers import old_compiler
from support.project_env import project_venv
from support.tiers import CLUSTER, starts

from vmem_lsp import versions
from vmem_lsp.config import Settings, sources
from vmem_lsp.gpu.targets import GPUS
from vmem_lsp.tpu.chips import CHIPS

CHECK_KEYS = {"section", "name", "status", "message", "fix", "seconds"}


def project(tmp_path, body: str = 'targets = ["v5e"]\n'):
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "doctored"\n\n[tool.vmem-lsp]\n{body}')
    return tmp_path


def setting_line(stdout: str, name: str) -> str:
    found = re.search(rf"^  {name} +=.*$", stdout, re.MULTILINE)
    assert found, f"no settings line for {name}:\n{stdout}"
    return found[0]


def test_all_well(tmp_path):
    root = project(tmp_path)
    done = run_cli("doctor", str(root), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in CHIPS:  # each chip compiled, in one worker, and timed
        assert re.search(rf"^  ok +{name}: compiled in \d+\.\d s", done.stdout, re.MULTILINE), done.stdout
    said = ", ".join(f"{name} {version(name)}" for name in ("jax", "jaxlib", "libtpu"))
    assert f"{said} there: a tested pair" in done.stdout, done.stdout
    assert re.search(r"the local worker started and speaks protocol \d+", done.stdout)
    assert f"cache folder {root / '.vmem_lsp_cache'}" in done.stdout
    # One short sentence a line: the memory plan once, not its job count twice.
    [memory] = re.findall(r"^  info +(\d+ jobs?\b.*)$", done.stdout, re.MULTILINE)
    assert memory.count("job") == 1 and "each worker may hold" in memory, memory
    # The compiler that checks leads, vmem-lsp's own version after it.
    versions = done.stdout.split("versions\n", 1)[1].splitlines()
    assert versions[0].startswith("  info    the worker's Python: ") and "vmem-lsp " in versions[2], versions[:3]
    assert setting_line(done.stdout, "targets").endswith(f"# pyproject.toml:{root / 'pyproject.toml'}")
    assert '["v5e"]' in setting_line(done.stdout, "targets")
    assert setting_line(done.stdout, "timeout").endswith("# default")
    assert done.stdout.rstrip().splitlines()[-1].startswith("all well")


def test_json_report(tmp_path):
    root = project(tmp_path, 'targets = ["v5e"]\ntimeout = 120\n')
    done = run_cli("doctor", str(root), "--format", "json", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert {
        "version",
        "path",
        "ok",
        "exit_code",
        "problems",
        "checks",
        "versions",
        "chips",
        "memory",
        "settings",
        "seconds",
    } <= set(report)
    assert report["ok"] is True and report["exit_code"] == 0 and report["problems"] == []
    for check in report["checks"]:
        assert set(check) == CHECK_KEYS and check["status"] in ("ok", "problem", "info")
    assert report["versions"]["installed"] == {n: version(n) for n in ("jax", "jaxlib", "libtpu")}
    assert report["versions"]["tested"] is True
    assert set(report["chips"]) == set(CHIPS)
    assert all(chip["compiled"] and chip["seconds"] >= 0 for chip in report["chips"].values())
    gpus = [c for c in report["checks"] if c["section"] == "gpus"]  # the CUDA plugin is a test extra
    assert {c["name"] for c in gpus} == set(GPUS) and all(c["status"] == "ok" for c in gpus), gpus
    assert report["memory"]["jobs"] >= 1 and report["memory"]["reason"]
    # Every field of Settings, with its source; fields others add later come along.
    assert list(report["settings"]) == [f for f in Settings.__dataclass_fields__]
    pyproject = f"pyproject.toml:{root / 'pyproject.toml'}"
    assert report["settings"]["targets"] == {"value": ["v5e"], "source": pyproject}
    assert report["settings"]["timeout"] == {"value": 120.0, "source": pyproject}
    assert report["settings"]["trace_timeout"]["source"] == "default"


def test_libtpu_hidden(tmp_path):
    """Where libtpu cannot be loaded, doctor says so and names the --no-compile fallback."""
    done = run_cli(
        "doctor", str(project(tmp_path)), env=without_libtpu(tmp_path / "hidden"), inherit=False, timeout=120
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "PROBLEM libtpu missing: the worker has no TPU compiler" in done.stdout
    assert "vmem-lsp check --no-compile" in done.stdout
    assert not re.search(r"compiled in .*\(TPU", done.stdout)  # no chip compiled (GPU targets may)
    assert re.search(r"^1 problem: chips: libtpu", done.stdout, re.MULTILINE), done.stdout


def test_worker_that_does_not_start(tmp_path):
    root = project(tmp_path, 'worker = "false"\n')
    done = run_cli("doctor", str(root), timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the worker from pyproject.toml did not start: `false`: the worker exited with code 1" in done.stdout
    assert f"fix `worker` in {root / 'pyproject.toml'}" in done.stdout
    assert "no chip tried: the worker did not start" in done.stdout
    assert setting_line(done.stdout, "worker").endswith(f"# pyproject.toml:{root / 'pyproject.toml'}")
    assert re.search(r"^2 problems: worker, chips", done.stdout, re.MULTILINE), done.stdout


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no ssh client")
def test_ssh_worker_shows_ssh_words(tmp_path):
    done = run_cli("doctor", str(project(tmp_path)), "--worker", "ssh nohost.invalid vmem-lsp worker", timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the worker from --worker did not start" in done.stdout
    assert "ssh: Could not resolve hostname nohost.invalid" in done.stdout  # ssh's own words
    assert "BatchMode=yes" in done.stdout and "drop the --worker option" in done.stdout
    assert setting_line(done.stdout, "worker").endswith("# --worker")


def test_shared_cache_without_s3fs(tmp_path):
    """An s3:// cache with s3fs missing: said, with the extra to install; doctor does not fail."""
    root = project(tmp_path, 'cache-dir = "s3://some-bucket/vmem"\n')
    done = run_cli(
        "doctor", str(root), "--format", "json", env={"PYTHONPATH": hide(tmp_path / "hidden", "s3fs")}, timeout=120
    )
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["problems"] == ["cache"]
    cache = next(c for c in report["checks"] if c["section"] == "cache")
    assert cache["message"].startswith("shared cache s3://some-bucket/vmem: ")
    assert cache["fix"] == "pip install 'vmem-lsp[s3]'"


def test_bad_usage(tmp_path):
    assert run_cli("doctor", str(tmp_path / "nowhere")).returncode == 2
    assert run_cli("doctor", "--format", "sarif").returncode == 2


def test_unknown_pyproject_key(tmp_path):
    done = run_cli("doctor", str(project(tmp_path, 'tagrets = ["v5e"]\n')), "--format", "json", timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["problems"] == ["settings: pyproject"]
    problem = next(c for c in report["checks"] if c["status"] == "problem")
    assert "unknown [tool.vmem-lsp] keys: tagrets" in problem["message"] and "pyproject.toml" in problem["fix"]


def test_sources():
    where = sources(["targets", "scoped-vmem-limit", "worker"], "/p/pyproject.toml")
    assert set(where) == set(Settings.__dataclass_fields__)
    assert (
        where["targets"]
        == where["scoped_vmem_limit"]
        == where["scoped_vmem_limit_source"]
        == where["worker"]
        == where["worker_source"]
        == where["root"]
        == "pyproject.toml:/p/pyproject.toml"
    )
    assert where["timeout"] == where["trace_timeout"] == where["cache_dir"] == "default"
    assert set(sources([], None).values()) == {"default"}


@pytest.fixture(scope="module")
@starts(CLUSTER)
def s3_endpoint():
    """A real S3-compatible server (moto's server mode) on a free port: (environment, boto3 client)."""
    moto_server = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    import boto3

    credentials = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    environment = {**credentials, "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    yield (
        environment,
        boto3.client(
            "s3",
            endpoint_url=environment["AWS_ENDPOINT_URL"],
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ),
    )
    server.stop()


def test_shared_cache_reachable_or_its_bucket_missing(tmp_path, s3_endpoint):
    environment, client = s3_endpoint
    client.create_bucket(Bucket="doctor-cache")
    client.put_object(Bucket="doctor-cache", Key="vmem/ab/abc.json", Body=b"{}")
    for url, code, words in (
        ("s3://doctor-cache/vmem", 0, "reachable (1 entry at its top)"),
        ("s3://doctor-cache/not-yet", 0, "reachable (0 entries at its top)"),
        ("s3://no-such-bucket/vmem", 1, "the bucket no-such-bucket does not exist"),
    ):
        folder = tmp_path / url.replace("/", "_").replace(":", "")
        folder.mkdir()
        done = run_cli(
            "doctor", str(project(folder, f'cache-dir = "{url}"\n')), "--format", "json", env=environment, timeout=120
        )
        report = json.loads(done.stdout)
        cache = next(c for c in report["checks"] if c["section"] == "cache")
        assert cache["message"] == f"shared cache {url}: {words}", report
        assert done.returncode == code and report["settings"]["cache_dir"]["value"] == url


def test_version_checks():
    from vmem_lsp.doctor import version_checks

    def statuses(found, judged=True):
        return [(c.status, c.message) for c in version_checks(found, "there", "/p/python", judged)]

    [(status, message)] = statuses({"jax": "0.12.0.1", "jaxlib": "0.12.0.1", "libtpu": "0.0.50.1"})
    assert status == "ok" and "there: a tested pair (supported: jax 0.8.0 to <0.13)" in message
    # Outside the tested pairs, or the supported range: information, never a problem.
    [(status, message)] = statuses({"jax": "0.12.0.1", "jaxlib": "0.12.0.1", "libtpu": "0.0.52"})
    assert status == "info" and "not a tested pair" in message
    [(status, message)] = statuses({"jax": "0.6.2", "jaxlib": "0.6.2", "libtpu": "0.0.17.1"})
    assert status == "info" and "outside the supported range" in message
    [(status, message)] = statuses({"jax": "0.12.0.1", "jaxlib": "0.12.0.1", "libtpu": None})
    assert status == "problem" and message.startswith("libtpu not installed there")
    # A worker command compiles elsewhere: what is installed here is information only.
    assert {status for status, _ in statuses({"jax": None}, judged=False)} == {"info"}


def test_tested_range():
    assert versions.in_tested_range("0.12.0.1", "0.0.50.1") and versions.in_tested_range("0.10.2", "0.0.42.1")
    assert not versions.in_tested_range("0.12.0.1", "0.0.52") and not versions.in_tested_range(None, None)
    assert versions.supported(versions.OLDEST_JAX) and versions.supported("0.12.0.1")
    assert not versions.supported("0.7.2") and not versions.supported("0.13.0") and not versions.supported(None)


def test_healthy_0_12_environment_exits_0(tmp_path):
    """The worker in a pure jax[tpu]==0.12.0.1 venv (nothing of vmem-lsp there, CI's
    VMEM_TEST_PROJECT_VENV): a tested pair, every chip compiled, exit 0."""
    python = project_venv() / "bin" / "python"
    done = run_cli("doctor", str(project(tmp_path)), "--python", str(python), timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"the worker's Python: {python} (from --python)" in done.stdout
    assert "jax 0.12.0.1, jaxlib 0.12.0.1, libtpu 0.0.50.1 there: a tested pair" in done.stdout
    # The worker command, on one line: its nine-line bootstrap script is named, not printed.
    [worker] = [line for line in done.stdout.splitlines() if "the local worker started" in line]
    assert f"`{python} -c <vmem-lsp's worker bootstrap> " in worker and "importlib" not in done.stdout
    for name in CHIPS:
        assert re.search(rf"^  ok +{name}: compiled in \d+\.\d s", done.stdout, re.MULTILINE), done.stdout


def test_pair_jax_refuses_is_a_problem_and_not_compiled(tmp_path):
    """jax 0.10.2 with libtpu 0.0.37 forced in after it: jax refuses the old libtpu; no chip
    counts as compiled."""
    python = old_compiler("0.10.2", libtpu="0.0.37")
    done = run_cli("doctor", str(project(tmp_path)), "--python", str(python), "--format", "json", timeout=180)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert not any(chip["compiled"] for chip in report["chips"].values()), report["chips"]
    refused = [c for c in report["checks"] if c["section"] == "chips" and c["status"] == "problem"]
    assert refused and all("jax refuses this libtpu" in c["message"] for c in refused), refused
    compiler = next(c for c in report["checks"] if c["name"] == "compiler")
    assert compiler["status"] == "info" and "not a tested pair" in compiler["message"]


def test_a_chip_an_old_libtpu_does_not_know_is_said_so(tmp_path):
    """jax[tpu]==0.7.2 brings libtpu 0.0.23, which has no v7x ("Invalid TPU external name:
    TPU7x"): said as such, not as "libtpu is not available"; outside the supported range is
    information."""
    python = old_compiler("0.7.2")
    done = run_cli("doctor", str(project(tmp_path)), "--python", str(python), "--format", "json", timeout=180)
    report = json.loads(done.stdout)
    v7x = next(c for c in report["checks"] if c["section"] == "chips" and c["name"] == "v7x")
    assert v7x["status"] == "info" and "libtpu 0.0.23 does not know this chip" in v7x["message"], v7x
    assert "not available" not in v7x["message"]
    assert report["chips"]["v7x"] == {"compiled": False, "known": False, "seconds": v7x["seconds"]}
    compiler = next(c for c in report["checks"] if c["name"] == "compiler")
    assert compiler["status"] == "info" and "outside the supported range" in compiler["message"]
