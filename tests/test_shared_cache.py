"""A cache-dir that is a URL: a real S3-compatible server (moto's
server mode, on a free port of this machine), the real CLI as a subprocess and
the real compiler, as CI shards would share one bucket."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import threading
import uuid

import pytest
from support import EXAMPLES
from support.cli import run_cli
from support.tiers import CLUSTER, starts

from vmem_lsp.compile.cache import ResultCache, seal, unseal
from vmem_lsp.compile.client import CheckRequest
from vmem_lsp.results import ExampleResult

# Found, not imported: importing moto's server and s3fs costs every collection, the fast tier's
# too, about half a second; the fixture that starts the server imports it.
if importlib.util.find_spec("moto") is None or importlib.util.find_spec("s3fs") is None:
    pytest.skip("the test extras install moto[server] and s3fs", allow_module_level=True)

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
@starts(CLUSTER)
def s3():
    """(environment for a process that uses the bucket, a boto3 client)."""
    import boto3
    from moto import server as moto_server

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    environment = {**CREDENTIALS, "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    yield environment, boto3.client("s3", endpoint_url=environment["AWS_ENDPOINT_URL"], **boto_credentials())
    server.stop()


def boto_credentials() -> dict:
    return {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


def new_bucket(client) -> str:
    name = f"shared-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return name


def objects(client, bucket: str) -> dict[str, bytes]:
    listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def point_at(project, url: str) -> None:
    (project / "pyproject.toml").write_text(f'[tool.vmem-lsp]\ntargets = ["v6e"]\ncache-dir = "{url}"\n')


@pytest.fixture(scope="module")
def shard_one(s3, tmp_path_factory):
    """A project whose pyproject names an s3:// cache, checked once (cold):
    (project, bucket, the run). The entries' keys hold the example's absolute
    path, so later runs check this same folder, as a second CI shard would."""
    environment, client = s3
    project = tmp_path_factory.mktemp("project")
    shutil.copy(EXAMPLES / "copy_whole.py", project / "copy_whole.py")
    bucket = new_bucket(client)
    point_at(project, f"s3://{bucket}/vmem")
    done = run_cli("check", ".", cwd=project, env=environment)
    return project, bucket, done


def test_a_second_shard_hits_the_first_ones_entries(s3, shard_one):
    environment, client = s3
    project, bucket, first = shard_one
    assert first.returncode == 1, first.stderr
    assert "(1 compiled, 0 cached" in first.stdout
    assert not (project / ".vmem_lsp_cache").exists()
    stored = objects(client, bucket)
    assert len(stored) == 1 and all(key.startswith("vmem/") for key in stored)
    assert all(unseal(data) for data in stored.values())
    point_at(project, f"s3://{bucket}/vmem")
    second = run_cli("check", ".", cwd=project, env=environment)
    assert second.returncode == 1, second.stderr
    assert "(0 compiled, 1 cached" in second.stdout
    assert diagnostics(second) == diagnostics(first) and "VMEM001" in diagnostics(first)


def diagnostics(done) -> str:
    """The output less its summary, which counts compiles and seconds."""
    return "\n".join(line for line in done.stdout.splitlines() if " cached, " not in line)


def copy_bucket(client, source: str) -> str:
    """A new bucket holding the source's entries, so a test can damage them alone."""
    target = new_bucket(client)
    for key in objects(client, source):
        client.copy_object(Bucket=target, Key=key, CopySource={"Bucket": source, "Key": key})
    return target


