"""The scoped VMEM limit and the phase limits as an editor sets them: the real
server over stdio, the real compiler."""

from __future__ import annotations

import shutil

import pytest
from support import EXAMPLES
from support.lsp_client import Editor, running_server, wait_for

pytestmark = pytest.mark.asyncio


async def test_the_editors_scoped_limit_is_compiled_under_and_named(tmp_path):
    shutil.copy(EXAMPLES / "matmul.py", tmp_path / "matmul.py")
    options = {"targets": ["v5e"], "cache": False, "scopedVmemLimit": {"v5e": "17MiB"}}
    async with running_server(tmp_path, options=options) as client:
        editor = Editor(client, tmp_path / "matmul.py")
        editor.open()
        compiled = lambda: [d for d in editor.diagnostics() if d.data and d.data.get("tier") == "compiler"]
        found = await wait_for(compiled, what="the compiler's verdict")
    assert any("of 17.00M scoped VMEM (set in the editor's settings) on TPU v5e" in d.message for d in found), [
        d.message for d in found
    ]
