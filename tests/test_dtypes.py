"""The one dtype table (vmem_lsp/dtypes.py) against README's list and the dtypes themselves.
Fast: no jax, no compiler."""

import pathlib
import re

import ml_dtypes
import numpy as np

from vmem_lsp.dtypes import COMPILER_DTYPES, DIRECTIVE_DTYPES, ITEM_BITS, TABLE

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def readme_dtypes() -> tuple[list[str], list[str]]:
    """README's "Dtypes: `f32 bf16 ...` (and `i8 ...` for the signed ones, ...)." sentence:
    the words of its first quoted list, and those of the rest."""
    sentence = re.search(r"Dtypes: (.*?)\.\n", README.read_text(), re.DOTALL)
    assert sentence, "README has no 'Dtypes: ...' sentence"
    quoted = [group.split() for group in re.findall(r"`([^`]+)`", sentence.group(1))]
    return quoted[0], [word for group in quoted[1:] for word in group]


def test_readme_lists_every_directive_dtype():
    names, others = readme_dtypes()
    assert sorted(names) == sorted(d.name for d in TABLE)
    assert sorted(set(others) - set(names)) == sorted(alias for d in TABLE for alias in d.aliases)


def test_spellings_are_unique():
    spellings = [s for d in TABLE for s in (d.name, *d.aliases)]
    assert len(spellings) == len(set(spellings))
    assert len({d.jax for d in TABLE}) == len(TABLE)


def test_views_go_round():
    """A directive's dtype, as the worker names it, is one the layout model sizes."""
    for spelling, jax_name in DIRECTIVE_DTYPES.items():
        row = next(d for d in TABLE if d.jax == jax_name)
        if row.named_by_worker:
            assert ITEM_BITS[COMPILER_DTYPES[jax_name]] == row.bits, spelling


def test_bits_are_the_dtypes_own():
    for d in TABLE:
        dtype = np.dtype(getattr(ml_dtypes, d.jax, None) or d.jax)
        if d.jax == "bool":
            bits = dtype.itemsize * 8
        elif "int" in d.jax:
            bits = ml_dtypes.iinfo(dtype).bits
        else:
            bits = ml_dtypes.finfo(dtype).bits
        assert bits == d.bits, d.name
