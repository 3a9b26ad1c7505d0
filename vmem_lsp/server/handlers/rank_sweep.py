"""workspace/executeCommand "vmemLsp.rankSweep" [uri, line]: the configs of a
`# vmem:` line that holds lists, those that fit ranked on each chip by the
compiler's cycle estimate, as `vmem-lsp sweep --rank speed` ranks them; the
line's code lens then names the fastest on each chip. It runs the user's code
(only in a trusted folder) and costs several compiles per config estimated:
asked for from the lens, never run on its own."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from ..app import VmemServer

RANK = "vmemLsp.rankSweep"
RANK_TOP = 5  # as `sweep --rank speed`: the roofline's best 5 of each chip are estimated


@dataclass(frozen=True)
class Ranking:
    """What a sweep line's lens says: running, or its fastest configs per chip."""

    running: bool
    said: str = ""


def lens_text(outcome) -> str:
    """ "fastest that fits: v6e bm=1024, bn=1024 (2,357,902 cycles); v5e ..." from a ranked sweep."""
    from ...sweep.decide import describe
    from ...sweep.rank import doubtful

    said = []
    for target in dict.fromkeys(v.target for v in outcome.verdicts):
        best = [v for v in outcome.verdicts if v.target == target and v.speed_rank == 1]
        if best:
            doubt = ", a loop of run-time length: see the log" if doubtful(best[0].estimate_caveat) else ""
            said.append(f"{target} {describe(best[0].config)} ({best[0].estimated_cycles:,} cycles{doubt})")
        elif target in outcome.no_estimates:
            said.append(f"{target}: no estimate")
        elif not any(v.target == target and v.fits for v in outcome.verdicts):
            said.append(f"{target}: none fits")
    return "fastest that fits: " + "; ".join(said) if said else "no config was ranked"


async def handle(ls, uri="", line=0):
    """pygls passes the command's arguments positionally (no annotations here: pygls
    converts by them, and resolves them at run time)."""
    return await rank(ls, uri if isinstance(uri, str) else "", line if isinstance(line, int) else 0)


async def rank(ls: VmemServer, uri: str, line: int) -> dict:
    from ...sweep.spec import SweepError, sweeps_in

    path = ls.path_of(uri)
    text = ls.session.text_of(path)
    sweep = next((s for s in sweeps_in(text, path) if s.example.line == line + 1), None) if text else None
    if sweep is None:
        return {"error": f"no # vmem: line that holds a list at line {line + 1} of {path}"}
    settings = ls.session.settings(path)
    if not ls.trusted(path, settings):
        message = f"vmem-lsp: {path} is not in a trusted folder: its configs were not ranked (they run its code)"
        ls.window_show_message(types.ShowMessageParams(types.MessageType.Warning, message))
        return {"error": message}
    key = (path, sweep.example.text)
    ls.rankings[key] = Ranking(True)
    refresh_lenses(ls)
    try:
        outcome = await in_daemon_thread(lambda: run_ranked(sweep, settings))
    except Exception as error:  # the lens stops saying "ranking..."; what went wrong is said or raised
        ls.rankings.pop(key, None)
        refresh_lenses(ls)
        if isinstance(error, SweepError):
            return {"error": str(error)}
        raise
    said = lens_text(outcome)
    ls.rankings[key] = Ranking(False, said)
    refresh_lenses(ls)
    caveats = "".join(f"; estimates on {chip}: {why}" for chip, why in outcome.caveats.items())
    ls.log(types.MessageType.Info, f"vmem-lsp: {sweep.example.text}: {said}{caveats}")
    return {"said": said, "estimates": outcome.estimates, "compiles": outcome.compiles}


def run_ranked(sweep, settings):
    from ...sweep.run import run_sweep

    return run_sweep(sweep, settings, rank=True, rank_top=RANK_TOP)


async def in_daemon_thread(work):
    """`work()` off the loop in a daemon thread: a server told to exit does not
    wait minutes for a ranking (its workers die with it)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def settle(result=None, error: BaseException | None = None) -> None:
        if done.done():  # the handler was cancelled meanwhile
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    def run() -> None:
        try:
            result = work()
        except BaseException as error:  # handed to the awaiting handler, which says it
            loop.call_soon_threadsafe(settle, None, error)
        else:
            loop.call_soon_threadsafe(settle, result)

    threading.Thread(target=run, name="vmem-lsp-rank", daemon=True).start()
    return await done


def refresh_lenses(ls: VmemServer) -> None:
    if ls.client_supports("workspace", "code_lens", "refresh_support"):
        ls.workspace_code_lens_refresh(None)
