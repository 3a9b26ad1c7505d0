"""What a hardware family provides: the one interface the core asks (issue 40).

A family is a kind of hardware with a compiler of its own: TPU chips through libtpu
(vmem_lsp/tpu/), NVIDIA GPUs through XLA's CUDA plugin (vmem_lsp/gpu/). Each is a
package that implements `Family` and registers itself in `families.py`; the core
(engine, views, fixes, sweep, explain, doctor, the worker's capture, the CLI, the
server, the tuner API) asks the family of a target and never tests which one it has.
docs/adding-a-family.md walks through adding one.

Two sides, as the processes are:
- `Family`: read by the CLI, the server and the tuner API. It never imports jax.
- `WorkerSide` (`Family.worker()`): the worker process's part, imported only there:
  the compile-only devices, how one pallas_call is compiled, what it adds to a call.

What crosses the boundary are the dataclasses of `results`, `budget`, `diagnostics`,
`checkup.Check` and the two defined here (`SweepSize`, `Verdict`).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the core's types: this module is imported by everything, and imports nothing of it
    from .budget import Budget, KnownKernel
    from .checkup import Check
    from .correlate import Sources
    from .diagnostics import Diagnostic
    from .fixes.edits import Fix
    from .fixes.search import Problem, Variant
    from .logs import Found, LogReader, Placement
    from .logs import Sources as LogSources
    from .results import CapturedCall, ExampleResult, Origin, PhaseLimits
    from .source.directives import Example
    from .source.model import KernelSite
    from .sweep.decide import Config
    from .sweep.decide import Verdict as SweepVerdict


@dataclass(frozen=True)
class SweepSize:
    """The family's model of one traced sweep config: its total and limit (the tightest of its
    kernels), whether the model alone may decide it (None: compile it), and the parts that
    order configs for monotonicity: per kernel, (name, sorted (kind, index, bytes) of its parts)."""

    total: int
    limit: int
    says: bool | None
    costs: tuple
    why: str = ""  # why the model alone may decide, when it does: "under by more than its error (...)"


TinyCompiles = Callable[[Sequence[str], str], list]  # (targets, kernel source) -> [(target, result, seconds)]


@dataclass(frozen=True)
class Verdict:
    """The compiler's word on one pallas_call, in the worker: whether it fits, its text, the
    kernel-body line its exception points at, how long it took; a worker started with
    --estimate adds the compiler's cycle estimate, a request for spills the compiler's words on them."""

    fits: bool
    text: str | None
    origin: Origin | None = None
    seconds: float = 0.0
    estimated_cycles: int | None = None
    no_estimate: str | None = None
    ptxas: str | None = None
    no_ptxas: str | None = None
    loops_counted: str | None = None  # its loops of run-time length counted and added to the estimate
    loops_uncounted: str | None = None  # why they were not


class WorkerSide(Protocol):
    """A family's part of the worker process (imports jax): devices without hardware, and the
    compile of one captured pallas_call. compile/capture.py and compile/devices.py call it."""

    def install(self) -> None:
        """Hooks into jax, once per worker before user modules import: what this family's own
        spec and buffer classes need to remember where user code made them."""
        ...

    def devices(self, target: str) -> tuple:
        """The target's compile-only devices (jax.devices() as a host of it lists them);
        raises when this machine has no compiler for it."""
        ...

    def missing(self, target: str, said: str) -> str:
        """Why `target` cannot be compiled for here, from what `devices` raised, and what to install."""
        ...

    def fresh_process(self, device) -> bool:
        """This worker may not compile for `device` after what it compiled before (a new one must)."""
        ...

    def compiler_options(self, scoped_limit: int | None) -> dict | None:
        """The compile options of a request's scoped limit (bytes), None for none."""
        ...

    def prepare(self, target: str, spills: bool) -> None:
        """Before a request's calls are captured: what the request asks of the compiler."""
        ...

    def verdict_key(self) -> tuple:
        """What else decides a kept verdict in this request (a report asked for: spills)."""
        ...

    def compile(self, eqn, device, compiler_options: dict | None, on_phase, params: dict | None = None) -> Verdict:
        """One pallas_call equation compiled alone for `device` (`params`: its params changed)."""
        ...

    def count_loops(self, eqn, estimate: Verdict, prefetch: list | None, compile_with) -> Verdict:
        """The estimate with the kernel's loops of run-time length counted where the family's
        estimate leaves them out and the example's values (`prefetch`: its scalar-prefetched
        operands, NumPy or unknown) tell their trips; `compile_with(params)` compiles the
        kernel with its params changed, as the estimate was made."""
        ...

    def call_facts(self, eqn) -> dict:
        """What this family's model reads of a traced call, as CapturedCall fields: how it
        lowers (`backend`: "triton", "mosaic_gpu"), what its body tells the model
        (`family_facts`), what the model cannot place (`unseen`)."""
        ...


