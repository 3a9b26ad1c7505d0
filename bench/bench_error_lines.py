"""Where compile errors other than memory land (issue 17's closing target).

    python bench/bench_error_lines.py [--jobs 2] [--targets v4,v5e,v5p,v6e,v7x] [--out FILE]
    python bench/bench_error_lines.py --from bench/error_lines_results.jsonl     # re-print, no compiling

Generates a corpus in a temporary folder and checks it with the CLI, the way a user would
(`vmem-lsp check FILE --target ... --format json --no-cache -j 2`, one run per file so that
each example's time to its verdict is measured):

- jax's own kernels (tests/jax_ops.py: OPS, EXAMPLES, copy_with_example):
  - "block:*": the same examples with one block-size argument changed to a size the TPU
    cannot tile (not a multiple of 8 sublanes / 128 lanes, not the whole dimension, but
    still dividing the array, so it is a block-legality error and not a shape error);
  - "op:*": a statement the TPU lowering rejects planted as the first statement of the
    kernel body (the function passed to pallas_call), storing its result into one of the
    kernel's VMEM refs so that nothing drops it: a sort, a shape cast Mosaic cannot lay
    out, an int8 comparison;
  - "base": the unmutated example, for the time to its verdict;
- the project's test kernels: tests/data/kernels/compile_errors.py (one kind per example,
  tests/data/reports/ERRORS.md), tests/data/kernels/untileable.py, and the two kernels of
  tests/test_compile_errors.py whose blocks come after scalar-prefetch operands.

Each error diagnostic that comes from a compile error (VMEM030-034, VMEM011) is one record.
The CLI merges chips already (one diagnostic per cause and subject). A record "lands" when
its line is neither a `# vmem:` directive line nor the line of a `pallas_call` (or of the
functools.partial that stands for it): it is on a BlockSpec or in a kernel body. The
directive's own summary diagnostic is not counted as an error of its own; an example whose
compile error has only its directive summary (nothing placed in the code) counts as one miss.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from support.jax_ops import EXAMPLES, OPS  # noqa: E402

from vmem_lsp.source.locate import locate  # noqa: E402

DEFAULT_OUT = ROOT / "bench" / "error_lines_results.jsonl"
COMPILE_CODES = {"VMEM030", "VMEM031", "VMEM032", "VMEM033", "VMEM034", "VMEM011"}
CHIPS = ("v4", "v5e", "v5p", "v6e", "v7x")
GOAL = 95.0

# Illegal blocks: each replaces one block-size argument of the jax example (tests/jax_ops.py).
# Every size divides its dimension (the arrays are powers of two) but is below the (8, 128)
# tile and not the whole dimension.
BLOCK_VARIANTS = {
    "matmul.py": {
        "bm4": ("block_shape=(1024, 1024)", "block_shape=(4, 1024)"),
        "bn64": ("block_shape=(1024, 1024)", "block_shape=(1024, 64)"),
        "bk64": ("block_k=1024", "block_k=64"),
        # int8 blocks of 16 rows pass jax's (8, 128) check; Mosaic tiles int8 (32, 128) (E2002)
        "s8_bm16": (
            "matmul(bf16[4096, 4096], bf16[4096, 4096], block_shape=(1024, 1024)",
            "matmul(s8[4096, 4096], s8[4096, 4096], block_shape=(16, 1024)",
        ),
    },
    "flash_attention.py": {
        "bq4": ("block_q=2048", "block_q=4"),  # (block_k must be a multiple of 128: checked in Python)
    },
    "megablox/gmm.py": {
        "tm4": ("tiling=(1024, 1024, 1024)", "tiling=(4, 1024, 1024)"),
        "tk64": ("tiling=(1024, 1024, 1024)", "tiling=(1024, 64, 1024)"),
        "tn64": ("tiling=(1024, 1024, 1024)", "tiling=(1024, 1024, 64)"),
    },
    # paged_attention: q's block is (None, heads per kv head, head_dim) of q reshaped to that:
    # whole dimensions; K/V pages are copied by hand (memory_space=ANY). No variant.
    # ragged_paged_attention: no argument sizes a tiled block dimension (queries per block are
    # the third-last dimension; heads per block come from get_min_heads_per_blk); its K/V pages
    # are copied by hand (memory_space=ANY): no variant.
    "splash_attention/splash_attention_kernel.py": {
        "bq4": ("block_q=2048", "block_q=4"),  # (block_kv must be a multiple of 128: checked in Python)
    },
}

# Unsupported ops: (kernel function, the VMEM ref to store into, the function it is nested in).
KERNELS = {
    "example_kernel.py": ("double_kernel", "x_ref", None),
    "matmul.py": ("matmul_kernel", "x_tile_ref", None),
    "flash_attention.py": ("_flash_attention_kernel", "q_tile_ref", None),
    "megablox/gmm.py": ("kernel", "lhs", "gmm"),
    "paged_attention/paged_attention_kernel.py": ("paged_flash_attention_kernel_inline_seq_dim", "q_ref", None),
    "ragged_paged_attention/kernel.py": ("ragged_paged_attention_kernel", "q_ref", None),
    "splash_attention/splash_attention_kernel.py": ("flash_attention_kernel", "q_ref", None),
}
OP_KINDS = {
    "sort": "{r}[...] = jnp.sort({r}[...], axis=-1)",
    "reshape": "{r}[...] = ({r}[...].reshape(-1, 64) * 2).reshape({r}.shape)",
    "cmp-int8": "{r}[...] = jnp.where({r}[...].astype(jnp.int8) < 1, {r}[...], {r}[...] * 2)",
    "cmp-bf16": (
        "{r}[...] = jnp.where({r}[...].astype(jnp.bfloat16) < {r}[...].astype(jnp.bfloat16) * 2, "
        "1.0, 0.0).astype({r}.dtype)"
    ),
    "scalar-bf16": "{r}[...] = jnp.full({r}.shape, {r}[...].astype(jnp.bfloat16)[(0,) * len({r}.shape)], {r}.dtype)",
    "align": "{r}[..., pl.ds(0, 64)] = {r}[..., pl.ds(pl.program_id(0) * 3 + 1, 64)]",
}
TEST_KERNELS = ("tests/data/kernels/compile_errors.py", "tests/data/kernels/untileable.py")
# and the kernels of tests/test_compile_errors.py written out: blocks named after scalar-prefetch operands
TEST_TEXTS = ("PREFETCH_TUPLE", "PREFETCH_MOSAIC")


# ---- the corpus -------------------------------------------------------------------------


def _kernel_function(tree: ast.Module, name: str, outer: str | None) -> ast.FunctionDef:
    scope = tree
    if outer:
        scope = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == outer)
    return next(n for n in ast.walk(scope) if isinstance(n, ast.FunctionDef) and n.name == name)


def plant(source: str, name: str, ref: str, outer: str | None, statement: str) -> tuple[str, int]:
    """`source` with `statement` (about `ref`) as the first statement of the kernel's body,
    after its docstring, and `import jax.numpy as jnp` at the top when the file lacks it.
    Returns the text and the line of the planted statement."""
    lines = source.splitlines(keepends=True)
    if not re.search(r"^import jax\.numpy as jnp$", source, re.M):
        first = next(
            i for i, line in enumerate(lines) if re.match(r"(import |from )", line) and "__future__" not in line
        )
        lines.insert(first, "import jax.numpy as jnp  # planted by bench_error_lines\n")
    tree = ast.parse("".join(lines))
    function = _kernel_function(tree, name, outer)
    body = function.body
    first = (
        body[1]
        if (
            isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
            and len(body) > 1
        )
        else body[0]
    )
    indent = " " * first.col_offset
    line = min([first.lineno, *(d.lineno for d in getattr(first, "decorator_list", ()))])
    lines.insert(line - 1, indent + statement.format(r=ref) + "  # planted\n")
    return "".join(lines), line


def corpus(folder: Path) -> list[dict]:
    """Write the generated files; one entry per file: its path, group, mutation, expected line."""
    entries = []
    for name, example in EXAMPLES.items():
        source = (OPS / name).read_text()
        stem = "jax_" + name.replace("/", "_")[:-3]

        def write(label, text, example_text, kind, planted=None):
            path = folder / f"{stem}__{label}.py"
            path.write_text(text + f"\n# vmem: {example_text}\n")
            entries.append({"file": str(path), "source": name, "kind": kind, "planted_line": planted})

        write("base", source, example, "base")
        for label, (old, new) in BLOCK_VARIANTS.get(name, {}).items():
            assert old in example, (name, old)
            write(f"block_{label}", source, example.replace(old, new), f"block:{label}")
        function, ref, outer = KERNELS[name]
        for kind, statement in OP_KINDS.items():
            text, line = plant(source, function, ref, outer, statement)
            write(f"op_{kind}", text, example, f"op:{kind}", line)
    for path in TEST_KERNELS:
        entries.append({"file": str(ROOT / path), "source": path, "kind": "test-kernel", "planted_line": None})
    import test_compile_errors

    for name in TEST_TEXTS:
        path = folder / f"test_{name.lower()}.py"
        path.write_text(getattr(test_compile_errors, name))
        entries.append(
            {
                "file": str(path),
                "source": f"tests/test_compile_errors.py:{name}",
                "kind": "test-kernel",
                "planted_line": None,
            }
        )
    return entries


# ---- checking -----------------------------------------------------------------------------


def check(entry: dict, targets: str, jobs: int) -> dict:
    # `vmem-lsp check`, with this checkout's vmem_lsp (a copy of the bench in another worktree
    # measures that worktree's code)
    command = [
        sys.executable,
        "-m",
        "vmem_lsp",
        "check",
        entry["file"],
        "--target",
        targets,
        "--format",
        "json",
        "--no-cache",
        "-j",
        str(jobs),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env)
    seconds = time.perf_counter() - started
    try:
        report = json.loads(run.stdout)
    except json.JSONDecodeError:
        report = {"summary": f"exit {run.returncode}: {run.stderr[-2000:]}", "diagnostics": []}
    return {
        "seconds": round(seconds, 2),
        "exit": run.returncode,
        "summary": report.get("summary"),
        "diagnostics": report["diagnostics"],
    }


def lines_of(path: str) -> tuple[set[int], set[int], list[tuple[int, int]]]:
    """The directive lines, the pallas_call anchor lines and the BlockSpec line ranges of a file."""
    text = Path(path).read_text()
    directives = {i for i, line in enumerate(text.splitlines(), 1) if re.match(r"\s*# vmem:", line)}
    sites = locate(text, path).sites
    anchors = {s.name_span.start_line for s in sites} | {s.span.start_line for s in sites}
    specs = [(b.span.start_line, b.span.end_line) for s in sites for b in (*s.in_specs, *s.out_specs)]
    return directives, anchors, specs


def key_line(text: str) -> str:
    """The line of a compiler text that names the error (ERRORS.md's 'key line')."""
    for line in text.splitlines():
        line = line.strip()
        line = re.sub(r"^(INTERNAL|UNKNOWN|INVALID_ARGUMENT): ", "", line)
        line = re.sub(r"^Mosaic failed to compile TPU kernel: ", "", line)
        if line and not line.startswith(("Traceback", "The above", "---")):
            line = re.sub(r"/\S+\.py:\d+", "<file>:<line>", line)
            line = re.sub(r"%\d+", "%N", line)
            line = re.sub(r"\b\d+\b", "N", line)  # sizes and indices; not E2003 or vector<8x128xf32>
            return line[:140]
    return ""


def chips_of(d: dict) -> list[str]:
    return [c for c in d.get("target", "").split(",") if c]


def texts_of(d: dict) -> list[str]:
    facts = d.get("facts") or {}
    if "targets" in facts:
        return [f.get("text") or "" for f in facts["targets"].values()]
    return [facts.get("text") or ""]


def records_for(entry: dict, result: dict) -> list[dict]:
    """One record per compile-error diagnostic placed in the code (landed or not), and one
    miss per example whose compile error got no diagnostic but its directive summary."""
    by_path = {}
    records = []
    diagnostics = [d for d in result["diagnostics"] if d["code"] in COMPILE_CODES]
    summaries, placed = [], []
    for d in diagnostics:
        path = d["abs_path"]
        if path not in by_path:
            by_path[path] = lines_of(path) if os.path.exists(path) else (set(), set(), [])
        directives, anchors, specs = by_path[path]
        line = d["range"]["start_line"]
        (summaries if line in directives else placed).append((d, line, anchors, specs))
    for d, line, anchors, specs in placed:
        if line in anchors:
            where = "pallas_call"
        elif any(a <= line <= b for a, b in specs):
            where = "blockspec"
        elif entry["planted_line"] and line == entry["planted_line"] and d["abs_path"] == entry["file"]:
            where = "planted"
        else:
            where = "body/other"
        records.append(_record(entry, d, line, where))
    placed_codes = {(d["code"], d["target"]) for d, *_ in placed}
    for d, line, *_ in summaries:
        if (d["code"], d["target"]) not in placed_codes:
            records.append(_record(entry, d, line, "directive"))
    return records


def block_agrees(d: dict) -> bool | None:
    """Whether a VMEM030 on a BlockSpec names the block the compiler names: the block shape in
    its message ends like the one in the compiler's text (a wrong operand, say the one before a
    scalar-prefetch array, would be on a BlockSpec line and still be wrong). None: not a block
    error on a spec, or a text without the shape (E2003)."""
    said = re.search(r"block \(([^)]*)\)", d["message"])
    text = next((t for t in texts_of(d) if t), "")
    jax = re.search(r"has block shape (.*?), array shape", text, re.S)
    mosaic = re.search(r"but its block shape \(([^)]*)\)", text)
    if d["code"] != "VMEM030" or said is None or not (jax or mosaic):
        return None
    named = (
        [int(n) for n in re.findall(r"block_size=(\d+)", jax[1])]
        if jax
        else [int(n) for n in re.findall(r"\d+", mosaic[1])]
    )
    shown = [int(n) for n in re.findall(r"\d+", said[1])]
    tail = min(len(named), len(shown), 2)
    tiling = re.search(r"has tiling \((\d+), (\d+)\)", text)
    multiples = re.search(r"multiples of \((\d+), (\d+)\)", d["message"])
    same_tile = not (tiling and multiples) or tiling.groups() == multiples.groups()
    return bool(tail) and named[-tail:] == shown[-tail:] and same_tile


def _record(entry, d, line, where) -> dict:
    return {
        "file": os.path.basename(entry["file"]),
        "source": entry["source"],
        "mutation": entry["kind"],
        "planted_line": entry["planted_line"],
        "path": os.path.basename(d["abs_path"]),
        "line": line,
        "where": where,
        "landed": where not in ("directive", "pallas_call"),
        "code": d["code"],
        "block_agrees": block_agrees(d) if where == "blockspec" else None,
        "chips": chips_of(d),
        "key": key_line(next((t for t in texts_of(d) if t), "")),
        "message": d["message"][:300],
    }


# ---- tables -------------------------------------------------------------------------------


def mutation_group(mutation: str) -> str:
    return mutation.split(":")[0]


def report(rows: list[dict]) -> str:
    errors = [r for r in rows if r["type"] == "error"]
    runs = [r for r in rows if r["type"] == "run"]
    targets = [c for c in CHIPS if any(c in r.get("targets", CHIPS) for r in runs)]
    out = []
    landed = sum(r["landed"] for r in errors)
    share = 100.0 * landed / len(errors) if errors else 0.0
    out.append(
        f"corpus: {len(runs)} files ({sum(1 for r in runs if r['mutation'] != 'base')} mutated or "
        f"test kernels, {sum(1 for r in runs if r['mutation'] == 'base')} unmutated jax examples); "
        f"targets {','.join(targets)}"
    )
    out.append(
        f"compile errors (diagnostics VMEM030-034/VMEM011 placed, plus examples with only a directive "
        f"summary): {len(errors)}"
    )
    out.append(f"landed on a BlockSpec or body line: {landed}/{len(errors)} = {share:.1f}% (goal {GOAL:.0f}%)")
    where = Counter(r["where"] for r in errors)
    out.append("where: " + ", ".join(f"{k} {v}" for k, v in sorted(where.items())))
    checked = [r for r in errors if r.get("block_agrees") is not None]
    if checked:
        agree = sum(r["block_agrees"] for r in checked)
        out.append(
            f"block errors on a BlockSpec whose block is the one the compiler names: {agree}/{len(checked)}"
            + "".join(
                f"\n  names another block: {r['file']}:{r['line']} {r['message'][:120]}"
                for r in checked
                if not r["block_agrees"]
            )
        )
    planted = [r for r in errors if r["planted_line"] and r["path"] == r["file"]]
    if planted:
        exact = sum(r["line"] == r["planted_line"] for r in planted)
        out.append(f"op mutations on the planted line exactly: {exact}/{len(planted)}")
    out.append("")
    out.append("by mutation kind:")
    out.append(f"  {'kind':<22} {'errors':>6} {'landed':>6} {'share':>7}")
    for kind in sorted({r["mutation"] for r in errors}):
        group = [r for r in errors if r["mutation"] == kind]
        n = sum(r["landed"] for r in group)
        out.append(f"  {kind:<22} {len(group):>6} {n:>6} {100.0 * n / len(group):>6.1f}%")
    misses = [r for r in errors if not r["landed"]]
    out.append("")
    out.append(f"misses by kind ({len(misses)}):")
    grouped = Counter((r["mutation"], r["code"], r["where"], r["key"]) for r in misses)
    for (mutation, code, where, key), n in grouped.most_common():
        files = sorted(
            {
                r["file"]
                for r in misses
                if (r["mutation"], r["code"], r["where"], r["key"]) == (mutation, code, where, key)
            }
        )
        out.append(f"  {n:>3}  {mutation} {code} on the {where}: {key}")
        out.append(f"       {', '.join(files)}")
    if not misses:
        out.append("  none")
    out.append("")
    out.append("per chip (errors that fail on it / landed):")
    for chip in targets:
        group = [r for r in errors if chip in r["chips"]]
        n = sum(r["landed"] for r in group)
        out.append(f"  {chip:<4} {len(group):>4} / {n:>4}")
    out.append("")
    out.append("files with no compile error (the mutation did not give one, or it is caught before compiling):")
    quiet = [r for r in runs if r["mutation"] != "base" and not r["compile_errors"]]
    for r in quiet:
        out.append(f"  {r['file']}: {r['summary']}; codes {','.join(r['codes']) or '-'}")
    if not quiet:
        out.append("  none")
    out.append("")
    out.append(
        f"time to the verdict per file (wall seconds of one CLI run: {len(targets)} chips, "
        f"-j {runs[0].get('jobs', '?') if runs else '?'}, no cache):"
    )
    base = {r["source"]: r["seconds"] for r in runs if r["mutation"] == "base"}
    out.append(f"  {'source':<45} {'unmutated':>9} {'mutated median':>14} {'max':>6}  files")
    by_source = defaultdict(list)
    for r in runs:
        if r["mutation"] != "base":
            by_source[r["source"]].append(r["seconds"])
    for source, times in sorted(by_source.items()):
        times.sort()
        b = f"{base[source]:.1f}" if source in base else "-"
        out.append(f"  {source:<45} {b:>9} {times[len(times) // 2]:>14.1f} {times[-1]:>6.1f}  {len(times)}")
    out.append(f"  {'by mutation kind':<45} {'':>9} {'median':>14} {'max':>6}")
    by_kind = defaultdict(list)
    for r in runs:
        if r["source"] in base and r["mutation"] != "base":
            by_kind[r["mutation"].split(":")[0] + ":*" if r["mutation"].startswith("block") else r["mutation"]].append(
                r["seconds"]
            )
    if base:
        by_kind["base"] = sorted(base.values())
    for kind, times in sorted(by_kind.items()):
        times.sort()
        out.append(f"  {kind:<45} {'':>9} {times[len(times) // 2]:>14.1f} {times[-1]:>6.1f}  {len(times)}")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="source", type=Path, help="re-print the tables from recorded JSON lines")
    parser.add_argument("--targets", default=",".join(CHIPS))
    parser.add_argument("--jobs", "-j", type=int, default=2)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", help="comma-separated substrings of generated file names (a quick look)")
    parser.add_argument("--keep", type=Path, help="write the corpus here instead of a temporary folder")
    args = parser.parse_args()
    if args.source:
        rows = [json.loads(line) for line in args.source.read_text().splitlines() if line.strip()]
        print(report(rows))
        return 0
    with tempfile.TemporaryDirectory(prefix="error_lines_") as temp:
        folder = args.keep or Path(temp)
        folder.mkdir(parents=True, exist_ok=True)
        entries = corpus(folder)
        if args.only:
            wanted = args.only.split(",")
            entries = [e for e in entries if any(w in os.path.basename(e["file"]) for w in wanted)]
        rows = []
        started = time.perf_counter()
        for number, entry in enumerate(entries, 1):
            result = check(entry, args.targets, args.jobs)
            records = records_for(entry, result) if entry["kind"] != "base" else []
            codes = sorted({d["code"] for d in result["diagnostics"]})
            rows.append(
                {
                    "type": "run",
                    "file": os.path.basename(entry["file"]),
                    "source": entry["source"],
                    "mutation": entry["kind"],
                    "targets": args.targets.split(","),
                    "jobs": args.jobs,
                    "seconds": result["seconds"],
                    "exit": result["exit"],
                    "summary": result["summary"],
                    "codes": codes,
                    "compile_errors": len(records),
                }
            )
            rows.extend({"type": "error", **r} for r in records)
            print(
                f"[{number}/{len(entries)}] {os.path.basename(entry['file'])}: {result['seconds']:.1f} s, "
                f"{result['summary']}; {sum(r['landed'] for r in records)}/{len(records)} landed",
                file=sys.stderr,
                flush=True,
            )
        print(f"corpus checked in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
