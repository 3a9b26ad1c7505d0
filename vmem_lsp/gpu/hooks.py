"""Where a Mosaic GPU kernel's shared memory comes from, for the worker: jax's Mosaic GPU
BlockSpec and memory-ref classes (dataclasses with their own __init__, which the core's
stamp of pallas' classes does not reach) remember the user line that made them, and each
buffer plgpu.emit_pipeline allocates inside jax (its run_scoped of (steps, *block) per
BlockSpec in shared memory) is said to be its BlockSpec's. Installed once per worker,
before user modules import (WorkerSide.install).

Imports jax; only the worker process loads this module.
"""

from __future__ import annotations

import functools
import importlib

import jax

from ..compile import provenance
from .targets import RUNTIME_VERSION


def _module(name: str):
    try:
        return importlib.import_module(name)
    except Exception:  # a jax without Mosaic GPU, or its deps missing: Triton kernels still check
        return None


# The GPU target of the request being traced (worker.prepare): what the example's questions
# about the CUDA runtime answer as.
TARGET: list[str | None] = [None]


def answer_runtime_version() -> None:
    """jax's cuda_runtime_get_version() asked with no CUDA runtime on the machine (attention_mgpu
    asks it before it builds its kernel) answers the version the target's config names, as
    jax.devices() answers the target's device, instead of raising."""
    versions = getattr(_module("jax._src.lib"), "cuda_versions", None)  # the plugin's, where it is installed
    original = getattr(versions, "cuda_runtime_get_version", None)
    if original is None or original in provenance.HOOKS:
        return

    @functools.wraps(original)
    def cuda_runtime_get_version():
        try:
            return original()
        except Exception:  # no CUDA runtime here: the target's
            if TARGET[0] is None:
                raise
            major, minor = RUNTIME_VERSION
            return major * 1000 + minor * 10

    provenance.HOOKS.add(cuda_runtime_get_version)
    try:
        setattr(versions, "cuda_runtime_get_version", cuda_runtime_get_version)  # noqa: B010 (a module's function)
    except (AttributeError, TypeError):  # a module that takes no new attributes: it raises as before
        pass


def install() -> None:
    answer_runtime_version()
    core = _module("jax._src.pallas.mosaic_gpu.core")
    pipeline = _module("jax._src.pallas.mosaic_gpu.pipeline")
    if core is None or pipeline is None:
        return
    for name in ("BlockSpec", "GPUMemoryRef"):
        if isinstance(getattr(core, name, None), type):
            provenance.stamp(getattr(core, name))
    for name in ("emit_pipeline", "emit_pipeline_warp_specialized"):
        _name_buffers(pipeline, name)


def _name_buffers(pipeline, name: str) -> None:
    """The pipeline `name` makes gives each buffer it allocates its BlockSpec's line."""
    original = getattr(pipeline, name, None)
    if original is None or original in provenance.HOOKS:
        return
    in_smem = getattr(pipeline, "_in_smem", lambda spec: True)

    @functools.wraps(original)
    def emit(body, *args, in_specs=(), out_specs=(), **kwargs):
        run = original(body, *args, in_specs=in_specs, out_specs=out_specs, **kwargs)
        specs = [spec for spec in jax.tree_util.tree_leaves((in_specs, out_specs)) if in_smem(spec)]
        origins = [getattr(spec, provenance.ORIGIN_ATTR, None) for spec in specs]

        @functools.wraps(run)
        def pipeline_run(*refs, **kw_refs):
            with provenance.pending_windows(origins):
                return run(*refs, **kw_refs)

        return pipeline_run

    provenance.HOOKS.add(emit)
    setattr(pipeline, name, emit)
    public = _module("jax.experimental.pallas.mosaic_gpu")  # plgpu: what kernels call
    if public is not None and getattr(public, name, None) is original:
        setattr(public, name, emit)
