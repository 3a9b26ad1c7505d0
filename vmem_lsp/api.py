"""The Python API for autotuners: does this config fit, and which of these do.

    import vmem_lsp
    verdict = vmem_lsp.fits(matmul, "bf16[8192, 8192]", jax.ShapeDtypeStruct((8192, 8192), jnp.bfloat16),
                            target="v6e", bm=1024, bk=1024, bn=1024)
    good = vmem_lsp.prune(matmul, ("bf16[8192, 8192]", "bf16[8192, 8192]"), configs, targets=("v5e", "v6e"))
    fastest = vmem_lsp.rank(matmul, ("bf16[8192, 8192]", "bf16[8192, 8192]"), configs, target="v6e", top=5)

The function runs where `vmem-lsp check` runs examples: in a worker process
(in the tuner's own Python, unless [tool.vmem-lsp] python names another)
that imports the function's module by its file, so it must be defined at the
top level of a module (a script's own functions too: guard the script's work
with `if __name__ == "__main__":`, as multiprocessing asks). One worker pool
and the disk cache (`.vmem_lsp_cache` of the project, as the CLI) serve every
call; the calls are synchronous and may come from many threads.
"""

from __future__ import annotations

import atexit
import dataclasses
import inspect
import math
import os
import sys
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .dtypes import COMPILER_DTYPES

if TYPE_CHECKING:  # `import vmem_lsp` stays light: the engine is imported on first use
    from .compile.backend import CheckRequest, ResultCache, Runner
    from .config import Settings
    from .results import ExampleResult
    from .source.directives import Example
    from .sweep.run import SweepOutcome

__all__ = ["Decided", "Ranked", "Verdict", "decide", "fits", "prune", "rank"]

WORKER_ENV = "VMEM_LSP_IN_WORKER"


@dataclass(frozen=True)
class Verdict:
    """What fits() says of one call on one chip."""

    # None: not decided: it did not compile for another reason, no compiler for the target is
    # here, or the model alone cannot say (see `error`)
    fits: bool | None
    used: int | None  # bytes of VMEM: the compiler's for an overflow, else the layout model's
    limit: int | None
    parts: tuple[tuple[str, int], ...]  # (what, bytes): windows, scratch, compiler-internal
    decided_by: str  # "compiler" | "model" | "monotonicity" | "error" | "undecided"
    target: str
    error: str | None = None
    why: str = ""  # how it was decided, in a sentence (decide()'s: the sweep's words)


@dataclass(frozen=True)
class Decided:
    """One config of decide(), with its verdict on each target: what prune() keeps and why it
    leaves a config out."""

    config: dict[str, object]
    verdicts: tuple[Verdict, ...]

    @property
    def fits(self) -> bool:
        """On every target, decided: prune's rule (undecided is never taken for a fit)."""
        return all(v.fits is True for v in self.verdicts)

    @property
    def why_not(self) -> str:
        """Why it was left out, from the first target it does not fit on; "" when it fits."""
        return next((why_not(v) for v in self.verdicts if v.fits is not True), "")


def why_not(v: Verdict) -> str:
    """A verdict that is not a fit, in a sentence: who said so, with the figures."""
    from .render import size

    figures = f"{size(v.used)} of {size(v.limit)}" if v.used is not None and v.limit else None
    if v.fits is None:
        return f"{v.target}: undecided ({v.error or v.why or 'no compiler decided it'})"
    if v.decided_by == "compiler" and figures:
        return f"{v.target}: the compiler needs {figures}"
    if v.decided_by == "model" and figures:
        return f"{v.target}: the layout model puts it at ~{figures}" + (f", {v.why}" if v.why else "")
    return f"{v.target}: {v.why or v.error or 'does not fit'}"


@dataclass(frozen=True)
class Ranked:
    """A config that fits on rank()'s chip, with the compiler's word on its speed."""

    config: dict[str, object]
    estimated_cycles: int | None  # the compiler's static estimate; cycles compare within one chip only
    rank: int | None  # 1: the fewest cycles; None without an estimate
    roofline_seconds: float | None  # the screen's time at best, which chose what was estimated
    no_estimate: str | None = None  # why there is no estimate: not screened in, or libtpu aborted
    caveat: str | None = None  # why the estimate may not rank as a run would (a loop of unknown trip count)
    loops: str | None = None  # its loops' trips, counted from the example's values, and their cycles a trip


