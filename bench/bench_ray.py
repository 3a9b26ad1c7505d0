"""Issue 21's targets, measured: 60 examples x 3 chips on a local Ray
cluster of two one-CPU nodes against the local pool on the same machine
(speedup, and Ray's overhead per task beyond the worker's own time), and a
warm shared cache (a real S3-compatible server, moto's) answering the whole
unchanged corpus without starting a worker, against the local disk cache.

    .venv/bin/python bench/bench_ray.py [--examples 60] [--targets v5e,v6e,v7x]

The corpus: 20 copies of examples/matmul.py, each with 3 `# vmem:` lines of
its own block sizes, so every example is a distinct compile."""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from vmem_lsp import engine  # noqa: E402
from vmem_lsp.compile.pool import WorkerPool  # noqa: E402
from vmem_lsp.compile.ray_backend import RayPool  # noqa: E402
from vmem_lsp.config import Settings  # noqa: E402

BLOCKS = (256, 512, 1024, 2048)
SHAPES = (4096, 8192)


def corpus(folder: Path, examples: int) -> Path:
    """`examples` distinct matmul examples, three per file."""
    source = (ROOT / "examples" / "matmul.py").read_text()
    head, _, body = source.partition("# vmem: ")
    body = body.split("\n", 1)[1]
    configs = [(s, bm, bk, bn) for bm in BLOCKS for bk in BLOCKS for bn in BLOCKS for s in SHAPES][:examples]
    for start in range(0, len(configs), 3):
        lines = "".join(
            f"# vmem: matmul(bf16[{s}, {s}], bf16[{s}, {s}], bm={bm}, bk={bk}, bn={bn})\n"
            for s, bm, bk, bn in configs[start : start + 3]
        )
        (folder / f"matmul_{start // 3:02d}.py").write_text(head + lines + body)
    return folder


def timed(label: str, paths: list[str], settings: Settings, worker, use_cache: bool = True):
    started = time.perf_counter()
    outcome = engine.check(paths, settings, use_cache=use_cache, worker=worker)
    seconds = time.perf_counter() - started
    print(
        f"{label:<44} {seconds:7.1f} s  {outcome.compiles:3d} compiled, {outcome.cache_hits:3d} cached, "
        f"{len(outcome.diagnostics)} diagnostics",
        flush=True,
    )
    return outcome, seconds


def on_pool(size: int, label: str, paths: list[str], settings: Settings, use_cache: bool = True):
    """(outcome, seconds, workers the pool started) of one run on a local pool of `size`."""
    pool = WorkerPool(size=size)
    try:
        outcome, seconds = timed(label, paths, settings, pool, use_cache)
        return outcome, seconds, len(pool.created)
    finally:
        pool.stop()


def diagnostics_of(outcome) -> list:
    return sorted((d.path, repr(d.span), d.code, d.message) for d in outcome.diagnostics)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=60)
    parser.add_argument("--targets", default="v5e,v6e,v7x")
    args = parser.parse_args()
    import logging

    import boto3
    from moto.server import ThreadedMotoServer
    from support.ray_cluster import Cluster

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs each request

    work = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    (work / "corpus").mkdir()
    folder = corpus(work / "corpus", args.examples)
    paths = [str(folder)]
    targets = tuple(args.targets.split(","))
    base = Settings(targets=targets, root=str(folder))
    pairs = args.examples * len(targets)
    print(
        f"{args.examples} examples x {len(targets)} chips = {pairs} compiles; {os.cpu_count()} cores; "
        f"load {os.getloadavg()[0]:.1f}",
        flush=True,
    )

    local_disk = dataclasses.replace(base, cache_dir=str(work / "disk-cache"), jobs=1)
    one, one_s, _ = on_pool(1, "local pool, 1 job (the default here), cold", paths, local_disk)
    two, two_s, _ = on_pool(2, "local pool, 2 jobs (every core), no cache", paths, base, use_cache=False)

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
    )
    boto3.client("s3").create_bucket(Bucket="vmem-bench")
    shared = dataclasses.replace(base, cache_dir="s3://vmem-bench/cache")

    cluster = Cluster()
    try:
        cluster.start(head=True)
        cluster.start()
        ray_pool = RayPool(cluster.address)
        try:
            on_ray, ray_s = timed("Ray, 2 nodes x 1 CPU, cold (fills the S3 cache)", paths, shared, ray_pool)
            overheads = sorted(ray_pool.overheads)
            nodes = ray_pool.nodes
        finally:
            ray_pool.stop()
    finally:
        cluster.stop()

    warm_s3, warm_s3_s, started_s3 = on_pool(1, "warm S3 cache (moto), local pool", paths, shared)
    warm_disk, warm_disk_s, started_disk = on_pool(1, "warm local disk cache, local pool", paths, local_disk)
    server.stop()

    same = (
        diagnostics_of(one)
        == diagnostics_of(two)
        == diagnostics_of(on_ray)
        == diagnostics_of(warm_s3)
        == diagnostics_of(warm_disk)
    )
    print()
    print(f"same diagnostics in every run: {same}")
    print(
        f"speedup of Ray (2 nodes) over the default local pool (1 job): {one_s / ray_s:.2f}x; "
        f"over the pool on both cores: {two_s / ray_s:.2f}x"
    )
    print(
        f"Ray's overhead per task (round trip minus the worker's time), {len(overheads)} tasks: "
        f"median {1000 * statistics.median(overheads):.0f} ms, p90 "
        f"{1000 * overheads[int(0.9 * (len(overheads) - 1))]:.0f} ms, max {1000 * overheads[-1]:.0f} ms "
        f"(target < 150 ms); tasks per node: {sorted(nodes.values())}"
    )
    print(
        f"warm S3 cache: {warm_s3_s:.2f} s, {warm_s3.cache_hits}/{pairs} hits, {started_s3} workers started; "
        f"warm disk cache: {warm_disk_s:.2f} s, {warm_disk.cache_hits}/{pairs} hits, {started_disk} workers started"
    )
    return 0 if same and warm_s3.cache_hits == pairs and not started_s3 else 1


if __name__ == "__main__":
    sys.exit(main())