@pytest.mark.parametrize("damage", ["truncated", "altered"])
def test_a_damaged_entry_is_compiled_again_and_replaced(s3, shard_one, damage):
    """Truncated: half an object, as a store without atomic writes could leave.
    Altered: still valid JSON, but not what was written (a verdict flipped)."""
    environment, client = s3
    project, source, _ = shard_one
    bucket = copy_bucket(client, source)
    ((key, data),) = objects(client, bucket).items()
    body = data[: len(data) // 2] if damage == "truncated" else data.replace(b'"TPU v6', b'"TPU v5')
    assert body != data
    client.put_object(Bucket=bucket, Key=key, Body=body)
    # Through fsspec's own configuration this time, as a user without AWS_* variables would.
    fsspec_environment = {
        "FSSPEC_S3_ENDPOINT_URL": environment["AWS_ENDPOINT_URL"],
        "FSSPEC_S3_KEY": "testing",
        "FSSPEC_S3_SECRET": "testing",
    }
    point_at(project, f"s3://{bucket}/vmem")
    again = run_cli("check", ".", cwd=project, env=fsspec_environment)
    assert again.returncode == 1, again.stderr
    assert "(1 compiled, 0 cached" in again.stdout
    assert f"cache entry {key.rsplit('/', 1)[1][:12]}" in again.stderr and "ignored" in again.stderr
    assert unseal(objects(client, bucket)[key])  # whole again
    point_at(project, f"s3://{bucket}/vmem")
    third = run_cli("check", ".", cwd=project, env=environment)
    assert "(0 compiled, 1 cached" in third.stdout, third.stderr


@pytest.mark.parametrize("conditional", [True, False], ids=["if-none-match", "temporary-key-then-copy"])
def test_writers_racing_on_one_key_all_succeed(s3, conditional, monkeypatch):
    """Several caches (as shards would be) put one key at the same moment:
    none fails, the entry is whole, no temporary key is left behind."""
    environment, client = s3
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    bucket = new_bucket(client)
    request = CheckRequest("f(f32[8, 128])", "v6e", path="/project/kernel.py")
    caches = [ResultCache(f"s3://{bucket}/vmem") for _ in range(6)]
    for cache in caches:
        assert cache.enabled and cache.store.exclusive
        cache.store.exclusive = conditional
    start = threading.Barrier(len(caches))

    def put(cache, number):
        start.wait()
        cache.put(request, ExampleResult("v6e", f"TPU v6e ({number})"))

    threads = [threading.Thread(target=put, args=(cache, n)) for n, cache in enumerate(caches)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [cache.store.failed for cache in caches] == [False] * len(caches)
    stored = objects(client, bucket)
    assert list(stored) == [f"vmem/{caches[0].key(request)[:2]}/{caches[0].key(request)}.json"]
    assert unseal(next(iter(stored.values())))
    found = ResultCache(f"s3://{bucket}/vmem").get(request)
    assert found is not None and found.device_kind.startswith("TPU v6e (")


def test_an_entry_is_its_digest_and_length_then_the_body():
    body = b'{"target": "v6e"}'
    assert unseal(seal(body)) == body
    for broken in (seal(body)[:-1], seal(body) + b" ", seal(body).replace(b"v6e", b"v5e"), b"", body):
        with pytest.raises(ValueError):
            unseal(broken)


@pytest.mark.parametrize("scheme", ["", "file://"], ids=["folder", "fsspec-url"])
def test_a_truncated_entry_is_counted_and_replaced_in_any_store(tmp_path, scheme):
    """A plain folder (write, then rename) and an fsspec URL with real folders
    (a temporary key, then a move): the same entry format, the same distrust."""
    cache = ResultCache(f"{scheme}{tmp_path}/vmem")
    request = CheckRequest("f(f32[8, 128])", "v6e", path="/project/kernel.py")
    cache.put(request, ExampleResult("v6e", "TPU v6e"))
    (entry,) = (tmp_path / "vmem").glob("*/*.json")
    entry.write_bytes(entry.read_bytes()[:-3])
    assert cache.get(request) is None and cache.rejected == 1
    cache.put(request, ExampleResult("v6e", "TPU v6e"))
    assert cache.get(request) is not None and cache.rejected == 1
    left = {p.name for p in (tmp_path / "vmem").rglob("*") if p.is_file()} - {".gitignore"}
    assert left == {entry.name}  # no temporary file behind


def test_a_local_folder_never_imports_fsspec(tmp_path):
    code = (
        "import sys; from vmem_lsp.compile.cache import ResultCache; "
        "from vmem_lsp.compile.client import CheckRequest; from vmem_lsp.results import ExampleResult; "
        f"c = ResultCache({str(tmp_path)!r}); r = CheckRequest('f()', 'v6e', path='/k.py'); "
        "c.put(r, ExampleResult('v6e', 'TPU v6e')); assert c.get(r) is not None; "
        "assert 'fsspec' not in sys.modules, 'fsspec imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_url_without_its_filesystem_says_what_to_install_and_checks_uncached(tmp_path):
    """gs:// without gcsfs: the check runs (a CI job is not failed by a missing
    speed-up) and says which extra brings it."""
    try:
        import gcsfs  # noqa: F401

        pytest.skip("gcsfs is installed here")
    except ImportError:
        pass
    shutil.copy(EXAMPLES / "copy_whole.py", tmp_path / "copy_whole.py")
    point_at(tmp_path, "gs://no-such-bucket/vmem")
    done = run_cli("check", ".", "--no-compile", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "pip install 'vmem-lsp[gcs]'" in done.stderr and "Checking without a cache" in done.stderr
    assert "(1 traced (layout model only), 0 cached" in done.stdout


def test_the_command_line_takes_a_url_too(s3, tmp_path):
    environment, client = s3
    bucket = new_bucket(client)
    shutil.copy(EXAMPLES / "copy_whole.py", tmp_path / "copy_whole.py")
    done = run_cli(
        "check",
        ".",
        "--no-compile",
        "--target",
        "v6e",
        "--cache-dir",
        f"s3://{bucket}/vmem",
        cwd=tmp_path,
        env=environment,
    )
    assert done.returncode == 1, done.stderr
    assert len(objects(client, bucket)) == 1


def test_a_checkout_at_another_path_hits_the_same_entries(s3, shard_one, tmp_path):
    """A CI runner's checkout and a developer's sit at different paths: the
    keys and entries hold paths relative to the project, so the second is
    answered from the first's entries, and its diagnostics name its own files."""
    environment, client = s3
    project, bucket, first = shard_one
    elsewhere = tmp_path / "another" / "checkout"
    shutil.copytree(project, elsewhere)
    point_at(elsewhere, f"s3://{bucket}/vmem")
    again = run_cli("check", str(elsewhere / "copy_whole.py"), "--format", "json", cwd=tmp_path, env=environment)
    assert again.returncode == 1, again.stderr
    report = json.loads(again.stdout)
    assert "(0 compiled, 1 cached" in report["summary"], report["summary"]
    paths = {d["abs_path"] for d in report["diagnostics"]}
    assert paths == {str(elsewhere / "copy_whole.py")}, paths
    assert len(objects(client, bucket)) == 1  # nothing new written
