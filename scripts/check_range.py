"""CI over the supported range, as a user installs it: for each jax@Python pair, a venv with
`jax[tpu]==X` as a project would have it, vmem-lsp installed beside it (pip must not move jax,
jaxlib or libtpu), and `vmem-lsp check examples/` on every chip with nothing cached. Its findings
(file, range, code, chips) must be those of the reference environment's check; the figures in
the messages may differ, being each compiler's own. Then the tests marked `range` run there
(`pytest -m range`, with the `range-test` extra added and the venv active): the golden output
of examples/ and of jax's own kernels for that jax (tests/data/golden/<jax>/), the server's
compile tier, and whether that libtpu still says what tests/data/reports/<libtpu>/ captured.
Prints the time each pair took.

    python scripts/check_range.py --reference .venv/bin/python 0.8.3@3.11 0.12.0.1@3.12

The venvs are kept in VMEM_RANGE_ENVS (default ~/.cache/vmem-lsp-ci/range) so pip's work is
done once; vmem-lsp is reinstalled from this checkout every run. Exit 1 when a pair differs."""

import argparse
import glob
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

from vmem_lsp.compile.interpreter import probe

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHIPS = "v4,v5e,v5p,v6e,v7x"
RANGE_MARK = re.compile(r"pytest\.mark\.range\b")


def base_python(minor: str) -> str:
    """An interpreter of Python 3.M that runs: python3.M on PATH (a pyenv shim may not), else
    pyenv's build."""
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates = [shutil.which(f"python{minor}"), *sorted(glob.glob(f"{pyenv}/versions/{minor}.*/bin/python"))]
    for candidate in filter(None, candidates):
        if ".".join(map(str, probe(candidate).python[:2])) == minor:
            return candidate
    sys.exit(f"check_range: no Python {minor} runs (python{minor} on PATH or pyenv's {minor}.x)")


def pip(python: str, *args: str) -> None:
    subprocess.run([python, "-m", "pip", "--quiet", "--disable-pip-version-check", *args], check=True)


def pinned(python: str) -> dict[str, str | None]:
    """The versions of jax, jaxlib and libtpu installed for that Python (probe asks again
    after a pip install: its cache is keyed by site-packages' change time)."""
    return probe(python).packages or {}


def environment(jax: str, minor: str, top: pathlib.Path) -> str:
    """The pair's venv with jax[tpu]==jax in it, made once."""
    folder = top / f"jax-{jax}-py{minor}"
    python = str(folder / "bin" / "python")
    if pinned(python).get("jax") != jax:  # no venv yet (the probe fails), or another jax in it
        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run([base_python(minor), "-m", "venv", str(folder)], check=True)
        pip(python, "install", f"jax[tpu]=={jax}")
    return python


def findings(python: str, work: pathlib.Path) -> tuple[set[tuple], str]:
    """What `vmem-lsp check examples/` finds with that interpreter's vmem-lsp, and its summary."""
    environ = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "TPU_LIBRARY_PATH")}
    command = [python, "-m", "vmem_lsp", "check", "examples/", "--target", CHIPS, "--format", "json", "--no-cache"]
    done = subprocess.run(command, cwd=work, env=environ, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"check_range: {python}: check exited {done.returncode}\n{done.stderr}")
    report = json.loads(done.stdout)
    found = {
        (d["path"], tuple(d["range"].values()), d["severity"], d["code"], d.get("target"))
        for d in report["diagnostics"]
    }
    return found, report["summary"]


def range_tests(python: str, folder: pathlib.Path) -> list[str]:
    """Run the tests marked `range` with that venv's Python, active as a user's would be (the
    CLI's worker finds it through VIRTUAL_ENV, not the checkout's .venv); their failures."""
    files = [
        str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").glob("test_*.py")) if RANGE_MARK.search(p.read_text())
    ]
    environ = {k: v for k, v in os.environ.items() if k != "TPU_LIBRARY_PATH"}
    environ["VIRTUAL_ENV"] = str(folder)
    environ["PATH"] = f"{folder / 'bin'}{os.pathsep}{environ.get('PATH', '')}"
    command = [python, "-m", "pytest", "-m", "range", "-n", "2", "-q", "-p", "no:cacheprovider", *files]
    done = subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True)
    print("".join(f"range:     {line}\n" for line in done.stdout.splitlines()[-3:]), end="")
    if done.returncode == 0:
        return []
    failed = [line for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    sys.stdout.write(done.stdout[-20000:])
    return failed or [f"pytest -m range exited {done.returncode}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", required=True, help="the Python whose vmem-lsp check is the reference")
    parser.add_argument("pairs", nargs="+", help="jax@python, e.g. 0.8.3@3.11; +gpu adds jax's CUDA plugin")
    args = parser.parse_args()
    top = pathlib.Path(os.environ.get("VMEM_RANGE_ENVS") or os.path.expanduser("~/.cache/vmem-lsp-ci/range"))
    top.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)  # outside the checkout, so no .venv of ours is taken for the project's
        shutil.copytree(ROOT / "examples", work / "examples")
        reference = os.path.abspath(args.reference)  # not resolved: a venv's python is a symlink
        expected, summary = findings(reference, work)
        print(f"range: reference {args.reference}: {summary}")
        failed = 0
        for pair in args.pairs:
            pair, _, extra = pair.partition("+")
            jax, _, minor = pair.partition("@")
            t0 = time.monotonic()
            python = environment(jax, minor, top)
            if extra == "gpu":  # jax's CUDA plugin of the same jax and ptxas: the GPU tests marked `range` run
                pip(python, "install", f"jax[tpu,cuda12-local]=={jax}", "nvidia-cuda-nvcc-cu12>=12.6.85")
            before = pinned(python)
            pip(python, "install", "-e", str(ROOT))
            after = pinned(python)
            t1 = time.monotonic()
            found, summary = findings(python, work)
            t2 = time.monotonic()
            problems = []
            if after != before:
                problems.append(f"installing vmem-lsp moved {before} to {after}")
            problems += [f"only the reference finds {f}" for f in sorted(expected - found, key=str)]
            problems += [f"only jax {jax} finds {f}" for f in sorted(found - expected, key=str)]
            versions = ", ".join(f"{k} {v}" for k, v in sorted(after.items()))
            state = "FAILED" if problems else "same findings"
            print(f"range: jax {jax} on Python {minor} ({versions}): {state}; {summary}")
            print(f"range:   environment and install {t1 - t0:.0f} s, check {t2 - t1:.0f} s")
            pip(python, "install", "-e", f"{ROOT}[range-test]")
            if (moved := pinned(python)) != after:
                problems.append(f"installing the range-test extra moved {after} to {moved}")
            t3 = time.monotonic()
            problems += range_tests(python, pathlib.Path(python).parent.parent)
            print(f"range:   pytest -m range {time.monotonic() - t3:.0f} s (test extra {t3 - t2:.0f} s)")
            for problem in problems:
                print(f"range:   {problem}")
            failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
