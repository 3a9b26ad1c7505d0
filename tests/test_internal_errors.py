"""A bug of ours is said where someone looks, and counted; a problem of the
user's file is not. The server: its log (stderr), window/logMessage at Error
level, and `internalErrors` in vmemLsp/status. The CLI: stderr and exit 2,
with everything else still reported.

The bug is planted from outside the product: tests/data/faults/ goes on
PYTHONPATH, so every Python process the test starts (the CLI, the server, the
server's parsing process) imports its sitecustomize.py, which makes the
locator's _kernel_site raise."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from lsprotocol import types
from support import EXAMPLES, ROOT
from support.lsp_client import Editor, running_server, wait_for

FAULTS = ROOT / "tests" / "data" / "faults"
PLANTED = "IndexError: planted by tests/data/faults/sitecustomize.py"


def with_fault() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(FAULTS), os.environ.get("PYTHONPATH")) if p)}


def test_the_cli_says_an_internal_error_on_stderr_exits_2_and_reports_the_rest(tmp_path):
    shutil.copy(EXAMPLES / "copy_whole.py", tmp_path)
    (tmp_path / "bad_directive.py").write_text("# vmem: f(\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "vmem_lsp",
            "check",
            ".",
            "--no-compile",
            "--no-cache",
            "--target",
            "v6e",
            "--format",
            "json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=with_fault(),
    )
    assert done.returncode == 2, done.stderr
    assert "vmem-lsp: internal error locating the kernels of copy_whole.py:\nTraceback" in done.stderr
    assert PLANTED in done.stderr
    codes = {(d["path"], d["code"]) for d in json.loads(done.stdout)["diagnostics"]}
    assert {("bad_directive.py", "VMEM010"), ("copy_whole.py", "VMEM004")} <= codes


@pytest.mark.asyncio
async def test_the_server_logs_and_counts_an_internal_error_but_not_a_syntax_error(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("PYTHONPATH", with_fault()["PYTHONPATH"])  # the server inherits it
    (tmp_path / "broken.py").write_text("def f(:\n    pl.pallas_call(\n")
    shutil.copy(EXAMPLES / "copy_whole.py", tmp_path)
    async with running_server(tmp_path, {"compileOnOpen": False, "compileOnSave": False}) as client:
        statuses = []
        client.feature("vmemLsp/status")(lambda params: statuses.append(params))
        errors = lambda: [m.message for m in client.log_messages if m.type == types.MessageType.Error]

        broken = Editor(client, tmp_path / "broken.py")
        broken.open()
        await wait_for(lambda: broken.uri in client.diagnostics, what="the file with a syntax error analysed")
        assert not errors() and not statuses  # the user's syntax error is not ours

        kernel = Editor(client, tmp_path / "copy_whole.py")
        kernel.open()
        [message] = await wait_for(errors, what="an Error logMessage")
        assert message.startswith("vmem-lsp internal error locating the kernels of ") and PLANTED in message
        status = await wait_for(lambda: statuses and statuses[-1], what="a vmemLsp/status")
        assert status.internalErrors == 1

        kernel.change(kernel.text + "\n")  # every analysis that fails counts
        await wait_for(lambda: len(errors()) == 2, what="a second Error logMessage")
        await wait_for(lambda: statuses[-1].internalErrors == 2, what="the count at 2")
    sys.stderr.flush()
    server_log = capfd.readouterr().err  # pytest-lsp copies the server's stderr here
    assert server_log.count("internal error locating the kernels of") == 2 and PLANTED in server_log


def test_a_handler_that_raises_is_counted_a_json_rpc_error_it_means_is_not():
    """pygls catches what a handler raises and hands it to report_server_error:
    that boundary counts it like any internal error of ours."""
    from pygls.exceptions import (
        FeatureNotificationError,
        FeatureRequestError,
        JsonRpcInternalError,
        JsonRpcMethodNotFound,
        JsonRpcRequestCancelled,
    )

    from vmem_lsp.server.app import STATUS, VmemServer

    server = VmemServer()
    sent = []
    server.protocol.notify = lambda method, params=None: sent.append((method, params))
    try:
        [][0]
    except IndexError:
        wrapped = JsonRpcInternalError.of(sys.exc_info())
        raw = sys.exc_info()[1]
    server.report_server_error(wrapped, FeatureRequestError)  # an async request handler raised
    server.report_server_error(raw, FeatureNotificationError)  # a notification handler raised
    server.report_server_error(JsonRpcMethodNotFound.of("x/y"), FeatureRequestError)  # the client's
    server.report_server_error(JsonRpcRequestCancelled("cancelled"), FeatureRequestError)  # on purpose
    server.stop_background()
    assert [p["internalErrors"] for m, p in sent if m == STATUS] == [1, 2]
    logged = [p.message for m, p in sent if m == types.WINDOW_LOG_MESSAGE and p.type == types.MessageType.Error]
    assert len(logged) == 2 and all("IndexError: list index out of range" in m for m in logged)
    assert "in test_a_handler_that_raises" in logged[0]  # the traceback's frames


def test_a_compile_job_that_raises_is_counted():
    """The compile thread never lets a job's exception end it: the job is said
    "crashed" on the status, and, a bug of ours, logged with its traceback and
    counted (it was a line of text on the status item only)."""
    import asyncio

    from vmem_lsp.config import Settings
    from vmem_lsp.server.app import STATUS, VmemServer
    from vmem_lsp.server.compiler import CompileJob, CompileService

    server = VmemServer()
    sent = []
    server.protocol.notify = lambda method, params=None: sent.append((method, params))
    loop = asyncio.new_event_loop()
    service = CompileService(loop, on_result=lambda job, results: None, on_event=server.on_compile_event)
    try:
        broken = Settings(targets=None)  # the planted bug: a job the thread cannot run
        service.submit(CompileJob("file:///planted.py", 1, broken, []))
        loop.run_until_complete(asyncio.sleep(0))
        deadline = loop.time() + 30
        while not any(m == STATUS for m, _ in sent) and loop.time() < deadline:
            loop.run_until_complete(asyncio.sleep(0.05))
    finally:
        service.stop()
        server.stop_background()
        loop.close()
    statuses = [p for m, p in sent if m == STATUS]
    assert statuses and statuses[-1]["state"] == "crashed" and statuses[-1]["internalErrors"] == 1, statuses
    logged = [p.message for m, p in sent if m == types.WINDOW_LOG_MESSAGE and p.type == types.MessageType.Error]
    assert len(logged) == 1 and logged[0].startswith("vmem-lsp internal error in a compile job:\nTraceback")
