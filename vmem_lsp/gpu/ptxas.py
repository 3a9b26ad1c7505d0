"""Register spills of a GPU kernel, in ptxas's own words (`check --spills`; issue 33).

A spill is no compile error: XLA keeps what ptxas says of registers to itself. A compile
asked for spills (`measuring`, around the compile in capture.py) gets ptxas's `-v` report
of its kernel, which names per entry function its registers per thread and the bytes it
spills to local memory ("17060 bytes spill stores, 17384 bytes spill loads"):

- Triton: XLA compiles the kernel into its module's PTX. The compile is told to dump its
  module (`xla_dump_to`, a compile option read per compile: no worker of its own is needed,
  unlike libtpu's flags for `--estimate`), and `ptxas -v --gpu-name <the PTX's .target>` runs
  on each PTX file with an entry function: as long again as XLA's own ptxas run
  (bench/RESULTS.md, "Register spills").
- Mosaic GPU runs ptxas itself; with MOSAIC_GPU_DUMP_PTXAS set (read at each compile) it
  passes `-v` and prints ptxas's words on fd 1, read here: no cost. It keeps the kernels it
  compiled in the process by their hash, so a kernel it compiled before, unasked, prints
  nothing again: said as such (`missing`).

ptxas is the one jax points XLA at (CUDA_ROOT, else the nvidia-cuda-nvcc wheel that
`vmem-lsp[gpu]` installs), else PATH's.

`parse_ptxas` is pure and the editor side reads with it (gpu_spill_diagnostics.py); the rest
runs in the worker, around a compile, and imports no jax.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

# ---- ptxas -v's report, parsed (pure) -----------------------------------------------------

_COMPILING = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")


@dataclass(frozen=True)
class FunctionUsage:
    """What ptxas says of one function of a kernel's PTX."""

    name: str
    architecture: str | None  # "sm_80": the function is an entry (a kernel) compiled for it; None: a callee
    registers: int | None  # per thread ("Used 255 registers"); None: not said (a callee)
    stack_frame: int  # bytes
    spill_stores: int  # bytes
    spill_loads: int  # bytes
    text: str  # ptxas's lines about it

    @property
    def spills(self) -> bool:
        return bool(self.spill_stores or self.spill_loads)


def parse_ptxas(text: str) -> tuple[FunctionUsage, ...]:
    """Each function `ptxas -v` reports in `text` (several runs may follow each other), in
    the order it names them: "Compiling entry function 'K' for 'sm_80'", "Function
    properties for K", its "N bytes stack frame, N bytes spill stores, N bytes spill loads"
    line and the entry's "Used N registers" line. Lines of no function are left out."""
    found: dict[str, dict] = {}
    entry: str | None = None
    properties: str | None = None

    def of(name: str) -> dict:
        return found.setdefault(name, {"architecture": None, "registers": None, "frame": (0, 0, 0), "lines": []})

    for line in text.splitlines():
        if compiling := _COMPILING.search(line):
            entry, properties = compiling[1], None
            of(entry)["architecture"] = compiling[2]
            of(entry)["lines"].append(line.strip())
        elif named := _PROPERTIES.search(line):
            properties = named[1]
            of(properties)["lines"].append(line.strip())
        elif (frame := _FRAME.search(line)) and properties is not None:
            of(properties)["frame"] = (int(frame[1]), int(frame[2]), int(frame[3]))
            of(properties)["lines"].append(line.strip())
            properties = None
        elif (used := _USED.search(line)) and entry is not None:
            of(entry)["registers"] = int(used[1])
            of(entry)["lines"].append(line.strip())
    return tuple(
        FunctionUsage(name, f["architecture"], f["registers"], frame, stores, loads, "\n".join(f["lines"]))
        for name, f in found.items()
        for frame, stores, loads in [f["frame"]]
    )


def kernel_functions(functions: tuple[FunctionUsage, ...], kernel: str) -> tuple[FunctionUsage, ...]:
    """The functions that are `kernel`: the entries named after it (Triton names its entry
    as the kernel, "matmul_kernel"; Mosaic GPU adds "_mosaic_gpu_kernel"), else every entry,
    else everything reported."""
    name = "".join(c if c.isalnum() else "_" for c in kernel)
    entries = tuple(f for f in functions if f.architecture is not None)
    return tuple(f for f in entries if f.name.startswith(name)) or entries or functions


# ---- which ptxas --------------------------------------------------------------------------


def _package_folders(name: str) -> list[str]:
    """The folders of an installed package (a namespace package has several), without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.origin and os.path.isfile(spec.origin):
        return [os.path.dirname(spec.origin)]
    return list(spec.submodule_search_locations or [])


def find_ptxas() -> str | None:
    """The ptxas jax points XLA at (jax._src.lib's _cuda_path: CUDA_ROOT, the nvidia-cu13 or
    nvidia-cuda-nvcc wheel), else the first on PATH; None when there is none."""
    folders = [os.environ["CUDA_ROOT"]] if os.environ.get("CUDA_ROOT") else []
    for package in ("nvidia.cu13", "nvidia.cuda_nvcc"):
        folders += _package_folders(package)
    for folder in folders:
        candidate = os.path.join(folder, "bin", "ptxas")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("ptxas")


NO_PTXAS = (
    "no ptxas here (the nvidia-cuda-nvcc-cu12 wheel, which pip install 'vmem-lsp[gpu]' installs, "
    "or ptxas on PATH): register spills not checked"
)
PTXAS_SECONDS = 600.0  # one run, at most: XLA's own took 0.5 to 11 s on the kernels measured


def ptx_target(ptx: str) -> str | None:
    """The architecture a PTX file is for (".target sm_90a"), as ptxas's --gpu-name takes it."""
    found = re.search(r"^\s*\.target\s+([\w]+)", ptx, re.MULTILINE)
    return found[1] if found else None


