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
from support.tiers import CLUSTER, starts

from vmem_lsp.chips import CHIPS
from vmem_lsp.config import Settings, sources
from vmem_lsp.doctor import pins

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
    for name in ("jax", "jaxlib", "libtpu"):
        assert f"{name} {version(name)} here (pinned {version(name)})" in done.stdout
    assert re.search(r"the local worker started and speaks protocol \d+", done.stdout)
    assert f"cache folder {root / '.vmem_lsp_cache'}" in done.stdout
    assert re.search(r"\d+ jobs?, each worker's share", done.stdout)
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
    assert report["versions"]["pinned"] == {n: version(n) for n in ("jax", "jaxlib", "libtpu")}
    assert report["versions"]["installed"] == report["versions"]["pinned"]
    assert set(report["chips"]) == set(CHIPS)
    assert all(chip["compiled"] and chip["seconds"] >= 0 for chip in report["chips"].values())
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
    assert "compiled in" not in done.stdout
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


def test_pins():
    assert pins(
        [
            "jax[tpu]==0.10.2",
            "jaxlib==0.10.2",
            "libtpu==0.0.42.1",
            's3fs>=2023.1.0; extra == "s3"',
            'ray==2.60.0; extra == "test"',
            "tqdm==4.70.1",
        ]
    ) == {"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": "0.0.42.1", "tqdm": "4.70.1"}
    assert pins(None) == {}


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

    pinned = {"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": "0.0.42.1"}
    checks = {
        c.name: c
        for c in version_checks({"jax": "0.9.0", "jaxlib": "0.10.2", "libtpu": None}, pinned, "here", judged=True)
    }
    assert checks["jaxlib"].status == "ok"
    assert (
        checks["jax"].status == "problem"
        and checks["jax"].message == "jax 0.9.0 here, but vmem-lsp is pinned to 0.10.2"
    )
    assert checks["jax"].fix.startswith("pip install 'jax[tpu]==0.10.2' 'jaxlib==0.10.2' 'libtpu==0.0.42.1'")
    assert checks["libtpu"].status == "problem" and "--no-compile" in checks["libtpu"].fix
    # A worker command compiles elsewhere: what is installed here is information only.
    assert {c.status for c in version_checks({"jax": "0.9.0"}, pinned, "here", judged=False)} == {"info"}
