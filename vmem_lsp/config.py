"""Settings: defaults, then `[tool.vmem-lsp]` in the nearest pyproject.toml,
then the command line (or, later, the editor)."""
from __future__ import annotations

import functools
import os
import tomllib
from dataclasses import dataclass, field, replace

from .chips import DEFAULT_TARGETS, chip


@dataclass(frozen=True)
class Settings:
    targets: tuple[str, ...] = DEFAULT_TARGETS     # chips to check against
    examples: tuple[str, ...] = ()                 # "package.module:function(f32[8, 128])"
    timeout: float = 300.0                         # seconds per example and target
    worker: str | None = None                      # worker command; None: a local subprocess
    worker_fallback: bool = False                  # when that worker dies, compile with a local one
    jobs: int | None = None                        # workers at once; None: cores minus one
    cache_dir: str | None = None                   # None: <project root>/.vmem_lsp_cache
    exclude: tuple[str, ...] = (".venv", "venv", ".git", "__pycache__", "node_modules", "build", "dist")
    compile: bool = True                           # False: the layout model's verdict alone (no libtpu)
    root: str = field(default_factory=os.getcwd)   # the folder of the pyproject.toml, or cwd
    config_path: str | None = None

    def cache_folder(self) -> str:
        return self.cache_dir or os.path.join(self.root, ".vmem_lsp_cache")


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
    """Settings with the keys of one [tool.vmem-lsp]-shaped table applied."""
    known = {"targets", "examples", "timeout", "worker", "worker-fallback", "jobs", "cache-dir", "exclude"}
    unknown = set(table) - known
    if unknown:
        raise ConfigError(f"{where}: unknown [tool.vmem-lsp] keys: {', '.join(sorted(unknown))}")
    changes = {}
    if "targets" in table:
        changes["targets"] = parse_targets(table["targets"])
    if "examples" in table:
        changes["examples"] = tuple(table["examples"])
    if "timeout" in table:
        changes["timeout"] = float(table["timeout"])
    if "worker" in table:
        changes["worker"] = table["worker"] or None
    if "worker-fallback" in table:
        changes["worker_fallback"] = bool(table["worker-fallback"])
    if "jobs" in table:
        changes["jobs"] = max(1, int(table["jobs"]))
    if "cache-dir" in table:
        changes["cache_dir"] = os.path.join(settings.root, table["cache-dir"])
    if "exclude" in table:
        changes["exclude"] = tuple(table["exclude"])
    return replace(settings, **changes)


def parse_targets(value) -> tuple[str, ...]:
    names = value.split(",") if isinstance(value, str) else list(value)
    try:
        return tuple(chip(n).name for n in names if n.strip())
    except ValueError as error:
        raise ConfigError(str(error)) from None
