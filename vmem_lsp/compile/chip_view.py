"""The target chip, seen from the example's Python.

Production kernels choose their blocks by asking jax which chip they run on
(`jax.devices()[0].device_kind` keys a tuning table; `jax.default_backend()`
picks a CPU fallback). The worker's own devices are CPUs, so such an example
would be traced down its CPU branch and a config that never runs on a TPU
would be checked. While a request imports and traces its example, jax's
public questions answer with the target's deviceless devices instead; the
rest of the time (and for any other backend asked by name) jax answers as
itself. `pltpu.get_tpu_info()` reads the default device, which tracing.py
already sets to the target.

Whether the example asked is recorded: a module that asked may have kept the
answer (a module constant, a functools.cache), so the worker imports it again
before tracing it for another chip, and only then (an example that never asks
is imported once for every chip).

Imports jax; only the worker process loads this module.
"""

from __future__ import annotations

import contextlib
import functools
import sys

import jax

from .provenance import is_user_file

# jax's public "which device am I on" functions, each answered for the target.
ASKED_BY_NAME = ("devices", "local_devices", "device_count", "local_device_count", "default_backend")

_ORIGINAL: dict = {}
_SEEN: list = [None]  # the target's devices while a request runs, else None
_ASKED: list[bool] = [False]  # some user code asked since the last `seen_as` began


def _asked_by_user() -> bool:
    """The question comes from the user's code (a kernel, its helpers, jax's shipped
    kernels), not from jax's own machinery: jnp.array of a constant during the trace
    asks jax.local_devices() for a device to put it on, and must get a real one (jax's
    splash attention failed with the compile-only device's client). Frames: this one,
    _target_for, the answer, its caller."""
    return is_user_file(sys._getframe(3).f_code.co_filename)


def _target_for(backend) -> tuple | None:
    """The target's devices for a question from user code about the default backend
    or the TPU one (recorded as asked), else None: another backend asked by name
    ("cpu"), or a question outside a request, gets jax's own answer."""
    if _SEEN[0] is None or not _asked_by_user():
        return None
    if backend is not None and not (isinstance(backend, str) and backend.lower() == "tpu"):
        return None
    _ASKED[0] = True
    return _SEEN[0]


def _answers():
    def devices(backend=None):
        found = _target_for(backend)
        return list(found) if found is not None else _ORIGINAL["devices"](backend)

    def local_devices(process_index=None, backend=None, host_id=None):
        found = _target_for(backend)
        return list(found) if found is not None else _ORIGINAL["local_devices"](process_index, backend, host_id)

    def device_count(backend=None):
        found = _target_for(backend)
        return len(found) if found is not None else _ORIGINAL["device_count"](backend)

    def local_device_count(backend=None):
        found = _target_for(backend)
        return len(found) if found is not None else _ORIGINAL["local_device_count"](backend)

    def default_backend():
        return "tpu" if _target_for(None) is not None else _ORIGINAL["default_backend"]()

    return {
        "devices": devices,
        "local_devices": local_devices,
        "device_count": device_count,
        "local_device_count": local_device_count,
        "default_backend": default_backend,
    }


def install() -> None:
    """Put the answers in place of jax's public functions, once, before user
    modules are imported (a module may bind `from jax import devices`).
    Outside a request they call jax's own."""
    if _ORIGINAL:
        return
    answers = _answers()
    for name in ASKED_BY_NAME:
        original = getattr(jax, name, None)
        if original is None:
            continue
        _ORIGINAL[name] = original
        setattr(jax, name, functools.wraps(original)(answers[name]))


@contextlib.contextmanager
def seen_as(devices):
    """While the block runs, the example's questions are answered by `devices`
    (the target's deviceless topology; None: jax answers as itself). Nests:
    the outer view comes back after."""
    before = _SEEN[0]
    _SEEN[0] = tuple(devices) if devices is not None else None
    try:
        yield
    finally:
        _SEEN[0] = before


def take_asked() -> bool:
    """Whether user code asked which device it runs on since the last call."""
    asked, _ASKED[0] = _ASKED[0], False
    return asked
