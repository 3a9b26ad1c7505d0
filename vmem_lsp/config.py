"""Settings: defaults, then `[tool.vmem-lsp]` in the nearest pyproject.toml,
then the command line (or, later, the editor)."""

from __future__ import annotations

import functools
import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .compile.shared_cache import is_url
from .families import default_targets, families, family_of, target_name
from .results import PhaseLimits
from .user_folders import user_cache_folder

CACHE_DIR_NAME = ".vmem_lsp_cache"  # the cache folder in a project's root; shipping never sends it


@dataclass(frozen=True)
class Settings:
    targets: tuple[str, ...] = field(default_factory=default_targets)  # TPU chips, GPUs: families.py
    examples: tuple[str, ...] = ()  # "package.module:function(f32[8, 128])"
    timeout: float = 300.0  # seconds to lower and compile one kernel
    trace_timeout: float = 60.0  # seconds for the user's Python: import, run the example
    scoped_vmem_limit: tuple[tuple[str, int], ...] = ()  # (chip, bytes): the compiler's scoped limit
    scoped_vmem_limit_source: str | None = None  # where that was set, for messages
    worker: str | None = None  # worker command; None: a local subprocess
    worker_source: str | None = None  # where it was set: "pyproject.toml", "--worker", ...
    python: str | None = None  # the local worker's interpreter (a path, or a venv folder); None: found
    python_source: str | None = None  # where it was set: "pyproject.toml", "--python", the editor
    worker_fallback: bool = False  # when that worker dies, compile with a local one
    backend: str = "local"  # "local": worker processes here; "ray": tasks on a Ray cluster
    ray_address: str | None = None  # the cluster for backend "ray"; None: RAY_ADDRESS, else a local one
    jobs: int | None = None  # workers at once; None: cores minus one, as memory allows
    worker_memory: int | None = None  # bytes each local worker may hold; None: measured peaks decide
    cache_dir: str | None = None  # None: <project root>/.vmem_lsp_cache; or s3://, gs://...
    exclude: tuple[str, ...] = (".venv", "venv", ".git", "__pycache__", "node_modules", "build", "dist")
    compile: bool = True  # False: the layout model's verdict alone (no libtpu)
    require_examples: bool = False  # a pallas_call no example reaches is an error, not a warning
    jax: tuple[str, ...] = ()  # jax versions to check with too, each in a managed environment
    faster_fixes: bool = False  # verified fixes fastest first by the compiler's cycle estimate (costs compiles)
    spills: bool = False  # GPU targets: each kernel's register spills, from ptxas -v (a ptxas run per kernel)
    root: str = field(default_factory=os.getcwd)  # the folder of the pyproject.toml, or cwd
    config_path: str | None = None

    def cache_folder(self) -> str:
        return self.cache_dir or os.path.join(self.root, CACHE_DIR_NAME)

    def limits(self) -> PhaseLimits:
        return PhaseLimits(trace=self.trace_timeout, compile=self.timeout)

    def scoped_limit_for(self, target: str) -> int | None:
        return dict(self.scoped_vmem_limit).get(target)


class ConfigError(ValueError):
    pass


def find_pyproject(start: str) -> str | None:
    """The nearest pyproject.toml at or above `start` that has [tool.vmem-lsp]."""
    directory = os.path.abspath(start if os.path.isdir(start) else os.path.dirname(start) or ".")
    while True:
        candidate = os.path.join(directory, "pyproject.toml")
        if os.path.isfile(candidate) and "vmem-lsp" in _tool_table_names(candidate):
            return candidate
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def _tool_table_names(path: str) -> set[str]:
    return set(_read_toml(path).get("tool", {}))


def _read_toml(path: str) -> dict:
    """The parsed file, read again only when it changes: the server asks for
    settings on every open and every analysis."""
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        return {}
    return _parsed(path, stamp)


@functools.lru_cache(maxsize=256)
def _parsed(path: str, stamp: int) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def load_settings(start: str) -> Settings:
    path = find_pyproject(start)
    if path is None:
        return Settings()
    table = _read_toml(path)["tool"]["vmem-lsp"]
    return apply(Settings(root=os.path.dirname(path), config_path=path), table, path)


