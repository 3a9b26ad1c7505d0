"""The settings, wherever they are written, in agreement: the [tool.vmem-lsp] keys that
vmem_lsp/config.py reads against docs/configuration.md's key table and its example table; the
server's options (vmem_lsp/server/options.py) against the VS Code extension's settings
(src/settings.ts SERVER_KEYS, package.json's vmemLsp.* contribution) and docs/configuration.md's
option table. Fast: reads files, starts nothing."""

import dataclasses
import json
import pathlib
import re
import tomllib

import pytest

from vmem_lsp.config import ConfigError, Settings, apply
from vmem_lsp.server.options import CAMEL, SECTION, Options

ROOT = pathlib.Path(__file__).resolve().parent.parent
VSCODE = ROOT / "editors" / "vscode"
CONFIGURATION = ROOT / "docs" / "configuration.md"

# Settings fields that are no [tool.vmem-lsp] key, and why.
NOT_IN_PYPROJECT = {
    "scoped_vmem_limit_source": "where scoped-vmem-limit was set, for messages",
    "worker_source": "where worker was set, for the stderr notice and doctor",
    "python_source": "where python was set (or how it was found), for messages and doctor",
    "compile": "--no-compile only: a project cannot turn the compiler off for everyone",
    "root": "the folder of the pyproject.toml itself",
    "config_path": "the pyproject.toml itself",
}

# Options the server reads that are no VS Code setting, and why.
SERVER_ONLY = {
    "trustedFolders": "read from the initialization options only, never from workspace settings, which "
    "a folder can write itself (.vscode/settings.json); the extension passes it from "
    "VS Code's workspace trust (extension.ts trustedFolders())",
}
# VS Code settings the server never reads, and why.
CLIENT_ONLY = {
    "interpreter": "the Python the extension starts the server with; changing it restarts the server",
    "importStrategy": "whether the extension runs the environment's vmem_lsp or the one it bundles; changing it restarts the server",
    "trace.server": "vscode-languageclient's trace of the LSP messages, to an output channel",
}


def ts_array(name: str) -> list[str]:
    """The string array `export const NAME = [...]` of settings.ts."""
    text = (VSCODE / "src" / "settings.ts").read_text()
    body = re.search(rf"export const {name} = \[(.*?)\]", text, re.DOTALL)
    assert body, f"settings.ts has no {name}"
    return re.findall(r'"([^"]+)"', body.group(1))


def contributed() -> dict:
    """package.json's vmemLsp.* settings, by key without the section."""
    properties = json.loads((VSCODE / "package.json").read_text())["contributes"]["configuration"]["properties"]
    assert all(key.startswith(SECTION + ".") for key in properties)
    return {key[len(SECTION) + 1 :]: schema for key, schema in properties.items()}


def table_names(header: str) -> list[str]:
    """The first column of configuration.md's "| HEADER | default | meaning |" table, `a` / `b` split."""
    text = CONFIGURATION.read_text()
    table = re.search(rf"^\| {header} \| default \| meaning \|\n\| --- .*?\n((?:\|.*\n)+)", text, re.MULTILINE)
    assert table, f"docs/configuration.md has no '| {header} | default | meaning |' table"
    return [name for row in table.group(1).splitlines() for name in re.findall(r"`([^`]+)`", row.split("|")[1])]


def documented_example() -> dict:
    """The [tool.vmem-lsp] table of configuration.md's first TOML block."""
    block = re.search(r"^```toml\n(.*?)^```", CONFIGURATION.read_text(), re.MULTILINE | re.DOTALL)
    assert block, "docs/configuration.md has no TOML block"
    return tomllib.loads(block.group(1))["tool"]["vmem-lsp"]


def pyproject_keys() -> set[str]:
    return {f.name.replace("_", "-") for f in dataclasses.fields(Settings) if f.name not in NOT_IN_PYPROJECT}


def test_exceptions_are_real():
    assert set(SERVER_ONLY) <= set(CAMEL.values())
    assert set(CLIENT_ONLY) <= set(contributed())


def test_settings_ts_sends_every_server_option():
    keys = ts_array("SERVER_KEYS")
    assert len(keys) == len(set(keys))
    assert sorted(keys) == sorted(set(CAMEL.values()) - set(SERVER_ONLY))


def test_package_json_contributes_every_server_option():
    assert sorted(set(contributed()) - set(CLIENT_ONLY)) == sorted(ts_array("SERVER_KEYS"))


def test_restart_keys_are_client_settings():
    assert set(ts_array("RESTART_KEYS")) <= set(CLIENT_ONLY)


def test_package_json_defaults_are_the_servers():
    """A VS Code default of null stands for the server's None: pyproject.toml, else its own default."""
    defaults = {CAMEL[f.name]: f.default for f in dataclasses.fields(Options)}
    for key, schema in contributed().items():
        if key not in CLIENT_ONLY:
            assert schema["default"] == defaults[key], key


def test_configuration_lists_every_option():
    names = table_names("option")
    assert len(names) == len(set(names))
    assert sorted(names) == sorted(CAMEL.values())


def test_pyproject_keys_are_the_ones_config_reads():
    """Each Settings field not excused above is a key apply() knows (an unknown key is refused by
    name, before any value is read): a new field that pyproject.toml cannot set fails here."""
    for key in pyproject_keys():
        with pytest.raises(ConfigError) as refused:
            apply(Settings(), {key: object(), "no-such-key": 1}, "pyproject.toml")
        assert "no-such-key" in str(refused.value) and key not in str(refused.value), key


def test_configuration_lists_every_pyproject_key():
    names = table_names("key")
    assert len(names) == len(set(names))
    assert sorted(names) == sorted(pyproject_keys())


def test_configuration_example_holds_every_key_and_is_accepted():
    example = documented_example()
    assert sorted(example) == sorted(table_names("key"))
    settings = apply(Settings(), example, "pyproject.toml")
    assert settings.targets == tuple(example["targets"]) and settings.worker == example["worker"]


def test_every_pyproject_key_sets_a_settings_field():
    """config.KEYS is the one list of [tool.vmem-lsp] keys: each sets the Settings field of its name."""
    from vmem_lsp.config import KEYS, Settings, apply, field_of

    names = {f.name for f in dataclasses.fields(Settings)}
    assert {field_of(key) for key in KEYS} <= names
    assert apply(Settings(), {"trace-timeout": 5, "worker": "ssh tpu"}, "/p/pyproject.toml") == Settings(
        trace_timeout=5.0, worker="ssh tpu", worker_source="pyproject.toml", root=Settings().root
    )
