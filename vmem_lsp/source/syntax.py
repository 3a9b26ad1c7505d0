"""ast.parse for the user's text, without its warnings (an invalid escape
sequence, `1if x else 2`...): they belong to the user's file, and printed by
the linter or the server they would read as ours."""

from __future__ import annotations

import ast
import warnings
from typing import Literal, overload


@overload
def parse_quietly(text: str, mode: Literal["exec"] = "exec") -> ast.Module: ...
@overload
def parse_quietly(text: str, mode: Literal["eval"]) -> ast.Expression: ...


def parse_quietly(text: str, mode: Literal["exec", "eval"] = "exec") -> ast.Module | ast.Expression:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(text, mode="eval") if mode == "eval" else ast.parse(text)
