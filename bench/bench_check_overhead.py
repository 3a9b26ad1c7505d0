"""The compile tier's overhead: `vmem-lsp check --no-cache` of a file of
examples against compiling the same examples directly, side by side in one run.

    nice .venv/bin/python bench/bench_check_overhead.py FILE [--python PY] [--target v5e] [--repeats 3]
        [--before TREE]

Each repeat runs, in fresh processes and in rotating order (each side first in
turn, so a neighbour's load falls on all):

  direct  PY this-file --direct FILE: one process imports FILE and, for each
          `# vmem:` example, `jax.jit(f).lower(*ShapeDtypeStructs on the target's
          deviceless device).compile()` (an example that overflows raises: its time
          counts too), as shared/DESIGN.md describes compiling an example directly.
  check   vmem-lsp check FILE --target T --no-cache [--python PY]: the CLI and its
          worker(s).
  before  (with --before TREE) the same check with the vmem-lsp of another checkout
          (`git worktree add --detach TREE <commit>`): a baseline measured in the
          same run; what it says is compared with what the check says.

Both are timed as processes (wall, and CPU: user + system of the process and
of every child it waited for, the worker included), and the direct one also
from inside (its compiles alone, without Python's start and jax's import).
The ratio check / direct is printed per repeat and as the median.

`--direct` runs with the project's Python alone (no vmem-lsp there): this file
imports nothing but the standard library at its top.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPOLOGIES = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2", "v7x": "tpu7x:2x2x1"}
DTYPES = {
    "f32": "float32",
    "bf16": "bfloat16",
    "f16": "float16",
    "f64": "float64",
    "s8": "int8",
    "s16": "int16",
    "s32": "int32",
    "s64": "int64",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "u8": "uint8",
    "u32": "uint32",
    "pred": "bool",
    "bool": "bool",
}
DIRECTIVE = re.compile(r"^\s*#\s*vmem:\s*(.+?)\s*$")


def examples_of(path: str) -> list[tuple[int, str]]:
    """(line, call text) of each one-line `# vmem:` directive of the file."""
    with open(path, encoding="utf-8") as f:
        return [(n, m[1]) for n, line in enumerate(f, 1) if (m := DIRECTIVE.match(line))]


def parts_of(call: str, scope: dict):
    """(callee, arguments, keywords) of an example's call text, evaluated in `scope`, not called."""
    import ast

    node = ast.parse(call, mode="eval").body
    assert isinstance(node, ast.Call), call
    value = lambda part: eval(compile(ast.Expression(part), "<example>", "eval"), scope)  # the file's own text
    return value(node.func), [value(a) for a in node.args], {k.arg: value(k.value) for k in node.keywords}


@contextlib.contextmanager
def on_target(device):
    """The target as the default device, and as what jax.devices() lists: a kernel
    that asks which chip it runs on (pltpu.get_tpu_info, a core count) hears the
    target's answer, as it would on that chip (vmem-lsp's chip_view does the same)."""
    import jax

    devices = jax.devices
    jax.devices = lambda backend=None: [device] if backend in (None, "tpu") else devices(backend)
    try:
        with jax.default_device(device):
            yield
    finally:
        jax.devices = devices


