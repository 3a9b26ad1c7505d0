"""The installed versions of the packages that decide what the compiler says:
jax, jaxlib and libtpu (a new libtpu can word a report differently, or fit
what did not). Read from the packages' metadata, never by importing them:
`vmem-lsp --version` and the cache's key must not wait for jax to load."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

COMPILER_PACKAGES = ("jax", "jaxlib", "libtpu")


def installed(packages: tuple[str, ...] = COMPILER_PACKAGES) -> dict[str, str | None]:
    """{package: its version, or None when it is not installed}, in the order asked."""
    found: dict[str, str | None] = {}
    for package in packages:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found
