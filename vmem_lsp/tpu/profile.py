"""The compiler's cycle estimate, inside a worker started with `--estimate`:
libtpu reads its flags once, when it starts, so such a worker turns the
static profile on for every compile it makes (`enable`, before jax loads),
in a folder of its own that it empties before each compile and reads after
(`estimate_of`). The profile can abort libtpu (an LLO_CHECK): only workers
that were asked for estimates run with it, and a crash costs that worker,
never a verdict (the sweep keeps the fit from an ordinary compile).
"""

from __future__ import annotations

import atexit
import os
import resource
import shutil
import tempfile

from .static_profile import PROFILE_FLAG, PROFILE_SUFFIX, ProfileError, parse_static_profile

SPEED_FOLDER = "VMEM_LSP_SPEED_DIR"  # set in a worker whose compiles leave a static profile


def enable() -> str:
    """Turn the static profile on for this process's libtpu (before it
    starts), into a folder removed at exit; returns the folder. Where libtpu
    aborts (v4: "Dma latency model is currently only supported on VF/VL/GF/GL"),
    it leaves no core file behind."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    folder = tempfile.mkdtemp(prefix="vmem-lsp-speed-")
    atexit.register(shutil.rmtree, folder, True)
    flags = os.environ.get("LIBTPU_INIT_ARGS", "")
    os.environ["LIBTPU_INIT_ARGS"] = f"{flags} {PROFILE_FLAG}={folder}".strip()
    os.environ[SPEED_FOLDER] = folder
    return folder


def enabled() -> bool:
    return bool(os.environ.get(SPEED_FOLDER))


def forget() -> None:
    """Before a compile: no profile of an earlier one may be read as this one's."""
    folder = os.environ.get(SPEED_FOLDER)
    if folder and os.path.isdir(folder):
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))


STEPS_FILE = "grid-steps"  # beside the profile: the grid steps of the compile it is of


def note_steps(steps: int) -> None:
    """Before a compile (after `forget`): the grid steps it compiles, for whoever reads the
    profile a compile that libtpu aborted left (a cut grid's, where the kernel's grid is long)."""
    folder = os.environ.get(SPEED_FOLDER)
    if folder and os.path.isdir(folder):
        with open(os.path.join(folder, STEPS_FILE), "w", encoding="utf-8") as f:
            f.write(str(steps))


def steps_in(folder: str) -> int | None:
    """The grid steps `note_steps` wrote in `folder`; None when there is no such note."""
    try:
        with open(os.path.join(folder, STEPS_FILE), encoding="utf-8") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def estimate_of() -> tuple[int | None, str | None]:
    """After a compile: (cycles, None), or (None, why there is no estimate).
    The compile is of one pallas_call: every op the profile lists is its own."""
    folder = os.environ.get(SPEED_FOLDER)
    if not folder:
        return None, "not asked"
    return estimate_in(folder)


def estimate_in(folder: str) -> tuple[int | None, str | None]:
    """The estimate the profile in `folder` gives: this worker's last compile's, or (read by
    the client) the one a worker that libtpu aborted wrote before it died."""
    names = sorted(n for n in os.listdir(folder) if n.endswith(PROFILE_SUFFIX)) if os.path.isdir(folder) else []
    if not names:
        return None, "the compiler wrote no estimate for this kernel on this chip"
    cycles = 0
    for name in names:
        with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
            try:
                ops = parse_static_profile(f.read())
            except ProfileError as error:
                return None, f"the compiler's estimate could not be read: {error}"
        if zero := next((op for op in ops if op.cycles == 0), None):
            return None, zero_cycles(zero)
        cycles += sum(op.cycles for op in ops)
    return cycles, None


def zero_cycles(op) -> str:
    """Why an op the compiler estimated at 0 cycles has no estimate: a kernel that
    does work is never free; its model does not cover it (never ranked fastest)."""
    how = f" ({op.dma})" if op.dma else ""
    return f"the compiler estimated 0 cycles for {op.hlo_op}{how}: its model does not cover this kernel"
