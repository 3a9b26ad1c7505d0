"""The registry: which family each target name belongs to (family.py says what a family is).

The one module of the core that imports the families' packages. TPU comes first (its chips
are the default targets), then NVIDIA GPUs; a family outside the package (a test's, a
plugin's) is registered with `register`, or named in VMEM_LSP_FAMILIES as "module:attribute"
so that every process vmem-lsp starts (the worker, the server) registers it too.
"""

from __future__ import annotations

import importlib
import os

from .family import Family

FAMILIES_VARIABLE = "VMEM_LSP_FAMILIES"  # "pkg.module:FAMILY,..." registered in every process

_registered: list[Family] = []
_loaded = False


def _load() -> None:
    """The package's families, then those VMEM_LSP_FAMILIES names, once per process."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    from .gpu.family import GPU
    from .tpu.family import TPU

    for family in (TPU, GPU):
        register(family)
    for entry in filter(None, (part.strip() for part in os.environ.get(FAMILIES_VARIABLE, "").split(","))):
        module, _, attribute = entry.partition(":")
        register(getattr(importlib.import_module(module), attribute or "FAMILY"))


def register(family: Family) -> Family:
    """Add a family (again: replaced); its target names must be new."""
    _load()
    others = [f for f in _registered if f.name != family.name]
    taken = {t for f in others for t in f.targets()} & set(family.targets())
    if taken:
        raise ValueError(f"family {family.name!r}: targets {', '.join(sorted(taken))} belong to another family")
    _registered[:] = [*others, family]
    return family


def unregister(name: str) -> None:
    _load()
    _registered[:] = [f for f in _registered if f.name != name]


def families() -> tuple[Family, ...]:
    """Every registered family, in registration order."""
    _load()
    return tuple(_registered)


def all_targets() -> tuple[str, ...]:
    return tuple(t for f in families() for t in f.targets())


def default_targets() -> tuple[str, ...]:
    """The first family's defaults: the targets checked when none is named."""
    return next((f.default_targets for f in families() if f.default_targets), ())


def target_name(text: str) -> str:
    """The target's canonical name ("v7x" for "tpu7x", "h100" for "H100"); ValueError naming the choices."""
    for family in families():
        if (name := family.canonical(text)) is not None:
            return name
    raise ValueError(f"unknown target {text!r}: choose from {', '.join(all_targets())}")


def family_of(target: str) -> Family:
    """The family a target belongs to (by any name it is known by); ValueError for an unknown one."""
    for family in families():
        if family.canonical(target) is not None:
            return family
    raise ValueError(f"unknown target {target!r}: choose from {', '.join(all_targets())}")


def target_label(target: str) -> str:
    """ "TPU v5e", "NVIDIA A100-SXM4-80GB": as messages name the target."""
    return family_of(target).label(target)


def family_named(name: str) -> Family | None:
    return next((f for f in families() if f.name == name), None)
