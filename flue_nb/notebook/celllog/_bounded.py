"""A stream recorded while it is written, holding only a head and a tail of it.

A cell that prints 100 MB must be recorded without ever holding 100 MB: `BoundedText` keeps the
first `STORE_CHARS` characters and a rolling tail of as many, counts the rest, and at the end cuts
both to the contract's limits (2000 lines / 50 KB per stream, half for the head, half for the
tail, whole lines only) with a marker saying what was left out.
"""

from __future__ import annotations

from collections import deque

from flue_nb.runtime.redact import redact
from flue_nb.runtime.tools.truncate import MAX_BYTES, MAX_LINES, truncate_head, truncate_tail, utf8_prefix

__all__ = ["STORE_CHARS", "BoundedText", "cut_text"]

STORE_CHARS = MAX_BYTES
"""Characters kept for the head, and again for the tail, while a stream is written (a character
is at least one UTF-8 byte, so each side always holds the 25 KB its final cut may need)."""
# Each side gets half of what is left once the marker line has its room.
_HALF_LINES = (MAX_LINES - 1) // 2
_HALF_BYTES = (MAX_BYTES - 256) // 2


class BoundedText:
    """Text written in pieces; at most `5 * STORE_CHARS` characters of it are ever held (the head,
    and a tail that may keep one written chunk of up to four times the bound uncopied)."""

    __slots__ = ("_head", "_head_room", "_tail", "_tail_chars", "chars", "dropped")

    def __init__(self) -> None:
        self._head: list[str] = []
        self._head_room = STORE_CHARS
        self._tail: deque[str] = deque()
        self._tail_chars = 0
        self.chars = 0
        """Characters written in all."""
        self.dropped = False
        """True once some text was let go between the head and the tail."""

    def write(self, text: str) -> None:
        """Add `text`, letting go of the middle once both ends are full."""
        n = len(text)
        self.chars += n
        if self._head_room:
            if n <= self._head_room:
                self._head.append(text)
                self._head_room -= n
                return
            self._head.append(text[: self._head_room])
            text = text[self._head_room :]
            n = len(text)
            self._head_room = 0
        if n >= STORE_CHARS:
            self.dropped = self.dropped or self._tail_chars > 0 or n > STORE_CHARS
            self._tail.clear()
            # A chunk up to a few times the bound is kept as it is (no copy on the hot path); a
            # larger one is sliced, so a 100 MB write is never held past the call that made it.
            self._tail.append(text if n <= 4 * STORE_CHARS else text[-STORE_CHARS:])
            self._tail_chars = n if n <= 4 * STORE_CHARS else STORE_CHARS
            return
        self._tail.append(text)
        self._tail_chars += n
        while self._tail_chars > STORE_CHARS:
            first = self._tail.popleft()
            over = self._tail_chars - STORE_CHARS
            self.dropped = True
            if len(first) > over:
                self._tail.appendleft(first[over:])
                self._tail_chars -= over
            else:
                self._tail_chars -= len(first)

    @property
    def held(self) -> int:
        """Characters held now."""
        return STORE_CHARS - self._head_room + self._tail_chars

    def value(self) -> str:
        """The text cut to the contract's limits, with a marker where the middle was left out."""
        head = "".join(self._head)
        if not self.dropped:  # nothing let go: head and tail are the whole text, one cut for both
            return cut_text(head + "".join(self._tail))
        # Redacted before the cut, so no cut leaves a piece of a secret (the head's start and the
        # tail's end are what is shown, well inside what each holds).
        head, tail = redact(head), redact("".join(self._tail))
        rest = tail.partition("\n")[2]
        if rest.strip():
            # The tail's first line lost its start to the middle: never show half a line.
            tail = rest
        return _join_cut(head, tail, self.chars)


def cut_text(text: str) -> str:
    """`text` as it is when within 2000 lines / 50 KB, else its head and tail with a marker (with
    known secrets redacted first, so the cut leaves no piece of one)."""
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    if lines <= MAX_LINES and (len(text) <= MAX_BYTES // 4 or len(text.encode("utf-8", "surrogatepass")) <= MAX_BYTES):
        return text
    total = len(text)
    text = redact(text)
    return _join_cut(text, text, total)


def _join_cut(head_text: str, tail_text: str, total_chars: int) -> str:
    head = truncate_head(head_text, max_lines=_HALF_LINES, max_bytes=_HALF_BYTES)
    tail = truncate_tail(tail_text, max_lines=_HALF_LINES, max_bytes=_HALF_BYTES)
    first = head.text if head.shown_lines else _line_prefix(head_text)
    last = tail.text if tail.shown_lines else _line_suffix(tail_text)
    shown = len(first) + len(last)
    marker = f"[… {max(total_chars - shown, 0):,} characters left out here: the head and tail of the output are kept …]"
    return f"{first}\n{marker}\n{last}"


def _line_prefix(text: str) -> str:
    line = text.split("\n", 1)[0]
    data = utf8_prefix(line.encode("utf-8", "surrogatepass"), _HALF_BYTES - 3)
    return data.decode("utf-8", "surrogatepass") + "…"


def _line_suffix(text: str) -> str:
    line = text.rstrip("\n").rsplit("\n", 1)[-1]
    data = line.encode("utf-8", "surrogatepass")
    start = max(len(data) - (_HALF_BYTES - 3), 0)
    while start < len(data) and (data[start] & 0xC0) == 0x80:
        start += 1
    return ("…" if start else "") + data[start:].decode("utf-8", "surrogatepass")
