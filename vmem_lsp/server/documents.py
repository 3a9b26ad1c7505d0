"""Keeping open documents in step with didChange. pygls applies an
incremental change by splitting the whole document into lines and writing
every line back, in Python: a cost that grows with the file, paid on every
keystroke, so on a long kernel file hovers queue behind a fast typist. Here
a change costs a search for its two line starts and one string splice."""

from __future__ import annotations

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from ..source.text import LINE_BREAK, line_start


def _line_at(text: str, start: int) -> str:
    match = LINE_BREAK.search(text, start)
    return text[start : match.start() if match else len(text)]


def offset_of(text: str, position: types.Position, codec: PositionCodec) -> int:
    """String index of an LSP position (its character in the client's code
    units); a column past the line's end means the line's end."""
    start = line_start(text, position.line + 1)
    line = _line_at(text, start)
    if line.isascii():
        return start + min(position.character, len(line))
    units = 0
    for index, char in enumerate(line):
        if units >= position.character:
            return start + index
        units += codec.impl.code_units_for_char(char)
    return start + len(line)


def apply_change(text: str, change: types.TextDocumentContentChangeEvent, codec: PositionCodec) -> str:
    """`text` after one didChange content change, whole or partial."""
    if not isinstance(change, types.TextDocumentContentChangePartial):
        return change.text
    start = offset_of(text, change.range.start, codec)
    end = max(start, offset_of(text, change.range.end, codec))
    return text[:start] + change.text + text[end:]
