"""What sums a tool call up: the argument its tool names (`Tool.summary_arg`), for the approval
question and for every view of the call (chat cards, transcript lines, history).

Runtime, so the approval policy and the notebook's views read one choice; each renders it its own
way (the question keeps the count of further lines, a card one line cut to its width).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from flue_nb.runtime.tools.tool import summary_arg_of

__all__ = ["SUMMARY_CHARS", "arguments_json", "one_line", "summarize_call", "summary_text"]

SUMMARY_CHARS = 80
"""How long a view's one-line summary of a call may be."""


def summary_text(name: str, data: Mapping[str, Any] | None) -> str | None:
    """The text that sums up a call of tool `name`: its `summary_arg`, else its first text
    argument; None when the call has no text argument."""
    data = data if isinstance(data, Mapping) else {}
    value = data.get(summary_arg_of(name) or "")
    if isinstance(value, str):
        return value
    return next((v for v in data.values() if isinstance(v, str)), None)


def one_line(text: str, limit: int = SUMMARY_CHARS) -> str:
    """The first non-blank line of `text`, cut to `limit` characters; `…` when more was left."""
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    more = len(lines) > 1
    if len(first) > limit:
        first, more = first[: limit - 1], True
    return first + ("…" if more else "")


def summarize_call(name: str, data: Mapping[str, Any] | None, limit: int = SUMMARY_CHARS) -> str:
    """A call in one line, as a view shows it: `summary_text` cut to `limit` ("" without one)."""
    return one_line(summary_text(name, data) or "", limit)


def arguments_json(data: Mapping[str, Any]) -> str:
    """A call's arguments as compact one-line JSON (what sums up a call with no text argument)."""
    return json.dumps(dict(data), ensure_ascii=False, default=str, separators=(", ", ": "))
