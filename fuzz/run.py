"""Coverage-guided fuzzing with atheris (libFuzzer) of what reads untrusted
text: the compiler's report parser, the locator, the `# vmem:` directive
parser and the didChange splice. hypothesis (tests/test_fuzz.py) covers the
same properties from structured inputs; libFuzzer mutates bytes towards new
branches, starting from the real reports in tests/data/reports and the jax
ops files.

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
REGRESSIONS = Path(__file__).resolve().parent / "regressions"     # inputs that once failed, replayed first

with atheris.instrument_imports(include=["vmem_lsp"]):
    from lsprotocol import types
    from pygls.workspace.position_codec import PositionCodec

    from vmem_lsp.report.parse import parse_report
    from vmem_lsp.server.documents import apply_change, offset_of
    from vmem_lsp.source.directives import check_call, find_examples
    from vmem_lsp.source.locate import locate

FORMS = {"physical", "scoped", "single_allocation", "block_shape", "unknown"}
CODEC = PositionCodec()


def text_of(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def report(data: bytes) -> None:
    text = text_of(data)
    parsed = parse_report(text)
    assert parsed.text == text, "the user must always get the whole text"
    assert parsed.form in FORMS, parsed.form
    assert all(a.size >= 0 for a in parsed.allocations)


def locate_target(data: bytes) -> None:
    result = locate(text_of(data), "fuzzed.py")
    assert isinstance(result.sites, tuple)


def directives(data: bytes) -> None:
    text = " ".join(text_of(data).splitlines())
    problem = check_call(text)
    assert problem is None or isinstance(problem, str)
    examples, errors = find_examples(f"# vmem: {text}\n", "fuzzed.py")
    assert len(examples) + len(errors) == 1, "one directive line: an example or a reason, never neither"


def did_change(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    numbers = [fdp.ConsumeIntInRange(0, 80) for _ in range(4)]
    new = fdp.ConsumeUnicodeNoSurrogates(8)
    text = fdp.ConsumeUnicodeNoSurrogates(4096)
    change = types.TextDocumentContentChangePartial(
        range=types.Range(types.Position(*numbers[:2]), types.Position(*numbers[2:])), text=new)
    after = apply_change(text, change, CODEC)
    start = offset_of(text, change.range.start, CODEC)
    end = max(start, offset_of(text, change.range.end, CODEC))
    assert 0 <= start <= end <= len(text)
    assert after == text[:start] + new + text[end:]


TARGETS = {"report": report, "locate": locate_target, "directives": directives, "did_change": did_change}


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
