"""Trust: what a trusted folder covers, on real folders and symlinks, and the
`vmem-lsp trust` / `untrust` commands as a user runs them."""

from __future__ import annotations

import os

from support import EXAMPLES
from support.cli import run_cli

from vmem_lsp.trust import trusted_by


def test_an_entry_covers_its_subfolders_and_nothing_else(tmp_path):
    a, b, b2 = tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b2"
    (b / "sub").mkdir(parents=True)
    b2.mkdir()
    entry = [str(b)]
    assert trusted_by(str(b), entry) == str(b)
    assert trusted_by(str(b / "sub" / "kernel.py"), entry) == str(b)
    assert trusted_by(str(b2), entry) is None
    assert trusted_by(str(a), entry) is None
    assert trusted_by(str(b / ".." / "b2" / "kernel.py"), entry) is None


def test_a_folder_written_from_home_is_the_users(tmp_path, monkeypatch):
    """An editor's trustedFolders as users write them, "~/src/kernels" (Helix, Emacs: no client
    expands it as Neovim's does), trust that folder under the user's home and nothing else."""
    monkeypatch.setenv("HOME", str(tmp_path))
    kernels = tmp_path / "src" / "kernels"
    kernels.mkdir(parents=True)
    assert trusted_by(str(kernels / "k.py"), ["~/src/kernels"]) == str(kernels)
    assert trusted_by(str(tmp_path / "src" / "other.py"), ["~/src/kernels"]) is None


def test_symlinks_never_widen_trust(tmp_path):
    b, elsewhere, outside = tmp_path / "a" / "b", tmp_path / "elsewhere", tmp_path / "outside"
    b.mkdir(parents=True)
    elsewhere.mkdir()
    outside.mkdir()
    (elsewhere / "into_b").symlink_to(b)  # from an untrusted folder into the trusted one
    (b / "out").symlink_to(outside)  # from the trusted folder out of it
    (b / "inner").mkdir()
    (b / "alias").symlink_to(b / "inner")  # within it: still trusted
    entry = [str(b)]
    assert trusted_by(str(elsewhere / "into_b"), entry) is None
    assert trusted_by(str(elsewhere / "into_b" / "kernel.py"), entry) is None
    assert trusted_by(str(b / "out"), entry) is None
    assert trusted_by(str(b / "out" / "kernel.py"), entry) is None
    assert trusted_by(str(b / "alias" / "kernel.py"), entry) == str(b)


def test_a_trusted_folder_reached_through_a_symlinked_parent_is_trusted(tmp_path):
    """/home/u -> /data/u: the folder itself is real, only its parent is a link."""
    real_home = tmp_path / "data" / "u"
    (real_home / "proj").mkdir(parents=True)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "u").symlink_to(real_home)
    entry = [os.path.realpath(tmp_path / "home" / "u" / "proj")]
    assert trusted_by(str(tmp_path / "home" / "u" / "proj" / "kernel.py"), entry) == entry[0]


def test_trust_untrust_and_list_from_the_command_line(tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    project = tmp_path / "project"
    project.mkdir()
    assert run_cli("trust", "--list", env=env).stdout == ""
    done = run_cli("trust", str(project), env=env)
    assert done.returncode == 0 and str(project) in done.stdout
    assert run_cli("trust", "--list", env=env).stdout.splitlines() == [str(project)]
    assert (tmp_path / "config" / "vmem-lsp" / "trusted").read_text().splitlines()[-1] == str(project)
    assert run_cli("trust", str(project), cwd=project, env=env).returncode == 0  # twice: listed once
    assert run_cli("trust", "--list", env=env).stdout.splitlines() == [str(project)]
    assert run_cli("untrust", str(project), env=env).returncode == 0
    assert run_cli("trust", "--list", env=env).stdout == ""
    done = run_cli("untrust", str(project), env=env)
    assert done.returncode == 1 and "was not trusted" in done.stderr
    assert run_cli("trust", str(tmp_path / "missing"), env=env).returncode == 2


def test_check_says_which_pyproject_worker_it_runs_and_can_refuse_it(tmp_path):
    """`check` runs what it is told, as pytest does, but a worker command
    from the repository's pyproject is named before it runs, and
    --no-pyproject-worker keeps it from running at all."""
    (tmp_path / "pyproject.toml").write_text('[tool.vmem-lsp]\ntargets = ["v6e"]\nworker = "touch pwned"\n')
    (tmp_path / "add_fits.py").write_text((EXAMPLES / "add_fits.py").read_text())
    refused = run_cli("check", "add_fits.py", "--no-cache", "--no-pyproject-worker", cwd=tmp_path)
    assert refused.returncode == 0, refused.stdout + refused.stderr
    assert "not running the worker from pyproject.toml (--no-pyproject-worker): touch pwned" in refused.stderr
    assert not (tmp_path / "pwned").exists()
    used = run_cli("check", "add_fits.py", "--no-cache", cwd=tmp_path)
    assert used.stderr.startswith("using worker from pyproject.toml: touch pwned")
    assert (tmp_path / "pwned").exists() and used.returncode == 1
