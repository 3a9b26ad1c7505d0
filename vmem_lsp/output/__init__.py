"""Renderings of a check's diagnostics: text for people, JSON and SARIF for tools."""

from .formats import FORMATS, render

__all__ = ["FORMATS", "render"]
