"""The `# vmem:` examples of a folder (tests/data/gpu_corpus) compiled directly for GPU targets by
support/gpu_direct.py's compile_directly (each call jitted whole for a compile-only CUDA device
made from the target's GpuTargetConfig, none of vmem-lsp's worker, capture or report parser in
the way): what tests/test_gpu_corpus.py holds `vmem-lsp check` to.

Run as a child, one per target (`python -m support.gpu_corpus FOLDER TARGET` from tests/); prints
one JSON line per example: {"file", "line", "call", "target", "fits", "requested", "available",
"error"}."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from support.tiers import COMPILER, starts

TESTS = Path(__file__).resolve().parent.parent
EXAMPLE = re.compile(r"^# vmem: (?P<call>.+)$")
ARRAY = re.compile(r"^(?P<dtype>[a-z]+\d*)\[(?P<dims>[\d, ]*)\]$")
DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "s32": "int32", "s8": "int8"}


def examples(path: Path) -> list[tuple[int, str]]:
    """(line, call) of each `# vmem:` example of a file."""
    return [(n, m["call"]) for n, line in enumerate(path.read_text().splitlines(), 1) if (m := EXAMPLE.match(line))]


def request_of(call: str) -> dict:
    """A call written as `f(f16[2, 384, 2, 64], ..., block_q=64)` as compile_directly takes it:
    the function, its arrays (shape, dtype) in order, its keywords as written."""
    tree = ast.parse(call, mode="eval").body
    assert isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name), call
    args = []
    for arg in tree.args:
        found = ARRAY.match(ast.unparse(arg))
        assert found, f"{call}: a positional argument that is not an array"
        args.append([[int(d) for d in found["dims"].replace(" ", "").split(",") if d], DTYPES[found["dtype"]]])
    kwargs = {k.arg: ast.literal_eval(k.value) for k in tree.keywords}
    return {"function": tree.func.id, "args": args, "kwargs": kwargs}


def main(folder: str, target: str) -> None:
    from support.gpu_direct import compile_directly

    for path in sorted(Path(folder).glob("*.py")):
        found = examples(path)
        verdicts = compile_directly(str(path), target, [request_of(call) for _, call in found])
        for (line, call), said in zip(found, verdicts, strict=True):
            record = {"file": path.name, "line": line, "call": call, "target": target, **said}
            print(json.dumps(record), flush=True)


@starts(COMPILER)
def direct_verdicts(folder: Path, targets: str, timeout: float = 900) -> list[dict]:
    """Every example of `folder`'s files compiled directly for each of `targets`, a process each."""
    records = []
    for target in targets.split(","):
        done = subprocess.run(
            [sys.executable, "-m", "support.gpu_corpus", str(folder), target],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=TESTS,
            env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(TESTS.parent)},
        )
        assert done.returncode == 0, done.stderr[-3000:]
        records += [
            r for line in done.stdout.splitlines() if line.startswith("{") and "file" in (r := json.loads(line))
        ]
    return records


if __name__ == "__main__":
    main(*sys.argv[1:])