def shape_text(value: object) -> str:
    """An argument as an example writes it: a ShapeDtypeStruct (or an array)
    as `bf16[8192, 8192]`; a shape string as it is; anything else by repr."""
    if isinstance(value, str):
        return value
    if type(value) in (int, bool) or value is None:  # a tuner's block sizes: repr is the literal
        return repr(value)
    if (given := values_text(value)) is not None:
        return given
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        name = DTYPE_NAMES.get(value.dtype) if isinstance(value.dtype, Hashable) else None
        if name is None:
            import numpy as np

            name = COMPILER_DTYPES.get(np.dtype(value.dtype).name)
            if name is None:
                raise TypeError(f"no shape literal for dtype {value.dtype}")
            if isinstance(value.dtype, Hashable):
                DTYPE_NAMES[value.dtype] = name
        return f"{name}[{', '.join(str(d) for d in value.shape)}]"
    text = repr(value)
    import ast

    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise TypeError(
            f"argument {text[:60]} cannot be written in an example: use a shape, a ShapeDtypeStruct or a literal"
        ) from None
    return text


# The most elements of an integer array sent by its values (a page table of 64 sequences x 1024).
MOST_VALUES = 1 << 16


def values_text(value: object) -> str | None:
    """A small integer or boolean array (NumPy or jax, not a ShapeDtypeStruct) by its values,
    which the worker makes a constant of the trace: a kernel's scalar-prefetched lengths, which
    tell how many times its loops run (rank() counts them). None for anything else."""
    import numpy as np

    from .source.directives import VALUES_FUNCTION

    if not hasattr(value, "__array__") or not hasattr(value, "dtype") or not hasattr(value, "shape"):
        return None
    try:
        kind = np.dtype(value.dtype)
    except TypeError:
        return None
    if kind.kind not in "iub" or math.prod(value.shape) > MOST_VALUES:
        return None
    array = np.asarray(value)
    return f"{VALUES_FUNCTION}({kind.name!r}, {tuple(array.shape)!r}, {array.reshape(-1).tolist()!r})"


DTYPE_NAMES: dict[Hashable, str] = {}  # a dtype -> its shape literal's spelling


def call_text(fn: Callable[..., object], args: Sequence[object], kwargs: Mapping[str, object]) -> str:
    if "<locals>" in fn.__qualname__:
        raise TypeError(
            f"{fn.__qualname__} is defined inside a function: the worker imports it by name, "
            f"so define it at the top level of a module"
        )
    written = [shape_text(a) for a in args] + [f"{k}={shape_text(v)}" for k, v in kwargs.items()]
    return f"{fn.__qualname__}({', '.join(written)})"


def example_for(fn: Callable[..., object], args: Sequence[object], kwargs: Mapping[str, object]) -> Example:
    from .source.directives import Example
    from .source.model import Span

    return Example(source_path(fn), 1, Span(1, 0, 1, 0), call_text(fn, args, kwargs))


SOURCE_PATHS: dict[Callable[..., object], str] = {}  # a function -> its file: asked once, not per config


def source_path(fn: Callable[..., object]) -> str:
    try:
        return SOURCE_PATHS[fn]
    except (KeyError, TypeError):
        pass
    path = inspect.getsourcefile(inspect.unwrap(fn))
    if path is None:
        raise TypeError(f"{fn!r} has no source file for the worker to import")
    path = os.path.abspath(path)
    try:
        if len(SOURCE_PATHS) < 1024:
            SOURCE_PATHS[fn] = path
    except TypeError:  # unhashable: asked each time
        pass
    return path


@dataclass(frozen=True)
class Ready:
    """The engine's parts, once made."""

    settings: Settings
    cache: ResultCache
    workers: Runner


