"""What `vmem-lsp doctor` and each family's part of it share: a line of its report (Check),
the tiny kernel a target compiles, why a tiny compile did not compile, and how to install
the compiler (doctor.py runs the checks; Family.doctor tries a family's targets)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import versions

if TYPE_CHECKING:
    from .results import ExampleResult

NO_COMPILE = "or check without a compiler: `vmem-lsp check --no-compile` (the layout model's estimates only)"

# The tiny kernel each chip compiles: written to a folder of its own, so a
# worker over SSH is sent this one file and nothing else.
KERNEL = '''"""vmem-lsp doctor: one tiny kernel, compiled once per chip."""
import jax
from jax.experimental import pallas as pl


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


# vmem: doctor_copy(f32[8, 128])
def doctor_copy(x):
    return pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
'''
EXAMPLE = "doctor_copy(f32[8, 128])"


@dataclass
class Check:
    section: str
    name: str
    status: str  # "ok" | "problem" | "info"
    message: str
    fix: str | None = None
    seconds: float | None = None


def install_command(python: str | None = None) -> str:
    return (
        f"{python + ' -m ' if python else ''}pip install 'jax[tpu]>={versions.OLDEST_JAX},<{versions.NEWEST_JAX_BELOW}'"
    )


def compile_error(result: ExampleResult) -> str | None:
    """Why the tiny kernel was not compiled, or None when it compiled and fits: a compile
    the compiler rejected (jax refusing its libtpu) is no compile."""
    if result.error:
        return result.error
    if not result.calls:
        return "traced, but no pallas_call was reached"
    for call in result.calls:
        if not call.compiled:
            return "traced, but not compiled"
        if not call.fits or call.compiler_text:
            return call.compiler_text or "the compiler rejected it"
    return None
