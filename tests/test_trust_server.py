"""The server runs nobody's code uninvited. The real server over
stdio, a folder that is not trusted, examples that would leave a marker."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest
from lsprotocol import types
from support import EXAMPLES
from support.cli import run_cli
from support.lsp_client import PUSH_CAPABILITIES, Editor, running_server, wait_for

pytestmark = pytest.mark.asyncio

MARKING = """import pathlib
pathlib.Path(__file__).with_name("ran-on-import").touch()
"""
QUIET_SECONDS = 20  # what the issue asks: after 20 s, still nothing ran


def children(pid: int) -> list[str]:
    """The command lines of the processes `pid` started."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            if entry.isdigit() and parent == pid:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    found.append(f.read().replace(b"\0", b" ").decode())
        except (OSError, ValueError):
            continue
    return found


def hostile_project(tmp_path, pyproject: str = '[tool.vmem-lsp]\ntargets = ["v6e"]\ncache-dir = ".cache"\n'):
    work = tmp_path / "cloned"
    work.mkdir()
    (work / "pyproject.toml").write_text(pyproject)
    (work / "copy_whole.py").write_text(MARKING + (EXAMPLES / "copy_whole.py").read_text())
    return work


def with_show_message_request(client, answer: str | None):
    """Answer window/showMessageRequest as a user would; record each request."""
    asked = []

    @client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
    def show_message_request(params: types.ShowMessageRequestParams):
        asked.append(params)
        return next((a for a in params.actions or [] if a.title == answer), None)

    return asked


async def test_an_untrusted_folder_runs_nothing_until_trusted_from_the_command_line(tmp_path):
    """...and trusted from a terminal, its waiting files compile without a save."""
    work = hostile_project(tmp_path)
    async with running_server(work, trusted=False) as client:
        editor = Editor(client, work / "copy_whole.py")
        editor.open()
        await asyncio.sleep(QUIET_SECONDS)
        assert not (work / "ran-on-import").exists(), "the untrusted folder's code ran"
        # Nor a worker started ahead, in vmem-lsp's own Python: the folder's is the one it will use.
        workers = [c for c in children(client._server.pid) if "vmem_lsp worker" in c or "worker_server" in c]
        assert workers == [], "a worker started in a folder not trusted"
        [notice] = client.messages  # no showMessageRequest support: one showMessage
        assert str(work) in notice.message and "copy_whole(f32[4096, 4096])" in notice.message
        [held] = editor.diagnostics()  # the static tier, published: why nothing was compiled
        assert held.code == "VMEM013" and held.severity == types.DiagnosticSeverity.Information
        assert f"vmem-lsp trust {work}" in held.message
        # A second file, the same folder: no second notice.
        shutil.copy(work / "copy_whole.py", work / "second.py")
        Editor(client, work / "second.py").open()
        await asyncio.sleep(2)
        assert len(client.messages) == 1

        assert run_cli("trust", str(work)).returncode == 0  # no save: the server sees the list change
        compiled = lambda: [d for d in editor.diagnostics() if d.data and d.data.get("tier") == "compiler"]
        await wait_for(compiled, what="the compiler's diagnostics once trusted")
        assert (work / "ran-on-import").exists()
        assert not [d for d in editor.diagnostics() if d.code == "VMEM013"]


async def test_answering_the_notice_trusts_the_folder_and_compiles(tmp_path):
    work = hostile_project(tmp_path)
    capabilities = types.ClientCapabilities(
        text_document=PUSH_CAPABILITIES.text_document,
        window=types.WindowClientCapabilities(show_message=types.ShowMessageRequestClientCapabilities()),
    )
    async with running_server(work, capabilities=capabilities, trusted=False) as client:
        asked = with_show_message_request(client, "Trust this folder")
        editor = Editor(client, work / "copy_whole.py")
        editor.open()
        compiled = lambda: [d for d in editor.diagnostics() if d.data and d.data.get("tier") == "compiler"]
        await wait_for(compiled, what="the compiler's diagnostics after answering the notice")
    [request] = asked
    assert [a.title for a in request.actions] == ["Trust this folder", "Not now"]
    assert (work / "ran-on-import").exists()
    assert run_cli("trust", "--list").stdout.splitlines()[-1] == str(work.resolve())


async def test_a_pyproject_worker_command_runs_only_in_a_trusted_folder(tmp_path):
    work = hostile_project(tmp_path, '[tool.vmem-lsp]\ntargets = ["v6e"]\nworker = "touch pwned"\n')
    async with running_server(work, trusted=False) as client:
        with_show_message_request(client, "Not now")
        editor = Editor(client, work / "copy_whole.py")
        editor.open()
        await asyncio.sleep(QUIET_SECONDS)
        assert not (work / "pwned").exists(), "the untrusted pyproject's worker command ran"
        assert "touch pwned" in client.messages[0].message
        assert run_cli("trust", str(work)).returncode == 0
        editor.save()
        await wait_for(lambda: (work / "pwned").exists(), what="the worker command, once trusted")


async def test_trusted_folders_from_workspace_settings_do_not_count(tmp_path):
    """workspace/configuration may be answered from the folder's own files
    (.vscode/settings.json): a trustedFolders there is ignored and said so."""
    work = hostile_project(tmp_path)
    capabilities = types.ClientCapabilities(
        text_document=PUSH_CAPABILITIES.text_document, workspace=types.WorkspaceClientCapabilities(configuration=True)
    )
    async with running_server(
        work, capabilities=capabilities, trusted=False, settings={"trustedFolders": [str(work)]}
    ) as client:
        editor = Editor(client, work / "copy_whole.py")
        editor.open()
        await wait_for(lambda: [d for d in editor.diagnostics() if d.code == "VMEM013"], what="held examples")
        await asyncio.sleep(5)
        assert not (work / "ran-on-import").exists()
        assert any(
            "trustedFolders is read only from the initialization options" in m.message for m in client.log_messages
        )
