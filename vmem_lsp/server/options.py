"""The server's options: one typed object, from the editor's
initializationOptions / settings (section "vmemLsp"), over the workspace's
[tool.vmem-lsp] table, over the defaults."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from ..budget import HEADROOM_WARNING
from ..config import ConfigError, Settings, load_settings, parse_backend, parse_scoped_limits, parse_targets

SECTION = "vmemLsp"


@dataclass(frozen=True)
class Options:
    """What an editor can set. None means: take it from pyproject.toml, else the default."""

    targets: tuple[str, ...] | None = None  # chips to check against, e.g. ("v5e", "v6e")
    worker: str | None = None  # worker command, e.g. "ssh tpu-vm vmem-lsp worker"
    # The local worker's interpreter (the project's, as the editor's Python support selected
    # it): a path or a venv folder, made absolute against the workspace folder by options_from.
    python: str | None = None
    backend: str | None = None  # "local" or "ray": where compiles run
    ray_address: str | None = None  # the Ray cluster for backend "ray"
    timeout: float | None = None  # seconds to lower and compile one kernel
    trace_timeout: float | None = None  # seconds for the example's Python (import and run)
    scoped_vmem_limit: tuple | None = None  # ((chip, bytes), ...): the compiler's scoped VMEM limit
    headroom_warning: float = HEADROOM_WARNING  # warn when a kernel fits with less than this share free
    inlay_hints: bool = True  # bytes after each BlockSpec, totals on pallas_call lines
    code_lens: bool = True  # the same as code lenses, for clients without inlay hints
    compile_on_open: bool = True
    compile_on_save: bool = True
    debounce_ms: int = 300  # quiet time after typing before the estimate
    cache: bool = True  # use the on-disk compile cache
    faster_fixes: bool | None = None  # verified fixes fastest first by the compiler's cycle estimate
    # Folders whose code may run, from the client's user-level settings: read
    # from the initialization options only, never from workspace/configuration,
    # which may come from the folder itself (.vscode/settings.json).
    trusted_folders: tuple[str, ...] = ()

    def settings(self, path: str) -> Settings:
        """The check settings for a file: its pyproject.toml, overridden by these options."""
        try:
            settings = load_settings(path)
        except (ConfigError, OSError, ValueError):
            settings = Settings()
        changes: dict[str, Any] = {  # Settings fields by name: each its own type
            k: v
            for k, v in (
                ("targets", self.targets),
                ("worker", self.worker),
                ("timeout", self.timeout),
                ("trace_timeout", self.trace_timeout),
                ("backend", self.backend),
                ("ray_address", self.ray_address),
                ("faster_fixes", self.faster_fixes),
            )
            if v is not None
        }
        if self.python is not None:
            changes.update(python=self.python, python_source="the editor's python setting")
        if self.scoped_vmem_limit is not None:
            changes.update(scoped_vmem_limit=self.scoped_vmem_limit, scoped_vmem_limit_source="the editor's settings")
        return dataclasses.replace(settings, **changes)


CAMEL = {
    f.name: "".join(w.capitalize() if i else w for i, w in enumerate(f.name.split("_")))
    for f in dataclasses.fields(Options)
}


USER_LEVEL_ONLY = ("trusted_folders",)


def options_from(
    raw, base: Options = Options(), initialization: bool = False, folder: str | None = None
) -> tuple[Options, list[str]]:
    """Options updated from an editor's JSON (camelCase keys, optionally under
    "vmemLsp"); returns the options and what was wrong with the input. Only
    the initialization options may name trusted folders; elsewhere the key
    keeps `base`'s value. A relative `python` is the workspace `folder`'s, as
    an editor's settings are (not the project root's, as pyproject's is)."""
    if not isinstance(raw, dict):
        return base, []
    raw = raw.get(SECTION, raw) if isinstance(raw.get(SECTION), dict) else raw
    changes, problems = {}, []
    for name, key in CAMEL.items():
        if key not in raw or raw[key] is None:
            continue
        if name in USER_LEVEL_ONLY and not initialization:
            problems.append(
                f"setting {key} is read only from the initialization options (user-level), "
                f"not from workspace settings: ignored here"
            )
            continue
        try:
            changes[name] = _coerce(name, raw[key])
            if name == "python" and changes[name] is not None:
                changes[name] = os.path.join(folder or os.getcwd(), os.path.expanduser(changes[name]))
        except (ValueError, TypeError, ConfigError) as error:
            problems.append(f"setting {key}: {error}")
    return dataclasses.replace(base, **changes), problems


def _coerce(name: str, value):
    if name == "targets":
        return parse_targets(value)
    if name in ("worker", "ray_address", "python"):
        return str(value) or None
    if name == "backend":
        return parse_backend(value)
    if name in ("timeout", "trace_timeout", "headroom_warning"):
        return float(value)
    if name == "scoped_vmem_limit":
        return parse_scoped_limits(value)
    if name == "debounce_ms":
        return int(value)
    if name == "trusted_folders":
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            raise TypeError(f"expected a list of folders, got {value!r}")
        return tuple(value)
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {value!r}")
    return value