class Engine:
    """One worker pool and the disk cache for the process, made on first use."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.parts: Ready | None = None

    def ready(self) -> Ready:
        with self.lock:
            if self.parts is None:
                if os.environ.get(WORKER_ENV):
                    raise RuntimeError(
                        "vmem_lsp.fits was called inside the vmem-lsp worker, which imports the "
                        "function's module: guard the module's tuning code with "
                        '`if __name__ == "__main__":`'
                    )
                from .compile.backend import cache_for, runner_for
                from .config import load_settings

                settings = load_settings(os.getcwd())
                if settings.python is None and not settings.worker:
                    # The tuner's own Python: the function it tunes imports there (a project's .venv
                    # or VIRTUAL_ENV may be another environment); a configured one still wins.
                    settings = dataclasses.replace(settings, python=sys.executable, python_source="the tuner's Python")
                self.parts = Ready(settings, cache_for(settings), runner_for(settings, "tuner"))
                atexit.register(self.stop)
            return self.parts

    def stop(self) -> None:
        with self.lock:
            if self.parts is not None:
                self.parts.workers.stop()
                self.parts = None


ENGINE = Engine()


def fits(
    fn: Callable[..., object], *args: object, target: str = "v6e", compile: bool = True, **kwargs: object
) -> Verdict:
    """Whether `fn(*args, **kwargs)` fits in VMEM on `target` (a GPU's: in its shared memory):
    with `compile`, the target's compiler's verdict (None, with the reason in `error`, when
    there is no compiler for it here); without, the family's model's on a trace (no compile),
    None ("undecided") where the model cannot be sure that it fits."""
    from .config import parse_targets
    from .families import family_of
    from .sweep.decide import Config, compiled_verdict

    (target,) = parse_targets(target)
    engine = ENGINE.ready()
    request = fits_request(example_for(fn, args, kwargs), target, engine.settings, compile)
    # A trace is cheaper than the disk cache's read and write: only compiles are kept.
    result = engine.cache.get(request) if compile else None
    if result is None:
        result = engine.workers.check(request, engine.settings.limits())
        if compile:
            engine.cache.put(request, result)
    if compile:
        family = family_of(target)
        parts = tuple((p.label, p.bytes) for call in result.calls for p in family.model_budget(call, target).parts)
        v = compiled_verdict(Config(0, {}, target, result), result, family)
        return Verdict(v.fits, v.used, v.limit, parts, v.decided_by, target, v.error)
    return model_verdict(result, target)


def fits_request(example: Example, target: str, settings: Settings, compile: bool) -> CheckRequest:
    """The worker request fits() sends. A trace only reads block shapes: it
    asks for no origins (the lines that made each spec, which only check and
    the editor show), and the worker's trace skips the hooks that find them."""
    from .engine import request_for

    return dataclasses.replace(request_for(example, target, settings), compile=compile, origins=compile)


def model_verdict(result: ExampleResult, target: str) -> Verdict:
    """The target's family's model's verdict on a trace-only result (the layout model on a TPU chip)."""
    from .families import family_of
    from .sweep.decide import tightest

    if result.error or not result.calls:
        return Verdict(None, None, None, (), "error", target, result.error or "the call reaches no pallas_call")
    family = family_of(target)
    found = [family.model_budget(c, target) for c in result.calls]
    parts = tuple((p.label, p.bytes) for b in found for p in b.parts)
    worst = tightest(found)
    fits = worst.total <= worst.limit
    # Under the limit by a figure the model is not sure of (a GPU kernel's op it has no rule for):
    # undecided, never a fit that was not checked.
    doubt = next((d for c in result.calls if (d := family.model_doubt(c, target))), None) if fits else None
    if doubt is not None:
        return Verdict(None, worst.total, worst.limit, parts, "undecided", target, doubt)
    return Verdict(fits, worst.total, worst.limit, parts, "model", target)


@dataclass(frozen=True)
class ListedConfigs:
    """Configs given as a list of keyword dicts (an autotuner's), in the shape a sweep has."""

    example: Example
    listed: tuple[dict[str, object], ...]

    def configs(self) -> list[dict]:
        return [dict(c) for c in self.listed]

    def call_for(self, config: dict) -> str:
        extra = ", ".join(f"{k}={shape_text(v)}" for k, v in config.items())
        head = self.example.text[:-1]
        return f"{head}{', ' if extra and not head.endswith('(') else ''}{extra})"

    def example_for(self, config: dict) -> Example:
        return dataclasses.replace(self.example, text=self.call_for(config))


def prune(
    fn: Callable[..., object],
    args: Sequence[object],
    configs: Iterable[Mapping[str, object]],
    targets: str | Iterable[str] = ("v6e",),
    *,
    budget_compiles: int | None = None,
    top: int | None = None,
) -> list[dict[str, object]]:
    """The configs (dicts of keyword arguments) that fit on every target, decided
    as `vmem-lsp sweep` decides: the model where it is sure, compiles nearest the
    frontier, monotonicity where the compiles show it holds. A config left
    undecided by the budget is left out: never guessed to fit. `targets` as fits'
    `target` takes it ("v5e", "v5e,v6e") or as a sequence of chip names. With
    `top` (one target only), the `top` fastest of them by rank(), fastest first."""
    from .config import parse_targets

    chips = parse_targets(targets)  # a string as fits' `target` takes it, or a sequence of names
    if top is not None and len(chips) != 1:
        raise ValueError("prune(top=N) ranks by the compiler's cycles, which compare within one chip: give one target")
    given = [dict(c) for c in configs]
    if not given:
        return []
    if top is not None:
        return [r.config for r in rank(fn, args, given, chips[0], top=top, budget_compiles=budget_compiles)[:top]]
    return [d.config for d in decide(fn, args, given, chips, budget_compiles=budget_compiles) if d.fits]


def decide(
    fn: Callable[..., object],
    args: Sequence[object],
    configs: Iterable[Mapping[str, object]],
    targets: str | Iterable[str] = ("v6e",),
    *,
    budget_compiles: int | None = None,
) -> list[Decided]:
    """Each config with its verdict on every target, decided as prune() decides them (its
    `fits` is prune's keep), in the order given: for a tuner that reports what it skipped and why."""
    from .config import parse_targets

    chips = parse_targets(targets)  # a string as fits' `target` takes it, or a sequence of names
    given = [dict(c) for c in configs]
    if not given:
        return []
    outcome = sweep_listed(fn, args, given, chips, budget_compiles)
    found: list[list[Verdict]] = [[] for _ in given]
    for number, v in enumerate(outcome.verdicts):  # chip by chip, each over every config in order
        found[number % len(given)].append(Verdict(v.fits, v.used, v.limit, (), v.decided_by, v.target, v.error, v.why))
    return [Decided(c, tuple(vs)) for c, vs in zip(given, found)]


def rank(
    fn: Callable[..., object],
    args: Sequence[object],
    configs: Iterable[Mapping[str, object]],
    target: str = "v6e",
    *,
    top: int | None = 5,
    budget_compiles: int | None = None,
) -> list[Ranked]:
    """The configs that fit on `target`, fastest first by the compiler's own static
    cycle estimate, as `vmem-lsp sweep --rank speed` ranks them: a roofline screens,
    the best `top` (None: all) are estimated (each costs several compiles' time, in
    workers of their own), and those follow by roofline, each saying why it has
    no estimate; a kernel with a loop of run-time length has all estimated (the
    roofline does not see the loop). Integer NumPy arguments are sent by value:
    its loops' trips are counted from them. Cycles compare within one chip only."""
    from .config import parse_targets

    chips = parse_targets(target)
    if len(chips) != 1:
        raise ValueError(f"rank() compares cycles within one chip: give one target, not {target!r}")
    given = [dict(c) for c in configs]
    if not given:
        return []
    outcome = sweep_listed(fn, args, given, chips, budget_compiles, rank=True, rank_top=top)
    found = [
        Ranked(
            dict(v.config),
            v.estimated_cycles,
            v.speed_rank,
            v.roofline_seconds,
            v.no_estimate,
            v.estimate_caveat,
            v.estimate_loops,
        )
        for v in outcome.verdicts
        if v.fits is True
    ]
    inf = float("inf")
    return sorted(found, key=lambda r: (r.rank or inf, r.roofline_seconds if r.roofline_seconds is not None else inf))


def sweep_listed(
    fn: Callable[..., object],
    args: Sequence[object],
    given: list[dict],
    chips: tuple[str, ...],
    budget_compiles: int | None,
    rank: bool = False,
    rank_top: int | None = None,
) -> SweepOutcome:
    """prune's and rank's sweep of the listed configs on `chips`, on the API's worker pool."""
    from .sweep.run import run_sweep

    engine = ENGINE.ready()
    listed = ListedConfigs(example_for(fn, args, {}), tuple(given))
    settings = dataclasses.replace(engine.settings, targets=chips)
    return run_sweep(listed, settings, budget=budget_compiles, worker=engine.workers, rank=rank, rank_top=rank_top)
