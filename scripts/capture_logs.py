"""Record how a TPU job's log carries a compiler report, for `vmem-lsp explain`'s tests.

Usage: python scripts/capture_logs.py [--out OUTDIR] [CASE ...]

A job does not print the compiler's text bare (scripts/capture_reports.py keeps that): the
exception reaches the log behind its qualified name (jax.errors.JaxRuntimeError on jax 0.8.3 to
0.12; older jax said jaxlib.xla_extension.XlaRuntimeError), inside a traceback, behind a
logger's prefix, closed by its CompilationResultProto tail and maybe jax's note. Each case of
capture_reports.py named here is compiled deviceless, the exception let propagate, and written
as each FORM shows it to OUTDIR/CASE.FORM.log: four `#` header lines (target, versions, kernel,
how the log was made), then the log. OUTDIR is by default tests/data/logs/<libtpu version>.
Run it with the Python of each tested jax, as capture_reports.py.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import sys
import traceback
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import capture_reports as reports  # scripts/ is the path of a script run as a file
import jax
from absl import logging as absl_logging
from jax._src import traceback_util
from jax.sharding import SingleDeviceSharding

LOGS = Path(__file__).resolve().parent.parent / "tests" / "data" / "logs"
# One case of each report form that carries figures.
CASES = ("physical-breakdown-v6e", "matmul-breakdown-v5p", "scoped-e1001-v6e", "single-allocation-v5e")


def compile_case(case: reports.Case) -> None:
    """Compile the case ahead of time as a deviceless job does; the compiler's error propagates."""
    dev = reports.device(case.target)
    args = [jax.ShapeDtypeStruct(shape, dtype, sharding=SingleDeviceSharding(dev)) for shape, dtype in case.args]
    with jax.default_device(dev):
        jax.jit(case.make()).lower(*args).compile()


def raised(run: Callable[[], object]) -> Exception:
    """The exception `run` raises, its traceback kept (a case that compiles is a wrong case)."""
    try:
        run()
    except Exception as error:
        return error
    raise SystemExit("the case compiled: it has no report to log")


def through_jit(case: reports.Case) -> Callable[[], None]:
    """The compile behind jax's API boundary, as a jitted call reaches the compiler: jax drops
    its own frames and adds its note after the report (no TPU here to call the function on)."""
    return traceback_util.api_boundary(lambda: compile_case(case))


async def in_task_group(run: Callable[[], None]) -> None:
    """`run` as a task of an asyncio.TaskGroup: its failure comes out in an ExceptionGroup,
    which Python prints with every line of the task's traceback indented behind `| `."""
    async with asyncio.TaskGroup() as group:
        group.create_task(asyncio.to_thread(run))


def printed(error: BaseException) -> str:
    """What Python prints for an uncaught exception (its default hook formats it so)."""
    return "".join(traceback.format_exception(error))


def logged(error: Exception, formatter: logging.Formatter, how: str) -> str:
    """A job's records around the failure, through `formatter`: `how` is exception (the record
    and the traceback), message (the report in the record's message) or lines (each line of the
    traceback a record of its own, as a supervisor relays a worker's stderr)."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    log = logging.getLogger("train")
    log.handlers[:], log.propagate = [handler], False
    log.setLevel(logging.INFO)
    log.info("step 0: compiling the train step")
    if how == "exception":
        log.error("compile failed", exc_info=error)
    elif how == "message":
        log.error("compile failed: %s", error)
    else:
        for line in printed(error).splitlines():
            log.error("%s", line)
    log.info("shutting down")
    return out.getvalue()


def raise_each_way(case: reports.Case) -> dict[str, Exception]:
    """The case's compile error as a job meets it: ahead of time, from a jitted call, from a task."""
    return {
        "aot": raised(lambda: compile_case(case)),
        "jit": raised(through_jit(case)),
        "group": raised(lambda: asyncio.run(in_task_group(through_jit(case)))),
    }


STANDARD = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
ABSL = absl_logging.PythonFormatter()
# FORM: (how the log was made, which way the error was raised, the log's text from the error)
FORMS: dict[str, tuple[str, str, Callable[[Exception], str]]] = {
    "uncaught": ("Python's traceback of the uncaught exception of .lower().compile()", "aot", printed),
    "jit": ("Python's traceback of the uncaught exception of a jitted call", "jit", printed),
    "task-group": ("Python's traceback of an asyncio.TaskGroup whose task made the jitted call", "group", printed),
    "logging": ("logging.exception, format '%(asctime)s %(levelname)s %(name)s: %(message)s'", "jit", lambda e: logged(e, STANDARD, "exception")),
    "logging-message": ("log.error('compile failed: %s', error), the same format", "jit", lambda e: logged(e, STANDARD, "message")),
    "absl": ("absl's formatter, log.error(..., exc_info=error)", "jit", lambda e: logged(e, ABSL, "exception")),
    "absl-lines": ("absl's formatter, each line of the traceback a record", "jit", lambda e: logged(e, ABSL, "lines")),
}  # fmt: skip


def header(case: reports.Case, form: str) -> str:
    return f"{reports.header(case)}# log: {FORMS[form][0]}\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=LOGS / version("libtpu"), help="default: %(default)s")
    parser.add_argument("cases", nargs="*", metavar="CASE", help=f"default: {' '.join(CASES)}")
    args = parser.parse_args(argv)
    known = {case.name: case for case in reports.CASES}
    unknown = set(args.cases) - set(known)
    if unknown:
        print(f"unknown cases: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.cases or CASES:
        case = known[name]
        errors = raise_each_way(case)
        for form, (_, way, write) in FORMS.items():
            (args.out / f"{name}.{form}.log").write_text(header(case, form) + write(errors[way]))
        print(f"{name}: {type(errors['aot']).__module__}.{type(errors['aot']).__qualname__}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