class Family(ABC):
    """One hardware family. The class attributes are facts the core reads; the methods
    answer for one of its targets. Defaults are what a family without that part says."""

    name: str  # "tpu": the key of its state in KnownKernel.learned and of its package
    platform: str  # whose compiler params a kernel for it carries (compile/capture.params_platform)
    noun: str  # "TPU": "the TPU compiler did not finish ..."
    compiler: str  # "libtpu": who says a crash's last words
    space: str  # the memory its limits are of: "VMEM", "shared memory"
    kernel_words: str  # what a kernel with its compiler params is, said on another family's target
    params_modules: tuple[str, ...]  # jax modules (and old params dicts' keys) whose compiler params are its own
    worker_module: str  # the WorkerSide, a module imported only in the worker
    default_targets: tuple[str, ...] = ()  # checked when no target is named (the first family's)
    # The package a project's own Python must have to compile for it ("libtpu"); None where the
    # worker says itself that its compiler is missing (a GPU target's VMEM012).
    compiler_package: str | None = None
    model_without_compiler: bool = False  # no compiler here: a trace and the family's model say something
    scoped_limits: bool = False  # `scoped-vmem-limit` may name its targets
    spills_on_request: bool = False  # `check --spills` asks its compiler for its words on spills
    headroom_warnings: bool = False  # a figure of a kernel that fits is sure enough to warn on (VMEM005)
    speed_estimates: bool = False  # its compiler estimates cycles (a worker started with --estimate)
    doctor_section: str = "targets"  # where `doctor` lists its targets
    log_first: bool = False  # its log reports are one line each: read before those that span lines
    space_in_fix_titles: bool = False  # a fix's title names the memory after the limit ("of shared memory")
    # The environment variable naming where its compiler writes log files of its own (libtpu:
    # TPU_LOG_DIR); a worker's go to a folder removed when the worker ends (compile/compiler_logs.py).
    log_folder_variable: str | None = None

    # ---- targets ---------------------------------------------------------------------------
    @abstractmethod
    def targets(self) -> tuple[str, ...]:
        """Every target's canonical name ("v5e", "h100")."""

    @abstractmethod
    def canonical(self, text: str) -> str | None:
        """The canonical name of a target this family knows by `text` ("tpu7x" -> "v7x"), else None."""

    @abstractmethod
    def label(self, target: str) -> str:
        """How messages name the target: "TPU v5e", "NVIDIA H100 80GB HBM3"."""

    def worker(self) -> WorkerSide:
        """The worker's side, imported on first use (only a worker process asks)."""
        return importlib.import_module(self.worker_module)

    def prepare_estimates(self) -> str | None:
        """In a worker started with --estimate, before jax loads: turn on what gives its
        compiler's cycle estimate (libtpu reads its flags once, when it starts); the folder
        the compiler writes it to, when it writes one (said in the worker's hello)."""
        return None

    def estimate_left(self, folder: str) -> tuple[int | None, int | None]:
        """(cycles, grid steps) a compile that killed its worker left in `folder`
        (prepare_estimates'): libtpu can abort after writing its estimate, which is then still
        the estimate, of the grid steps that compile was of (a cut grid's, for a long grid)."""
        return None, None

    def decode_facts(self, data: Any) -> Any:
        """CapturedCall.family_facts back from the worker's JSON."""
        return data

    # ---- results into diagnostics ---------------------------------------------------------
    @abstractmethod
    def diagnostics(self, example: Example, result: ExampleResult, sources: Sources) -> list[Diagnostic]:
        """Every diagnostic one example's result (no error) on one of its targets gives."""

    def ended(self, example: Example, result: ExampleResult, sources: Sources) -> Diagnostic | None:
        """A result with an error this family words itself (its compiler ended the worker over
        something it knows), else None: the error is said as every family says it (VMEM010/012)."""
        return None

    def left_by_crash(self, pid: int) -> tuple[list[str], dict]:
        """What a local worker (`pid`) that its compiler ended left behind: the lines the compiler
        printed, and what it said it was compiling ({"invoked": [file, line], ...})."""
        return [], {}

    def clean_after(self, pid: int) -> None:
        """Remove what a local worker of this family left in the temporary folder."""
        return None

    # ---- the editor's figures --------------------------------------------------------------
    @abstractmethod
    def learn(self, call: CapturedCall, result: ExampleResult, state: Any) -> tuple[Budget, Any]:
        """What a compile of `call` taught: its budget on the result's target, and this family's
        state for estimating edits (`state`: what earlier results of this kernel taught)."""

    def estimate(self, site: KernelSite, known: KnownKernel, target: str, headroom: float):
        """(budget or None, diagnostics) of a site as typed now, on `target`, from what compiles
        taught (known.learned[self.name]); None: this family cannot estimate it there."""
        return None, []

    @abstractmethod
    def model_budget(self, call: CapturedCall, target: str, version: str | None = None) -> Budget:
        """The family's model of a traced call on `target` (no compiler): for the tuner API and sweep.
        `version`: the compiler's whose figures apply (libtpu's), None for the default."""

    def account_kind(self, call: CapturedCall, target: str) -> str:
        """Which body account of `call` (the results.Unseen kind) holds on `target`: "held",
        unless the family's chips keep more of the same body (TPU v5e: "kept")."""
        return "held"

    def model_doubt(self, call: CapturedCall, target: str) -> str | None:
        """Why the family's model may not call a traced (not compiled) `call` a fit on `target`
        though its figure is under the limit (a part of the body it cannot size, its measured
        error near the limit), in words; None when its fit may be said. A model-only verdict
        with a doubt is undecided, never "fits" (the tuner API's fits(compile=False))."""
        return None

    # ---- fixes ----------------------------------------------------------------------------
    def fixes(self, problem: Problem) -> list[Fix]:
        """Every fix for one failing example on this family's targets, best first: by default
        the block shrinks every family shares (fixes/search.py), where they may help."""
        from .fixes.search import shrink_fixes

        return shrink_fixes(problem) if self.shrinks(problem) else []

    def shrinks(self, problem: Problem) -> bool:
        """Block shrinks may help with its targets' failures (an overflow, not an op it lacks)."""
        return True

    def fix_figures(self, problem: Problem, calls: list[CapturedCall], target: str, scale: float) -> tuple[int, int]:
        """(the model's largest total, its limit) over a variant's traced kernels that failed before."""
        raise NotImplementedError(f"{self.name} has no fix model")

    def compiled_figures(self, problem: Problem, variant: Variant) -> dict[str, tuple[int, int]] | None:
        """(the compiler's figure, its limit) per target for a variant it accepted, for the fix's
        label; None where the compile that verified it says none (the model's figures stay)."""
        return None

    # ---- sweep -----------------------------------------------------------------------------
    @abstractmethod
    def sweep_size(self, calls: Sequence[CapturedCall], target: str, version: str | None) -> SweepSize:
        """The model's figures of a traced config's kernels."""

    @abstractmethod
    def sweep_verdict(self, item: Config, result: ExampleResult) -> SweepVerdict:
        """What the compiler said of a config: fits, overflows (used and limit), or another error."""

    def roofline(self, traced: ExampleResult, target: str) -> float | None:
        """Seconds at best of a traced config: the screen before the compiler's cycle estimate
        (None: no figures for it; it is estimated last)."""
        return None

    no_estimate = "this target's compiler gives no cycle estimate"  # said by sweep --rank speed without one

    # ---- explain ---------------------------------------------------------------------------
    def log_reader(self) -> LogReader | None:
        """A reader of a job's log that finds this family's reports, a line at a time."""
        return None

    def explained(self, found: Found) -> Any:
        """The family's parse of a found report, or None when the text is not its own."""
        return None

    def explain_text(self, report: Any, found: Found, head: str, target: str | None, site: Any = None) -> str:
        """The report in words; `site`: the one pallas_call --source placed it on, whose
        written block shapes the ways out may name (bm, block_q), or None."""
        raise NotImplementedError

    def explain_json(self, report: Any, found: Found, target: str | None) -> dict:
        raise NotImplementedError

    def placing(
        self, report: Any, found: Found, target: str | None, log_name: str, sources: LogSources
    ) -> tuple[list, Placement | None]:
        """A found report on the sources' lines: its diagnostics and the placement they come from."""
        return [], None

    # ---- doctor ----------------------------------------------------------------------------
    def doctor(self, tiny: TinyCompiles, limits: PhaseLimits, version: str | None) -> list[Check]:
        """What `doctor` tries for this family: a tiny compile per target, each said."""
        return []
