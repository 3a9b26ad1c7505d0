"""Runs every benchmark and writes bench/RESULTS.md: a table of the headline
figures, each with the command, the machine and the date, then each
benchmark's own output verbatim."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

BENCHES = [
    ("locate", [PY, "bench/bench_locate.py", "--runs", "9"]),
    ("check", [PY, "bench/bench_check.py", "--runs", "2"]),
    ("server", [PY, "bench/bench_server.py"]),
    ("fixes", [PY, "bench/bench_fixes.py"]),
    ("quickfix", [PY, "bench/bench_quick_fix.py"]),
    ("load", [PY, "bench/bench_load.py"]),
    ("model", [PY, "bench/model_harness.py", "--from", "bench/model_results.jsonl"]),
    ("remote", [PY, "bench/bench_remote.py"]),
    ("limits", [PY, "bench/bench_limits.py"]),
]

# (row, bench, regex over its output, how to show the match)
ROWS = [
    (
        "locate, largest jax ops/tpu file, cold median",
        "locate",
        r"slowest cold median: (\S+) ([\d.]+) ms",
        "{1} ms ({0})",
    ),
    ("check examples/, cold", "check", r"cold: median ([\d.]+) s", "{0} s"),
    ("check examples/, warm (cache hit, no compiler)", "check", r"warm: median ([\d.]+) s", "{0} s"),
    (
        "static diagnostics, didChange -> publish, p50 / p95",
        "server",
        r"p50 ([\d.]+) ms, p95 ([\d.]+) ms",
        "{0} / {1} ms",
    ),
    ("server memory growth over 2,000 edits", "server", r"growth ([+\-\d.]+) MB", "{0} MB"),
    *[
        (
            f"warm save -> compiler diagnostics, {name} (v5e+v6e): kernel unchanged / edited",
            "server",
            name.replace(".", r"\.") + r" on v5e\+v6e: kernel unchanged ([\d.]+) s; kernel edited ([\d.]+) s",
            "{0} / {1} s",
        )
        for name in ("copy_whole.py", "matmul.py", "add_fits.py")
    ],
    ("fix search, median / max per example", "fixes", r"fix search: median ([\d.]+) s, max ([\d.]+) s", "{0} / {1} s"),
    ("compiles to the first verified fix, mean", "fixes", r"first verified fix: mean ([\d.]+)", "{0}"),
    *[
        (
            f"codeAction after the first compiler diagnostic, {name}, {kind} client: median / max",
            "quickfix",
            name.replace(".", r"\.") + r" on \w+, " + kind + r" client: median ([\d.]+) s, max ([\d.]+) s",
            "{0} / {1} s",
        )
        for name in ("copy_whole.py", "matmul.py")
        for kind in ("bare", "resolving")
    ],
    (
        "hover under load, p50 / p95 / max",
        "load",
        r"p50 ([\d.]+) ms, p95 ([\d.]+) ms, max ([\d.]+) ms",
        "{0} / {1} / {2} ms",
    ),
    ("slowest hovers under load (ms, after edit N)", "load", r"slowest hovers \(ms after edit N\): (.*)", "{0}"),
    ("server memory under load (edits: MB)", "load", r"server memory \(edits, MB\): (.*)", "{0}"),
    ("final diagnostics = final text's, after load", "load", r"final text: (\w+)", "{0}"),
    ("pool speedup, 20 kernels x 3 chips", "remote", r"speedup with \d+ workers: ([\d.]+)x", "{0}x"),
    ("SSH overhead per compile", "remote", r"overhead ([\d-]+) ms per compile", "{0} ms"),
    ("hanging example reported (default limits)", "limits", r"reported after ([\d.]+) s", "{0} s"),
    *[
        (
            f"check killed by {how} mid-example: processes left",
            "limits",
            how + r" mid-example: (\d+) process\(es\) left after ([\d.]+) s",
            "{0} after {1} s",
        )
        for how in ("SIGTERM", "SIGKILL")
    ],
]


def machine() -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores, {memory:.0f} GiB, {platform.machine()}, Python {platform.python_version()}"


def main() -> None:
    outputs, durations = {}, {}
    for name, command in BENCHES:
        print(f"== {name}: {' '.join(command[1:])}", flush=True)
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        durations[name] = time.perf_counter() - started
        text = "\n".join(
            line
            for line in (done.stdout + done.stderr).splitlines()
            if "vmemLsp/status" not in line and "Ignoring notification" not in line
        )
        outputs[name] = text
        print(text[-1500:], flush=True)
    date = time.strftime("%Y-%m-%d")
    lines = [
        "# Benchmark results",
        "",
        f"Made by `bench/run` on {date}; machine: {machine()}.",
        "Each figure is from the command named in its row; the outputs follow verbatim.",
        "",
        "| figure | value | command |",
        "| --- | --- | --- |",
    ]
    commands = {name: " ".join(c[1:]) for name, c in BENCHES}
    for label, bench, pattern, shape in ROWS:
        match = re.search(pattern, outputs.get(bench, ""))
        value = shape.format(*match.groups()) if match else "(not measured: see output)"
        lines.append(f"| {label} | {value} | `python {commands[bench]}` |")
    model = re.findall(r"^\| (v\w+) \|.*$", outputs.get("model", ""), re.M)
    if model:
        lines += [
            "",
            "Model agreement per chip (`python bench/model_harness.py --from bench/model_results.jsonl`):",
            "",
        ]
        lines += [line for line in outputs["model"].splitlines() if line.startswith("|")]
    for name, _ in BENCHES:
        lines += ["", f"## {name} ({durations[name]:.0f} s)", "", "```", outputs[name].strip(), "```"]
    (ROOT / "bench" / "RESULTS.md").write_text("\n".join(lines) + "\n")
    print("wrote bench/RESULTS.md")


if __name__ == "__main__":
    main()
