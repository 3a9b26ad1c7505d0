"""A save's chips compile at once, each on a worker of its own, where there
are cores for it; one worker on a single core; a chip stays on its worker
from save to save (that worker keeps what it compiled for it). Fake workers:
no jax. Plus the lifetime rule with two real workers: both die with the
server, whatever kills it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.processes import (
    SPINS,
    describe,
    environment,
    kill_and_expect_nothing_left,
    open_over_stdio,
    started,
    tagged,
    wait_for_file,
)

from vmem_lsp.compile import pool
from vmem_lsp.config import Settings
from vmem_lsp.results import ExampleResult
from vmem_lsp.server.compiler import CompileJob, CompileService
from vmem_lsp.source.directives import Example
from vmem_lsp.source.model import Span

CHIPS = ("v5e", "v6e")


class FakeWorker:
    """Answers at once, unless `meeting` is set: then every chip's compile
    waits there for the other's, which only compiles running at once pass."""

    meeting: threading.Barrier | None = None
    made: list[FakeWorker] = []

    def __init__(self, command=None, share=None, peaks=None):
        self.restarts, self.started, self.targets = 0, False, []
        FakeWorker.made.append(self)

    def running(self) -> bool:
        return self.started

    def start(self) -> dict:
        self.started = True
        return {"pid": id(self)}

    def check(self, request, limits) -> ExampleResult:
        self.targets.append(request.target)
        if FakeWorker.meeting is not None:
            FakeWorker.meeting.wait()  # BrokenBarrierError after its timeout: one compile at a time
        return ExampleResult(request.target, "fake")

    def stop(self) -> None:
        self.started = False


@pytest.fixture
def fake_workers(monkeypatch):
    monkeypatch.setattr(pool, "WorkerClient", FakeWorker)
    FakeWorker.made, FakeWorker.meeting = [], None
    yield FakeWorker
    FakeWorker.meeting = None


class Saves:
    """A compile service on fake workers, and saves submitted to it as the server does."""

    def __init__(self, tmp_path, settings: Settings):
        self.tmp_path, self.settings = tmp_path, settings
        self.loop = asyncio.new_event_loop()
        self.done: asyncio.Future | None = None
        self.service = CompileService(self.loop, self.on_result, self.on_event)

    def on_result(self, job, results) -> None:
        self.done.set_result(results)

    def on_event(self, event) -> None:
        if event.state == "crashed" and not self.done.done():  # a lane's exception: the barrier broke
            self.done.set_exception(AssertionError(event.message))

    def save(self, version: int) -> list:
        """One compile job, as a save submits it; its (example, result) pairs."""
        self.done = self.loop.create_future()
        path = str(self.tmp_path / "k.py")
        example = Example(path, 3, Span(3, 9, 3, 30), "kernel(f32[8, 128])")
        self.service.submit(CompileJob(path, version, self.settings, [example], use_cache=False))
        return self.loop.run_until_complete(asyncio.wait_for(self.done, 30))

    def close(self) -> None:
        self.service.stop()
        self.loop.close()


def serve_saves(tmp_path, monkeypatch, cores: int, jobs: int | None = None, saves: int = 1) -> list:
    monkeypatch.setattr(pool, "usable_cores", lambda: cores)
    server = Saves(tmp_path, Settings(targets=CHIPS, jobs=jobs, root=str(tmp_path)))
    try:
        return [server.save(version) for version in range(1, saves + 1)]
    finally:
        server.close()


def test_the_chips_of_a_save_compile_at_once_on_two_cores(tmp_path, fake_workers, monkeypatch):
    fake_workers.meeting = threading.Barrier(len(CHIPS), timeout=5)
    [results] = serve_saves(tmp_path, monkeypatch, cores=2)
    assert [r.target for _, r in results] == list(CHIPS)  # in the order asked, whichever ended first
    assert sorted(len(w.targets) for w in fake_workers.made) == [1, 1]


def test_one_worker_on_one_core_or_when_jobs_is_one(tmp_path, fake_workers, monkeypatch):
    for cores, jobs in ((1, None), (4, 1)):
        fake_workers.made = []
        [results] = serve_saves(tmp_path, monkeypatch, cores=cores, jobs=jobs)
        assert [r.target for _, r in results] == list(CHIPS)
        assert [w.targets for w in fake_workers.made] == [list(CHIPS)]


def test_each_chip_stays_on_its_worker_from_save_to_save(tmp_path, fake_workers, monkeypatch):
    serve_saves(tmp_path, monkeypatch, cores=2, saves=3)
    assert sorted(w.targets for w in fake_workers.made) == [["v5e"] * 3, ["v6e"] * 3]


def test_lanes_for():
    assert pool.lanes_for(2) == min(2, pool.usable_cores())
    assert [pool.lanes_for(chips, jobs) for chips, jobs in ((1, 8), (3, 2), (2, 1), (0, None))] == [1, 2, 1, 1]


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or pool.usable_cores() < 2, reason="two workers need two cores"
)
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_both_workers_die_with_the_server(tmp_path, how):
    """test_lifetime's serve test with two chips: the server, its parser and a worker per chip, all gone."""
    tag, env, mark = environment(tmp_path)
    source = tmp_path / "spins.py"
    source.write_text(SPINS.read_text())
    with started(
        [sys.executable, "-m", "vmem_lsp", "serve"],
        tag,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as server:
        open_over_stdio(server, tmp_path, source, list(CHIPS), process_id=None)
        wait_for_file(mark)
        workers = lambda: [
            p
            for p in tagged(tag)
            if Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[2:4] == [b"vmem_lsp", b"worker"]
        ]
        deadline = time.monotonic() + 60
        while len(workers()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(workers()) == 2, describe(tagged(tag))
        kill_and_expect_nothing_left(server, how, tag)
