"""A real local Ray cluster for the tests and bench/bench_ray.py: nodes
started with `ray start --block` in sessions of their own, one CPU each, on
this machine, so killing a node is one killpg and nothing outlives us."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from support.tiers import CLUSTER, starts

RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@starts(CLUSTER)
class Cluster:
    def __init__(self, env: dict | None = None):
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"} if env is None else env
        self.env = env
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: list[subprocess.Popen] = []

    def start(self, head: bool = False) -> subprocess.Popen:
        where = (
            ["--head", f"--port={self.port}", "--include-dashboard=false"] if head else [f"--address={self.address}"]
        )
        before = 0 if head else self.alive()
        node = subprocess.Popen(
            [RAY, "start", "--block", "--num-cpus=1", "--disable-usage-stats", *where],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=self.env,
        )
        self.nodes.append(node)
        deadline = time.monotonic() + 90
        while not self.listening() or self.alive() < before + 1:
            assert node.poll() is None and time.monotonic() < deadline, "a Ray node did not start"
            time.sleep(0.5)
        return node

    def listening(self) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def alive(self) -> int:
        """Live nodes, as the cluster counts them (0 before the head is up)."""
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                f"""
import ray
ray.init(address={self.address!r}, log_to_driver=False, configure_logging=False)
print(sum(n["Alive"] for n in ray.nodes()))""",
            ],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
        )
        return int(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else 0

    @staticmethod
    def kill(node: subprocess.Popen) -> None:
        try:
            os.killpg(node.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        node.wait()

    def stop(self) -> None:
        for node in reversed(self.nodes):
            self.kill(node)
