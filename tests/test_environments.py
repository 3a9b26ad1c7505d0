"""Managed jax environments and `check --jax`: an environment that cannot be made (the
registry unreachable) says so with the version and pip's error line and leaves nothing
half-made; a maker waits for the one holding the lock and removes a killed run's leftovers;
and from a project on this venv's jax, `check --jax 0.12.0.1` reports both compilers'
verdicts, the difference on its line."""

from __future__ import annotations

import fcntl
import os
import threading
import time

import pytest
from support import ROOT
from support.cli import run_cli, run_json
from support.environments import closed_port, make_environment, unreachable_registry

from vmem_lsp.compile import environments
from vmem_lsp.compile.interpreter import probe

NEXT = "0.12.0.1"  # served to Python 3.12+ only: the maker finds a newer Python than this venv's
SUBJECT = ROOT / "tests" / "data" / "kernels" / "jax_versions.py"


def leftovers(folder) -> list[str]:
    """What the maker left in its root beside its lock and log files."""
    return sorted(n for n in os.listdir(folder) if not n.endswith((".lock", ".log")))


def test_an_unreachable_registry_is_a_clear_error_and_leaves_nothing(tmp_path):
    environ = {**os.environ, environments.ENVS_VARIABLE: str(tmp_path), **unreachable_registry(closed_port())}
    said: list[str] = []
    with pytest.raises(environments.EnvironmentFailed) as failed:
        make_environment(NEXT, environ, said)
    message = str(failed.value)
    assert f"jax {NEXT}" in message and "installing jax[tpu]==0.12.0.1 failed" in message, message
    assert "ERROR:" in message and "jax" in message.split("ERROR:")[1], message  # pip's own line
    log = tmp_path / "jax-0.12.0.1-py3.12.log"
    assert str(log) in message and log.is_file()
    assert leftovers(tmp_path) == []
    assert any("making an environment for jax 0.12.0.1" in line for line in said), said


def test_check_says_which_version_could_not_be_made_and_exits_2(tmp_path):
    env = {environments.ENVS_VARIABLE: str(tmp_path / "envs"), **unreachable_registry(closed_port())}
    done = run_cli("check", "--target", "v6e", "--jax", NEXT, str(SUBJECT), env=env, timeout=600)
    assert done.returncode == 2, done.stderr
    assert f"cannot make the environment for jax {NEXT}" in done.stderr and "ERROR:" in done.stderr, done.stderr
    assert "making an environment for jax 0.12.0.1" in done.stderr  # progress before the failure
    assert done.stdout == ""
    assert leftovers(tmp_path / "envs") == []


def test_a_maker_waits_for_the_lock_and_clears_a_killed_runs_leftovers(tmp_path):
    """Another process holds the lock (it is making the environment): this one waits, says
    so, and touches nothing; once the lock is free it removes what a killed run left."""
    environ = {**os.environ, environments.ENVS_VARIABLE: str(tmp_path), **unreachable_registry(closed_port())}
    stale = tmp_path / ".making-jax-0.12.0.1-py3.12-999999"
    (stale / "bin").mkdir(parents=True)
    said: list[str] = []
    outcome: list[BaseException] = []

    def make():
        try:
            make_environment(NEXT, environ, said)
        except BaseException as error:  # the registry is unreachable: it must end in EnvironmentFailed
            outcome.append(error)

    with open(tmp_path / "jax-0.12.0.1-py3.12.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        maker = threading.Thread(target=make)
        maker.start()
        deadline = time.monotonic() + 60
        while not any("waiting for another" in line for line in said) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)
        assert any("waiting for another" in line for line in said), said
        assert maker.is_alive() and stale.is_dir() and not (tmp_path / "jax-0.12.0.1-py3.12.log").exists()
        fcntl.flock(lock, fcntl.LOCK_UN)
    maker.join(300)
    assert not maker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], environments.EnvironmentFailed), outcome
    assert leftovers(tmp_path) == []


def managed_or_skip() -> None:
    """The 0.12.0.1 environment in VMEM_JAX_ENVS (CI makes it once), else skip; with
    VMEM_REQUIRE_TOOLS the check makes it (and fails when it cannot)."""
    if os.environ.get("VMEM_REQUIRE_TOOLS"):
        return
    top = environments.root()
    folder = os.path.join(top, environments.name_of(NEXT, (3, 12)))
    if environments.made(NEXT, folder) is None:
        pytest.skip(f"no jax {NEXT} environment in {top}: set {environments.ENVS_VARIABLE} to a folder that has one")


def test_check_with_the_next_jax_reports_both_verdicts_and_the_difference_on_its_line(tmp_path):
    managed_or_skip()
    own = probe(os.path.join(ROOT, ".venv", "bin", "python")).packages or {}
    done, report = run_json("check", "--no-cache", "--target", "v6e", "--jax", NEXT, str(SUBJECT), timeout=900)
    assert done.returncode == 1, done.stderr
    compilers = report["compilers"]
    assert [c["jax"] for c in compilers] == [own["jax"], NEXT] and compilers[1]["libtpu"] == "0.0.50.1", compilers
    assert [c["source"] for c in compilers] == ["the project's", "managed"]
    ours = f"jax {own['jax']} (libtpu {own['libtpu']})"
    by_line = {(d["range"]["start_line"], d["code"]): d for d in report["diagnostics"]}
    # int8_rows' BlockSpec: libtpu 0.0.42.1 refuses the s8 (8, 128) block, 0.0.50.1 compiles it.
    block = by_line[(16, "VMEM030")]
    assert block["severity"] == "error"
    assert block["message"].startswith(f"compiles with jax {NEXT} (libtpu 0.0.50.1), fails with {ours}: "), block
    assert block["facts"]["jax"] == [own["jax"]] and block["facts"]["fits_with"][0]["jax"] == NEXT
    # whole_copy overflows alike on both: shown once, as it is, with no compiler named.
    overflow = [d for d in report["diagnostics"] if d["code"] == "VMEM002"]
    assert len(overflow) == 1 and "jax" not in overflow[0]["facts"], overflow
    assert "128.00M of 127.94M" in overflow[0]["message"] and "with jax" not in overflow[0]["message"]
    assert f"compilers: {ours[:-1]}, the project's), jax {NEXT} (libtpu 0.0.50.1, managed)" in report["summary"]


def test_versions_are_release_numbers_only():
    """A pyproject's `jax` list reaches pip's command line: nothing but a release number passes."""
    assert environments.parse_versions(["0.12.0.1", "0.11.2,0.12.0.1"]) == ("0.12.0.1", "0.11.2")
    assert environments.parse_versions("0.10.2") == ("0.10.2",)
    for bad in ("0.12; rm -rf ~", "latest", "0.12.*", ">=0.11", "--index-url=x"):
        with pytest.raises(ValueError):
            environments.parse_versions([bad])
    assert environments.python_needed("0.10.2") == (3, 11) and environments.python_needed("0.11.0") == (3, 12)


def test_the_environments_root_is_the_variable_else_the_user_cache():
    assert environments.root({"VMEM_JAX_ENVS": "/ci/envs"}) == "/ci/envs"
    assert environments.root({"XDG_CACHE_HOME": "/c", "HOME": "/h"}) == "/c/vmem-lsp/envs"
