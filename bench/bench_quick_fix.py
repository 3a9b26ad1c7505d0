"""Quick fixes ready when the squiggles are (issue 12): the latency of a
codeAction sent the moment the compiler's first diagnostic of a save arrives.

    .venv/bin/python bench/bench_quick_fix.py [--saves 5]

Warm worker; each save edits the kernel body to a text not seen before, so the
compile and the fix search miss the cache. Two clients: a bare one (it waits
for the search) and one that resolves edits (it gets the model's candidates at
once, and resolves the first). Also: when the search itself was done.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.lsp_client import (  # noqa: E402
    BARE_CAPABILITIES,
    RESOLVE_CAPABILITIES,
    Editor,
    ask_on_verdict,
    running_server,
    wait_for,
)

CASES = [  # file, target, the kernel text edited by each save (a number put in: a new text each time)
    ("copy_whole.py", "v6e", "x_ref[...] * 2", "x_ref[...] * {k}"),
    ("matmul.py", "v5e", "preferred_element_type=jnp.float32)", "preferred_element_type=jnp.float32) * {k}"),
]


def searches_done(client) -> int:
    return len([m for m in client.log_messages if "fix(es) ready" in m.message])


async def measure(work: Path, name: str, target: str, anchor: str, edit: str, resolve: bool, saves: int) -> None:
    (work / "pyproject.toml").write_text(f'[tool.vmem-lsp]\ntargets = ["{target}"]\ncache-dir = ".cache"\n')
    shutil.copy(ROOT / "examples" / name, work / name)
    capabilities = RESOLVE_CAPABILITIES if resolve else BARE_CAPABILITIES
    async with running_server(work, capabilities=capabilities) as client:
        editor = Editor(client, work / name)
        original = editor.text
        editor.open()
        await wait_for(lambda: searches_done(client), what="the first fix search")  # the worker is warm
        latencies, searches, resolves, fixed, preferred_verified, resolved_verified = [], [], [], 0, 0, 0
        for k in range(3, 3 + saves):
            before = searches_done(client)
            editor.change(original.replace(anchor, edit.format(k=k), 1))
            asked = ask_on_verdict(client, editor.uri, editor.version)
            editor.save()
            latency, actions = await asyncio.wait_for(asked, 300)
            verdict_at = time.monotonic() - latency
            quick = [a for a in actions if a.kind == "quickfix"]
            latencies.append(latency)
            fixed += bool(quick)
            preferred_verified += any(a.is_preferred and "compiler-verified" in a.title for a in quick)
            if resolve and quick:
                started = time.monotonic()
                chosen = await client.code_action_resolve_async(quick[0])
                resolves.append(time.monotonic() - started)
                resolved_verified += chosen.edit is not None and "compiler-verified" in chosen.title
            await wait_for(lambda: searches_done(client) > before, timeout=300, what="the fix search")
            searches.append(time.monotonic() - verdict_at)
        kind = "resolving" if resolve else "bare"
        extra = (
            (
                f", first one resolved to a verified edit {resolved_verified}/{saves} "
                f"(resolve median {statistics.median(resolves):.2f} s)"
            )
            if resolves
            else ""
        )
        print(
            f"codeAction after the first compiler diagnostic, {name} on {target}, {kind} client: "
            f"median {statistics.median(latencies):.2f} s, max {max(latencies):.2f} s over {saves} saves; "
            f"answered with a quick fix {fixed}/{saves}, a verified one preferred {preferred_verified}/{saves}"
            f"{extra}; the search itself done after a median {statistics.median(searches):.2f} s",
            flush=True,
        )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--saves", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}")
    for name, target, anchor, edit in CASES:
        for resolve in (False, True):
            with tempfile.TemporaryDirectory() as work:
                await measure(Path(work), name, target, anchor, edit, resolve, args.saves)


if __name__ == "__main__":
    asyncio.run(main())