def run_ptxas(ptxas: str, ptx_path: str, architecture: str, cubin: str) -> tuple[bool, str]:
    """`ptxas -v` on one PTX file: (whether it compiled, what it said on stdout and stderr)."""
    done = subprocess.run(
        [ptxas, "-v", "--gpu-name", architecture, ptx_path, "-o", cubin],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        timeout=PTXAS_SECONDS,
    )
    return done.returncode == 0, done.stdout


# ---- in the worker, around one compile ----------------------------------------------------

ASKED = [False]  # this request asks for ptxas's report (check --spills, a GPU target): capture_calls sets it
MOSAIC_FLAG = "MOSAIC_GPU_DUMP_PTXAS"  # Mosaic GPU passes -v to its ptxas and prints what it says on fd 1
DUMP_OPTION = "xla_dump_to"  # XLA writes the module's PTX (and its HLO) there


def key() -> tuple:
    """What a verdict's key adds when the report is asked: a verdict without one does not answer."""
    return ("ptxas -v",) if ASKED[0] else ()


class Measure:
    """One compile's ptxas report, when asked: the compile options that dump its PTX, then
    ptxas's words (`text`), or why there are none (`missing`)."""

    def __init__(self, folder: str | None = None):
        self.folder = folder
        self.text: str | None = None
        self.missing: str | None = None

    def options(self, compiler_options: dict | None) -> dict | None:
        if self.folder is None:
            return compiler_options
        return {**(compiler_options or {}), DUMP_OPTION: self.folder}

    def finish(self, printed: str) -> None:
        """After the compile: Mosaic GPU's printed report, else ptxas on the dumped PTX."""
        said = ptxas_lines(printed)
        if parse_ptxas(said):
            self.text = said
            return
        assert self.folder is not None
        names = sorted(n for n in os.listdir(self.folder) if n.endswith(".ptx"))
        files = []
        for name in names:
            with open(os.path.join(self.folder, name), encoding="utf-8", errors="replace") as f:
                ptx = f.read()
            if ".entry" in ptx and (architecture := ptx_target(ptx)):
                files.append((os.path.join(self.folder, name), architecture))
        if not files:
            self.missing = (
                "no PTX of this kernel for ptxas: Mosaic GPU compiled it before in this worker, and prints "
                "ptxas's report only the first time"
            )
            return
        ptxas = find_ptxas()
        if ptxas is None:
            self.missing = NO_PTXAS
            return
        reports = []
        for path, architecture in files:
            try:
                ok, said = run_ptxas(ptxas, path, architecture, os.path.join(self.folder, "kernel.cubin"))
            except (OSError, subprocess.TimeoutExpired) as error:
                self.missing = f"ptxas ({ptxas}) did not run: {error}"
                return
            if not ok:
                tail = " ".join(line.strip() for line in said.strip().splitlines()[-3:])
                self.missing = f"ptxas ({ptxas}) failed on the kernel's PTX for {architecture}: {tail}"
                return
            reports.append(said.strip())
        self.text = "\n".join(reports)


def ptxas_lines(printed: str) -> str:
    """ptxas's lines among what a compile printed: "ptxas info : ..." and the indented
    "N bytes stack frame, ..." lines that follow "Function properties"."""
    return "\n".join(line for line in printed.splitlines() if line.startswith("ptxas") or _FRAME.search(line)).strip()


@contextlib.contextmanager
def printed_on_stdout() -> Iterator[list[str]]:
    """While the block runs, fd 1 goes to a file; after, what was printed is in the list,
    and what of it is not ptxas's is written to the real fd 1 again."""
    sys.stdout.flush()
    saved = os.dup(1)
    printed: list[str] = []
    with tempfile.TemporaryFile() as file:
        os.dup2(file.fileno(), 1)
        try:
            yield printed
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            file.seek(0)
            text = file.read().decode(errors="replace")
            printed.append(text)
            said = set(ptxas_lines(text).splitlines())
            rest = "\n".join(line for line in text.splitlines() if line not in said)
            if rest.strip():
                os.write(1, (rest + "\n").encode())


@contextlib.contextmanager
def mosaic_report() -> Iterator[None]:
    before = os.environ.get(MOSAIC_FLAG)
    os.environ[MOSAIC_FLAG] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(MOSAIC_FLAG, None)
        else:
            os.environ[MOSAIC_FLAG] = before


def dump_prefix(pid: int) -> str:
    """The start of the PTX dump folders worker `pid` makes: the client removes what a
    worker that ended mid-compile left (remove_left_dumps)."""
    return f"vmem-lsp-ptx-{pid}-"


def remove_left_dumps(pid: int) -> None:
    folder = tempfile.gettempdir()
    for name in os.listdir(folder):
        if name.startswith(dump_prefix(pid)):
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)


@contextlib.contextmanager
def measuring(device) -> Iterator[Measure]:
    """Around one compile for `device`: when the request asked (ASKED) and the device is a
    GPU, the Measure's options dump the PTX, Mosaic GPU prints its ptxas report, and once the
    compile has succeeded the Measure holds ptxas's words or why there are none. Otherwise it
    changes nothing. A compile that raises runs no ptxas."""
    if not ASKED[0] or getattr(device, "platform", None) != "gpu":
        yield Measure()
        return
    folder = tempfile.mkdtemp(prefix=dump_prefix(os.getpid()))
    measure = Measure(folder)
    try:
        with printed_on_stdout() as printed, mosaic_report():
            yield measure
        measure.finish("".join(printed))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
