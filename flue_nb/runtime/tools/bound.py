"""One limit for every tool result: its first 2000 lines or 50 KB, and a marker saying what was cut.

The built-in tools cut their own output in their own words (`read` says how to continue, `bash`
keeps the tail); a result that is still over the limit here came from a custom `@tool` function
or an MCP server, whose results would otherwise grow every later request without bound (a 5 MB
result made every request 5.7 MB, and once the provider said "prompt is too long" every later
message failed). Where the sandbox can keep the whole text (the kernel: `_flue.results[N]`), the
marker says where it is.
"""

from __future__ import annotations

from collections.abc import Callable

from flue_nb.runtime.tools.truncate import MAX_BYTES, MAX_LINES, truncate_head, utf8_prefix

__all__ = ["Keep", "bound_result", "over_limit"]

# A built-in tool's own cut output is its 2000 lines / 50 KB plus its own marker (`Use
# offset=N to continue.`); that marker must not make it a second cut.
_MARKER_LINES = 20
_MARKER_BYTES = 2048

Keep = Callable[[str], "str | None"]
"""Keeps a result's full text somewhere the model can reach; returns how to reach it, or None."""


def over_limit(text: str) -> bool:
    """True when `text` is over 2000 lines or 50 KB of UTF-8 (plus room for a tool's own marker)."""
    # Cheap checks first: most results are far below both limits.
    if len(text) <= MAX_BYTES // 4 and text.count("\n") < MAX_LINES:
        return False
    lines, size = MAX_LINES + _MARKER_LINES, MAX_BYTES + _MARKER_BYTES
    return truncate_head(text, max_lines=lines, max_bytes=size).truncated


def bound_result(text: str, *, keep: Keep | None = None) -> str:
    """`text` cut to its first 2000 lines / 50 KB with a marker (unchanged when it fits)."""
    if not over_limit(text):
        return text
    cut = truncate_head(text, max_lines=MAX_LINES, max_bytes=MAX_BYTES)
    size = len(text.encode("utf-8", "surrogatepass"))
    if cut.shown_lines:
        shown = cut.text
        what = f"showing lines 1-{cut.shown_lines:,} of {cut.total_lines:,}"
    else:  # one line over 50 KB: its first 50 KB, cut on a character boundary
        first = text.split("\n", 1)[0].encode("utf-8", "surrogatepass")
        shown = utf8_prefix(first, MAX_BYTES).decode("utf-8", "surrogatepass")
        what = f"showing the first {MAX_BYTES:,} bytes of line 1 of {cut.total_lines:,}"
    where = keep(text) if keep is not None else None
    if where is not None:
        rest = f"The whole result is kept as {where}; read the part you need with the `python` tool."
    else:
        rest = "The rest is not kept: ask the tool for less (a narrower query, a page, a filter)."
    return f"{shown}\n\n[Result cut to the 2000-line / 50 KB limit ({size:,} bytes), {what}. {rest}]"
