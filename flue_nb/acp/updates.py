"""A conversation's events as ACP `session/update`s: text, thinking and tool calls with their
kinds and locations, the same mapping for a live prompt and for the replay of `session/load`."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

from acp import (
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_tool_call,
    update_user_message_text,
)
from acp.schema import ToolCallLocation, ToolKind

from flue_nb.runtime.events import (
    Event,
    MessageEnd,
    SubmissionQueued,
    TextDelta,
    ThinkingDelta,
    ToolEnd,
    ToolStart,
)

__all__ = ["KINDS", "Paragraphs", "kind_of", "locations_of", "to_updates"]

KINDS: dict[str, ToolKind] = {
    "read": "read",
    "write": "edit",
    "edit": "edit",
    "edit_cell": "edit",
    "insert_cell": "edit",
    "delete_cell": "delete",
    "move_cell": "move",
    "bash": "execute",
    "python": "execute",
    "run_cell": "execute",
    "grep": "search",
    "glob": "search",
    "task": "think",
}
"""The ACP kind of each of flue_nb's own tools; any other tool (the agent's, MCP's) is `other`."""

_PATH_ARGS = ("path", "file_path")


def kind_of(name: str) -> ToolKind:
    """The ACP tool kind of a flue_nb tool name."""
    return KINDS.get(name, "other")


def locations_of(data: Mapping[str, Any], cwd: str | None) -> list[ToolCallLocation]:
    """The files a call touches, as absolute paths (ACP's locations let a client follow along)."""
    out = []
    for key in _PATH_ARGS:
        value = data.get(key)
        if isinstance(value, str) and value:
            path = value if os.path.isabs(value) or cwd is None else os.path.join(cwd, value)
            out.append(ToolCallLocation(path=os.path.normpath(path)))
    return out


def to_updates(
    event: Event, *, cwd: str | None, title: Callable[[str, Mapping[str, Any]], str], replay: bool = False
) -> list[Any]:
    """The ACP updates one event makes (none for most: lifecycle events are not sent). The user's
    own messages are sent only in a `replay`: live, the client has just sent them."""
    if isinstance(event, TextDelta) and event.task_id is None and event.delta:
        return [update_agent_message_text(event.delta)]
    if isinstance(event, ThinkingDelta) and event.task_id is None and event.delta:
        return [update_agent_thought_text(event.delta)]
    if isinstance(event, ToolStart) and event.task_id is None:
        data = dict(event.input)
        return [
            start_tool_call(
                event.call_id,
                title(event.name, data),
                kind=kind_of(event.name),
                status="in_progress",
                locations=locations_of(data, cwd),
                raw_input=data,
            )
        ]
    if isinstance(event, ToolEnd) and event.task_id is None:
        raw: dict[str, Any] = {"is_error": event.is_error, "ended": event.ended}
        if event.approval is not None:
            raw["approval"] = event.approval.to_dict()
        return [
            update_tool_call(
                event.call_id,
                status="failed" if event.is_error or event.ended != "completed" else "completed",
                content=[tool_content(text_block(event.content))] if event.content else None,
                raw_output=raw,
            )
        ]
    if replay and isinstance(event, SubmissionQueued) and event.text:
        return [update_user_message_text(event.text)]
    return []


class Paragraphs:
    """Puts a blank line between the text of one answer and the next within a prompt: a client
    appends every `agent_message_chunk` of a prompt to one message, so the answer after a tool
    call would run on from the text before it ("…it.The kernel ran it")."""

    def __init__(self) -> None:
        self._gap = False

    def __call__(self, event: Event) -> Event:
        """`event`, its text preceded by the blank line where a new answer's text begins."""
        if isinstance(event, SubmissionQueued):
            self._gap = False  # a new prompt: a message of its own in the client
        elif isinstance(event, MessageEnd) and event.role == "assistant" and event.task_id is None and event.text:
            self._gap = True
        elif isinstance(event, TextDelta) and event.task_id is None and event.delta and self._gap:
            self._gap = False
            return dataclasses.replace(event, delta="\n\n" + event.delta)
        return event
