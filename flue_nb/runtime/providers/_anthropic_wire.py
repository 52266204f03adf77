"""flue_nb messages in the Messages API's wire format: the `messages` and `tools` arrays, with
prompt-cache breakpoints, images, and the blocks of Anthropic's own kept verbatim."""

from __future__ import annotations

import base64
from typing import Any

from flue_nb.runtime.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    ProviderPart,
    SignalMessage,
    SummaryMessage,
    TextPart,
    ThinkingPart,
    ToolResultMessage,
    UserMessage,
)
from flue_nb.runtime.providers.model import ToolSpec

__all__ = ["EPHEMERAL", "to_wire_messages", "to_wire_tools"]

EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
"""The cache-control marker of a prompt-cache breakpoint."""


def to_wire_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """The `tools` array; the last tool carries the cache breakpoint for the tools prefix."""
    out: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools
    ]
    if out:
        out[-1]["cache_control"] = EPHEMERAL
    return out


def to_wire_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """The `messages` array: user-role items merged per turn, tool results first."""
    wire: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []

    def flush_user() -> None:
        # The API wants every tool_result of a turn before any other block of that turn.
        if results or texts:
            wire.append({"role": "user", "content": [*results, *texts]})
        results.clear()
        texts.clear()

    for m in messages:
        if isinstance(m, AssistantMessage):
            blocks = _assistant_blocks(m)
            if blocks:
                flush_user()
                if wire and wire[-1]["role"] == "assistant":
                    # A turn continued after `pause_turn` is one assistant turn, not two.
                    wire[-1]["content"] = [*wire[-1]["content"], *blocks]
                else:
                    wire.append({"role": "assistant", "content": blocks})
            # An assistant message with nothing sendable is skipped, so the user items on
            # either side of it still merge into one turn.
        elif isinstance(m, ToolResultMessage):
            content: str | list[dict[str, Any]] = m.content
            if m.images:
                # Images travel inside the tool_result, next to its text.
                content = [{"type": "text", "text": m.content}] if m.content.strip() else []
                content += [_image_block(p) for p in m.images]
            result = {"type": "tool_result", "tool_use_id": m.call_id, "content": content}
            results.append({**result, "is_error": m.is_error})
        else:
            text = _user_text(m)
            # The API rejects empty or whitespace-only text blocks.
            if text.strip():
                texts.append({"type": "text", "text": text})
            if isinstance(m, UserMessage):
                texts.extend(_image_block(p) for p in m.images)
    flush_user()
    if wire and wire[-1]["role"] == "user":
        # A breakpoint on the newest block lets the next call read the whole history from cache.
        wire[-1]["content"][-1] = {**wire[-1]["content"][-1], "cache_control": EPHEMERAL}
    return wire


def _image_block(p: ImagePart) -> dict[str, Any]:
    if p.data is None:  # the bytes were lost (a damaged store): say what stood there
        return {"type": "text", "text": f"{p.describe()} (its bytes are no longer available)"}
    source = {"type": "base64", "media_type": p.media_type, "data": base64.b64encode(p.data).decode("ascii")}
    return {"type": "image", "source": source}


def _user_text(m: Message) -> str:
    if isinstance(m, (SignalMessage, SummaryMessage)):
        return m.render()
    if isinstance(m, UserMessage):
        return m.text
    raise TypeError(f"not a user-role message: {m!r}")


def _assistant_blocks(m: AssistantMessage) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for p in m.parts:
        if isinstance(p, ThinkingPart):
            # Thinking without a signature (e.g. cut off mid-stream) would be rejected.
            if p.signature:
                blocks.append({"type": "thinking", "thinking": p.thinking, "signature": p.signature})
        elif isinstance(p, TextPart):
            if p.citations:
                blocks.append({"type": "text", "text": p.text, "citations": p.citations})
            elif p.text:
                blocks.append({"type": "text", "text": p.text})
        elif isinstance(p, ProviderPart):
            # Verbatim, in its place: the API wants redacted thinking, server tool use and its
            # results back exactly as it sent them.
            if p.provider == "anthropic":
                blocks.append(p.block)
        else:
            use = {"type": "tool_use", "id": p.id, "name": p.name, "input": p.input}
            blocks.append(use if p.caller is None else {**use, "caller": p.caller})
    return blocks
