"""What sums a tool call up: the argument its tool names (`Tool.summary_arg`), for the approval
question and for every view of the call (chat cards, transcript lines, history).

Runtime, so the approval policy and the notebook's views read one choice; each renders it its own
way (the question keeps the count of further lines, a card one line cut to its width). A view
learns the choices from the agent's tools (`Summaries`, which a conversation fills as its runs
render them), never from a table of the process.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from flue_nb.runtime.tools.tool import Tool

__all__ = ["SUMMARY_CHARS", "Summaries", "arguments_json", "one_line", "summary_text"]

SUMMARY_CHARS = 80
"""How long a view's one-line summary of a call may be."""


def summary_text(data: Mapping[str, Any] | None, summary_arg: str | None = None) -> str | None:
    """The text that sums up a call: its tool's `summary_arg`, else its first text argument;
    None when the call has no text argument."""
    data = data if isinstance(data, Mapping) else {}
    value = data.get(summary_arg or "")
    if isinstance(value, str):
        return value
    return next((v for v in data.values() if isinstance(v, str)), None)


class Summaries:
    """How a conversation's views sum calls up: by the argument each of its agent's tools names.

    A conversation adds the tools of every run it renders (its subagents' too); a call of a tool
    the agent does not have (a stored call from an earlier version of it) is summed up by its
    first text argument.
    """

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._args: dict[str, str] = {}
        self.add(tools)

    def add(self, tools: Iterable[Tool]) -> None:
        """Learn the summary arguments of `tools` (a later one of the same name wins)."""
        for t in tools:
            if t.summary_arg is not None:
                self._args[t.name] = t.summary_arg
            else:
                self._args.pop(t.name, None)

    def arg(self, name: str) -> str | None:
        """The argument that sums up a call of tool `name`, if its tool names one."""
        return self._args.get(name)

    def text(self, name: str, data: Mapping[str, Any] | None) -> str | None:
        """`summary_text` of a call of tool `name`."""
        return summary_text(data, self._args.get(name))

    def line(self, name: str, data: Mapping[str, Any] | None, limit: int = SUMMARY_CHARS) -> str:
        """A call in one line, as a view shows it: its summary text cut to `limit` ("" without one)."""
        return one_line(self.text(name, data) or "", limit)


def one_line(text: str, limit: int = SUMMARY_CHARS) -> str:
    """The first non-blank line of `text`, cut to `limit` characters; `…` when more was left."""
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    more = len(lines) > 1
    if len(first) > limit:
        first, more = first[: limit - 1], True
    return first + ("…" if more else "")


def arguments_json(data: Mapping[str, Any]) -> str:
    """A call's arguments as compact one-line JSON (what sums up a call with no text argument)."""
    return json.dumps(dict(data), ensure_ascii=False, default=str, separators=(", ", ": "))
