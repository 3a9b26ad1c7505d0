"""Non-ASCII letters and their ASCII twins: a kernel module written with
either gives the same sites, edits and verdicts at the same code-point
positions, which the twin tests hold."""

from __future__ import annotations

# Identifier letters and their ASCII twins, one code point each; all NFKC
# stable (Python normalizes identifiers, `𝔘` would read as `U`). Two
# outside the BMP: 4 UTF-8 bytes, 2 UTF-16 units.
LETTERS = {
    "a": "ä",
    "o": "ö",
    "u": "ü",
    "s": "ß",
    "e": "é",
    "n": "ñ",
    "c": "ç",
    "l": "ł",
    "d": "đ",
    "h": "ħ",
    "w": "ω",
    "z": "ж",
    "y": "я",
    "k": "中",
    "q": "𐐀",
    "r": "𠀀",
    "O": "Ö",
    "A": "Ä",
    "U": "Ü",
    "B": "Ω",
    "L": "Ł",
    "K": "Ж",
    "C": "Ç",
}
# What strings and comments hold: non-ASCII and astral characters, a
# combining accent, tabs, and what str.splitlines breaks at.
TEXT_CHARS = "abc =(),:\tüßЖ中𝔘😀𠀀\u0301\x85\u2028\u2029\x0c\x0b\x1c"
TWIN = str.maketrans(
    {
        **{u: a for a, u in LETTERS.items()},
        **{c: "x" for c in TEXT_CHARS if not c.isascii() and c not in LETTERS.values()},
    }
)


def ascii_twin(text: str) -> str:
    return text.translate(TWIN)
