"""Cutting tool output to 2000 lines or 50 KB, whichever comes first (contract 2.2, 5.1).

Pure functions, no I/O. A cut never falls inside a line or a UTF-8 character: a line that does
not fit is left out whole, and the caller says so in its own words (`read` shows the first
50 KB of a giant line itself, contract 2.4). "50 KB" is 51,200 bytes of UTF-8.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_BYTES", "MAX_LINES", "Truncation", "truncate_head", "truncate_tail", "utf8_prefix"]

MAX_LINES = 2000
"""Most lines a tool result shows."""
MAX_BYTES = 51200
"""Most bytes of UTF-8 a tool result shows ("50 KB")."""


@dataclass
class Truncation:
    """The text kept after a cut, and what was cut."""

    text: str
    """The lines kept, joined with newlines (the input unchanged when nothing was cut)."""
    truncated: bool
    """True when lines were left out."""
    total_lines: int
    """Lines in the input (a trailing newline does not start another line)."""
    shown_lines: int
    """Lines kept."""
    first_line: int
    """1-based number of the first line kept."""


def _nbytes(line: str) -> int:
    # surrogatepass: text from a kernel may hold lone surrogates; count them, never raise.
    return len(line.encode("utf-8", "surrogatepass"))


def _split(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # "a\nb\n" is two lines, not three
    return lines


def truncate_head(text: str, *, max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES) -> Truncation:
    """Keep the first whole lines that fit in `max_lines` lines and `max_bytes` bytes."""
    lines = _split(text)
    kept, size = 0, 0
    for line in lines:
        extra = _nbytes(line) + (1 if kept else 0)
        if kept >= max_lines or size + extra > max_bytes:
            break
        kept, size = kept + 1, size + extra
    if kept == len(lines):
        return Truncation(text, False, len(lines), kept, 1)
    return Truncation("\n".join(lines[:kept]), True, len(lines), kept, 1)


def truncate_tail(text: str, *, max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES) -> Truncation:
    """Keep the last whole lines that fit in `max_lines` lines and `max_bytes` bytes."""
    lines = _split(text)
    total = len(lines)
    kept, size = 0, 0
    for line in reversed(lines):
        extra = _nbytes(line) + (1 if kept else 0)
        if kept >= max_lines or size + extra > max_bytes:
            break
        kept, size = kept + 1, size + extra
    if kept == total:
        return Truncation(text, False, total, kept, 1)
    return Truncation("\n".join(lines[total - kept :]), True, total, kept, total - kept + 1)


def utf8_prefix(data: bytes, max_bytes: int) -> bytes:
    """The longest prefix of `data` within `max_bytes` bytes that ends on a character boundary."""
    if len(data) <= max_bytes:
        return data
    end = max_bytes
    # Step back over continuation bytes (0b10xxxxxx) so the cut lands before a lead byte.
    while end > 0 and (data[end] & 0xC0) == 0x80:
        end -= 1
    return data[:end]