def apply(settings: Settings, table: dict, where: str) -> Settings:
    """Settings with the keys of one [tool.vmem-lsp]-shaped table applied: each
    key sets its field (KEYS), and the field's X_source says `where`'s file name."""
    unknown = set(table) - set(KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown [tool.vmem-lsp] keys: {', '.join(sorted(unknown))}")
    changes: dict[str, Any] = {}
    for key, value in table.items():
        name = field_of(key)
        changes[name] = KEYS[key](value, settings.root)
        if f"{name}_source" in SOURCED:
            changes[f"{name}_source"] = os.path.basename(where)
    return replace(settings, **changes)


def field_of(key: str) -> str:
    """The Settings field a [tool.vmem-lsp] key sets: its name, dashes as underscores."""
    return key.replace("-", "_")


def sources(table_keys, path: str | None) -> dict[str, str]:
    """Where each Settings field came from, before the command line: "pyproject.toml:<path>"
    for a field whose [tool.vmem-lsp] key is in `table_keys` (a field named X_source
    goes with X; root and config_path with the file itself), else "default"."""
    keys = {field_of(key) for key in table_keys}
    found = {}
    for f in fields(Settings):
        name = f.name.removesuffix("_source")
        here = name in keys or (path is not None and f.name in ("root", "config_path"))
        found[f.name] = f"pyproject.toml:{path}" if here and path is not None else "default"
    return found


def cache_dir_change(cache_dir: str | None, no_cache: bool, base: str) -> str | None:
    """The cache folder the command line asks for: --cache-dir's; with --no-cache
    alone the user's cache folder, so that a run that reads and writes no results
    leaves nothing in the project either (the workers' measured peaks go there);
    else None, the settings' own."""
    if cache_dir:
        return cache_location(cache_dir, base)
    return user_cache_folder() if no_cache else None


def cache_location(value: str, base: str) -> str:
    """A URL as written (s3://bucket/prefix: a cache shared by CI shards and
    editors); a path relative to `base`, made absolute."""
    return value if is_url(value) else os.path.abspath(os.path.join(base, value))


BACKENDS = ("local", "ray")


def parse_backend(value) -> str:
    if value not in BACKENDS:
        raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, not {value!r}")
    return value


def parse_jax(value) -> tuple[str, ...]:
    """`jax = ["0.12.0.1"]` or `--jax 0.12.0.1,0.11.2`: release numbers, each once."""
    from .compile.environments import parse_versions

    try:
        return parse_versions(value)
    except ValueError as error:
        raise ConfigError(f"jax: {error}") from None


def parse_targets(value) -> tuple[str, ...]:
    names = value.split(",") if isinstance(value, str) else list(value)
    try:
        return tuple(target_name(n) for n in names if n.strip())
    except ValueError as error:
        raise ConfigError(str(error)) from None


SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(|b|k|kb|kib|m|mb|mib|g|gb|gib)\s*$", re.IGNORECASE)
UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gib": 1 << 30,
}


def parse_size(value) -> int:
    """Bytes from 67108864, "64MiB", "64M" or "65536KiB" (binary units, as the
    compiler prints them). The compiler takes the limit in whole KiB."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    else:
        found = SIZE.match(str(value))
        if not found:
            raise ConfigError(f'not a size: {value!r} (write e.g. "64MiB")')
        size = int(float(found[1]) * UNITS[found[2].lower()])
    if size <= 0 or size % 1024:
        raise ConfigError(f"a scoped VMEM limit must be a positive whole number of KiB, not {value!r}")
    return size


def parse_memory(value) -> int:
    """Bytes of a worker's memory share: "2GB", "1.5GiB", "512MB" or bytes."""
    found = SIZE.match(str(value)) if not isinstance(value, bool) else None
    if not found or float(found[1]) <= 0:
        raise ConfigError(f'worker-memory: not a size: {value!r} (write e.g. "2GB")')
    return int(float(found[1]) * UNITS[found[2].lower()])


def parse_scoped_limits(value) -> tuple[tuple[str, int], ...]:
    """{"v5e": "64MiB"} or "v5e=64MiB,v6e=96MiB" -> (("v5e", 67108864), ...)."""
    if isinstance(value, str):
        pairs = []
        for item in filter(None, (part.strip() for part in value.split(","))):
            name, equals, size = item.partition("=")
            if not equals:
                raise ConfigError(f"write the scoped VMEM limit as CHIP=SIZE, e.g. v5e=64MiB, not {item!r}")
            pairs.append((name, size))
    elif isinstance(value, dict):
        pairs = list(value.items())
    else:
        raise ConfigError(f'scoped-vmem-limit: expected a table such as {{ v5e = "64MiB" }}, not {value!r}')
    try:
        return tuple(sorted((scoped_target(name), parse_size(size)) for name, size in pairs))
    except ValueError as error:
        raise ConfigError(str(error)) from None


def scoped_target(name: str) -> str:
    """The target a scoped limit is set for: one whose family has a scoped limit (a TPU chip)."""
    found = target_name(name)
    if not family_of(found).scoped_limits:
        choices = ", ".join(t for f in families() if f.scoped_limits for t in f.targets())
        raise ValueError(f"{name!r} has no scoped VMEM limit: set it for a TPU chip ({choices})")
    return found


Reader = Callable[[Any, str], Any]  # (the table's value, the project root) -> the field's value


def _value(read: Callable[[Any], Any]) -> Reader:
    """A reader that needs the value alone, not the project root."""
    return lambda value, root: read(value)


# The [tool.vmem-lsp] keys and how each value is read; each sets the field `field_of` names.
KEYS: dict[str, Reader] = {
    "targets": _value(parse_targets),
    "examples": _value(tuple),
    "timeout": _value(float),
    "trace-timeout": _value(float),
    "scoped-vmem-limit": _value(parse_scoped_limits),
    "worker": _value(lambda value: value or None),
    "worker-fallback": _value(bool),
    "python": _value(lambda value: str(value) or None),  # relative: the project root's
    "jobs": _value(lambda value: max(1, int(value))),
    "worker-memory": _value(parse_memory),
    "cache-dir": cache_location,  # a relative path is the project root's
    "exclude": _value(tuple),
    "require-examples": _value(bool),
    "faster-fixes": _value(bool),
    "spills": _value(bool),
    "backend": _value(parse_backend),
    "ray-address": _value(lambda value: value or None),
    "jax": _value(parse_jax),
}
SOURCED = {f.name for f in fields(Settings) if f.name.endswith("_source")}  # where X was set, for X's messages
