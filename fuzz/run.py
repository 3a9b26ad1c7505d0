"""Coverage-guided fuzzing with atheris (libFuzzer) of what reads untrusted
text: the compiler's report parser, the locator, the `# vmem:` directive
parser and the didChange splice. The properties are tests/fuzz_properties.py,
which hypothesis (tests/test_fuzz.py) checks from structured inputs; each
fails on an internal error (an exception, the locator's `internal_error`) and
on an answer that disagrees with one computed independently. libFuzzer mutates
bytes towards new branches, starting from the real reports in
tests/data/reports and the jax ops files.

    .venv/bin/python fuzz/run.py report  -runs=20000
    .venv/bin/python fuzz/run.py locate  -max_total_time=60
    .venv/bin/python fuzz/run.py directives -runs=20000
    .venv/bin/python fuzz/run.py did_change -runs=20000

Any other argument goes to libFuzzer. A failed property raises, and
libFuzzer saves the input as crash-* in the current folder and exits non-zero;
once fixed, the input goes in fuzz/regressions/TARGET/ and every run replays it.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import atheris

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "tests" / "data" / "reports"
REGRESSIONS = Path(__file__).resolve().parent / "regressions"  # inputs that once failed, replayed first
sys.path.insert(0, str(ROOT / "tests"))

with atheris.instrument_imports(include=["vmem_lsp"]):
    from lsprotocol import types
    from support.fuzz_properties import check_directive, check_locate, check_report, check_splice


def text_of(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def did_change(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    numbers = [fdp.ConsumeIntInRange(0, 80) for _ in range(4)]
    new = fdp.ConsumeUnicodeNoSurrogates(8)
    text = fdp.ConsumeUnicodeNoSurrogates(4096)
    check_splice(
        text,
        types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(*numbers[:2]), types.Position(*numbers[2:])), text=new
        ),
    )


TARGETS = {
    "report": lambda data: check_report(text_of(data)),
    "locate": lambda data: check_locate(text_of(data)),
    "directives": lambda data: check_directive(text_of(data)),
    "did_change": did_change,
}


def seed_corpus(target: str) -> Path:
    """A fresh folder of real inputs for libFuzzer to start from."""
    folder = Path(tempfile.mkdtemp(prefix=f"vmem-fuzz-{target}-"))
    seeds: list[bytes] = []
    if target == "report":
        seeds = [p.read_bytes() for p in sorted(REPORTS.glob("*.txt"))]
    elif target in ("locate", "did_change"):
        import jax.experimental.pallas.ops.tpu as ops

        seeds = [p.read_bytes() for p in sorted(Path(ops.__path__[0]).rglob("*.py"))[:8]]
    elif target == "directives":
        seeds = [b"matmul(bf16[8192, 8192], bf16[8192, 8192], bm=1024)", b"# vmem: f(f32[8, 128])\n"]
    seeds += [p.read_bytes() for p in sorted((REGRESSIONS / target).glob("*"))]
    for number, seed in enumerate(seeds):
        (folder / f"seed{number}").write_bytes(seed)
    return folder


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: fuzz/run.py {{{'|'.join(TARGETS)}}} [libFuzzer options]")
    target = sys.argv[1]
    args = [sys.argv[0], *sys.argv[2:]]
    if not any(not a.startswith("-") for a in sys.argv[2:]):
        args.append(str(seed_corpus(target)))
    atheris.Setup(args, TARGETS[target])
    atheris.Fuzz()


if __name__ == "__main__":
    main()