def direct(path: str, target: str) -> dict:
    """Compile every example of `path` as a user would, in this process."""
    import importlib.util

    started = time.perf_counter()
    import jax
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    device = topologies.get_topology_desc(platform="tpu", topology_name=TOPOLOGIES[target]).devices[0]
    sharding = SingleDeviceSharding(device)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location("__bench_examples", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ready = time.perf_counter()

    class Shape:
        def __init__(self, dtype: str, made: list):
            self.dtype, self.made = dtype, made

        def __getitem__(self, dims):
            dims = dims if isinstance(dims, tuple) else (dims,)
            shape = jax.ShapeDtypeStruct(tuple(dims), jax.numpy.dtype(self.dtype), sharding=sharding)
            self.made.append(shape)
            return shape

    timings = []
    for line, call in examples_of(path):
        made: list = []
        scope = {**vars(module), **{name: Shape(dtype, made) for name, dtype in DTYPES.items()}}
        callee, args, kwargs = parts_of(call, scope)
        is_shape = lambda x: isinstance(x, jax.ShapeDtypeStruct)
        leaves, tree = jax.tree_util.tree_flatten((args, kwargs), is_leaf=is_shape)
        slots = [i for i, leaf in enumerate(leaves) if is_shape(leaf)]

        def run(*arrays, leaves=leaves, tree=tree, slots=slots, callee=callee):
            values = list(leaves)
            for slot, array in zip(slots, arrays):
                values[slot] = array
            a, k = jax.tree_util.tree_unflatten(tree, values)
            return callee(*a, **k)

        begun = time.perf_counter()
        error, steps = None, []
        try:
            with on_target(device):
                traced = jax.jit(run).trace(*[leaves[i] for i in slots])  # what .lower() does, in its steps
                steps.append(time.perf_counter())
                lowered = traced.lower()
                steps.append(time.perf_counter())
                lowered.compile()
        except Exception as raised:  # an overflow: the compiler's verdict, timed too
            error = f"{type(raised).__name__}: {(str(raised).splitlines() or [''])[0][:120]}"
        ended = time.perf_counter()
        steps = ([begun, *steps, ended] + [ended] * 3)[:4]
        timings.append(
            {
                "line": line,
                "seconds": round(ended - begun, 3),
                "trace": round(steps[1] - steps[0], 3),
                "lower": round(steps[2] - steps[1], 3),
                "compile": round(steps[3] - steps[2], 3),
                "error": error,
            }
        )
    total = lambda key: round(sum(t[key] for t in timings), 3)
    return {
        "setup": round(ready - started, 3),
        "examples": timings,
        "compiles": total("seconds"),
        **{step: total(step) for step in ("trace", "lower", "compile")},
    }


def timed(
    command: list[str], env: dict | None = None, cwd: str = ROOT
) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall, CPU of the process and its waited-for children, the finished process)."""
    before = os.times()
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu, done


def run_direct(python: str, path: str, target: str) -> dict:
    wall, cpu, done = timed([python, os.path.abspath(__file__), "--direct", path, "--target", target])
    if done.returncode != 0:
        raise SystemExit(f"the direct compiles failed:\n{done.stderr[-4000:]}")
    inside = json.loads(done.stdout.strip().splitlines()[-1])
    return {"wall": wall, "cpu": cpu, **inside}


def run_check(python: str | None, path: str, target: str, extra: list[str], tree: str = ROOT) -> dict:
    """vmem-lsp check as a user runs it, with the vmem-lsp of `tree` (this one, or --before's)."""
    command = [sys.executable, "-m", "vmem_lsp", "check", path, "--target", target, "--no-cache", *extra]
    if python:
        command += ["--python", python]
    env = {**os.environ, "PYTHONPATH": tree} if tree != ROOT else None
    wall, cpu, done = timed(command, env, cwd=tree)
    if done.returncode not in (0, 1):
        raise SystemExit(f"the check failed ({done.returncode}):\n{done.stderr[-4000:]}")
    lines = done.stdout.strip().splitlines()
    # What it found, without how long it took, paths as from this tree (a check prints them relative to its folder).
    said = [SECONDS.sub("", line).replace(f"{ROOT}{os.sep}", "") for line in lines]
    return {"wall": wall, "cpu": cpu, "summary": lines[-1] if lines else "", "said": said}


SECONDS = re.compile(r"\d+(\.\d+)? s\b")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file")
    parser.add_argument("--python", help="the project's Python (both sides run there); default: this one")
    parser.add_argument("--target", default="v5e")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", metavar="TREE", help="also check with the vmem-lsp of this checkout (a baseline)")
    parser.add_argument("--direct", action="store_true", help="(internal) compile the examples here, print JSON")
    parser.add_argument("--check-arg", action="append", default=[], help="one more argument for vmem-lsp check")
    args = parser.parse_args()
    path = os.path.abspath(args.file)
    if args.direct:
        sys.argv[1:] = []  # a module that parses flags (absl's, as tokamax does) sees none of ours
        print(json.dumps(direct(path, args.target)))
        return
    python = args.python or sys.executable
    print(f"{len(examples_of(path))} examples in {args.file}, target {args.target}, python {python}")
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}\n")
    sides = ["direct", "check"] + (["before"] if args.before else [])
    rows: list[dict] = []
    for repeat in range(args.repeats):
        order = sides[repeat % len(sides) :] + sides[: repeat % len(sides)]  # each side first in turn
        got = {}
        for side in order:
            if side == "direct":
                got[side] = run_direct(python, path, args.target)
            else:
                tree = os.path.abspath(args.before) if side == "before" else ROOT
                got[side] = run_check(args.python, path, args.target, args.check_arg, tree)
        rows.append(got)
        d = got["direct"]
        errors = sum(1 for t in d["examples"] if t["error"])
        print(
            f"#{repeat} (order {', '.join(order)})  direct: wall {d['wall']:7.2f} s cpu {d['cpu']:7.2f} s"
            f" (setup {d['setup']:.2f} s, examples {d['compiles']:.2f} s: trace {d['trace']:.2f}, lower"
            f" {d['lower']:.2f}, compile {d['compile']:.2f}; {errors} raised)"
        )
        for side in sides[1:]:
            c = got[side]
            print(
                f"    {side:6s}: wall {c['wall']:7.2f} s cpu {c['cpu']:7.2f} s"
                f"  ratio to direct: wall {c['wall'] / d['wall']:.3f} cpu {c['cpu'] / d['cpu']:.3f}"
                f"  | {c['summary']}"
            )
        if "before" in got and got["before"]["said"] != got["check"]["said"]:
            print("    THE CHECK SAID SOMETHING ELSE THAN BEFORE:")
            print("\n".join(f"      - {line}" for line in got["before"]["said"] if line not in got["check"]["said"]))
            print("\n".join(f"      + {line}" for line in got["check"]["said"] if line not in got["before"]["said"]))
        print(f"    direct per example (line, s): {[(t['line'], t['seconds']) for t in d['examples']]}")
    median = lambda side, key: statistics.median(r[side][key] for r in rows)
    print(f"\nmedians over {len(rows)} repeats:")
    for side in sides:
        ratio = ""
        if side != "direct":
            walls = statistics.median(r[side]["wall"] / r["direct"]["wall"] for r in rows)
            cpus = statistics.median(r[side]["cpu"] / r["direct"]["cpu"] for r in rows)
            ratio = f"  ratio to direct (median of the repeats'): wall {walls:.3f} cpu {cpus:.3f}"
        print(f"  {side:6s} wall {median(side, 'wall'):7.2f} s cpu {median(side, 'cpu'):7.2f} s{ratio}")


if __name__ == "__main__":
    main()
