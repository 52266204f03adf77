"""What the two OpenAI wires (`_openai_wire` for chat completions, `_responses_wire` for the
Responses API) share: turning flue_nb messages into the request's turns, a tool call's input as
the JSON string both carry, and call ids unique within a response. Neutral ground, so neither
wire imports the other's internals."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from flue_nb.runtime.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    SignalMessage,
    SummaryMessage,
    ToolResultMessage,
    UserMessage,
)
from flue_nb.runtime.text import INVALID_INPUT_KEY

__all__ = ["UserParts", "to_turns", "tool_arguments", "unique_id"]


@dataclass(frozen=True)
class UserParts:
    """How one API spells the parts of a user message."""

    text_type: str
    """The `type` of a text part (`text` on chat completions, `input_text` on Responses)."""
    image: Callable[[str], dict[str, Any]]
    """An image part, from the image's `data:` URL."""
    model_class: str
    """The model class the note for a model that does not take images names."""


def to_turns(
    messages: list[Message],
    parts: UserParts,
    *,
    assistant: Callable[[AssistantMessage], list[dict[str, Any]]],
    tool_result: Callable[[str, str], dict[str, Any]],
    vision: bool,
    model: str,
) -> list[dict[str, Any]]:
    """The conversation as wire items: each assistant turn as `assistant` spells it, each tool
    result as `tool_result(call_id, content)` spells it, everything else in user messages.

    User-role items between two assistant turns merge into one user message (chat templates of
    local servers reject two user messages in a row). A tool result's images follow the turn's
    tool results in a user message; a model that does not take images gets a note in their place.
    """
    wire: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []

    def flush() -> None:
        if pending:
            if all(p["type"] == parts.text_type for p in pending):
                wire.append({"role": "user", "content": "\n\n".join(p["text"] for p in pending)})
            else:
                wire.append({"role": "user", "content": list(pending)})
            pending.clear()

    def text(value: str) -> dict[str, Any]:
        return {"type": parts.text_type, "text": value}

    def image(p: ImagePart) -> dict[str, Any]:
        if p.data is None:  # the bytes were lost (a damaged store): say what stood there
            return text(f"{p.describe()} (its bytes are no longer available)")
        if not vision:
            return text(
                f"{p.describe()} (not sent: `{model}` does not take images; "
                f"{parts.model_class}(..., vision=True) if it does)"
            )
        return parts.image(f"data:{p.media_type};base64,{base64.b64encode(p.data).decode('ascii')}")

    for m in messages:
        if isinstance(m, AssistantMessage):
            items = assistant(m)
            if items:
                flush()
                wire.extend(items)
        elif isinstance(m, ToolResultMessage):
            # Tool results must follow their assistant turn directly: the user items of this
            # turn (images included) wait in `pending` until the turn's results are out.
            wire.append(tool_result(m.call_id, m.content if m.content.strip() else "(no output)"))
            if m.images:
                pending.append(text(f"Images from the `{m.name}` call {m.call_id}:"))
                pending.extend(image(p) for p in m.images)
        else:
            said = m.render() if isinstance(m, (SignalMessage, SummaryMessage)) else m.text
            if said.strip():
                pending.append(text(said))
            if isinstance(m, UserMessage):
                pending.extend(image(p) for p in m.images)
    flush()
    return wire


def tool_arguments(value: dict[str, Any]) -> str:
    """A tool call's input as the JSON string the API carries; input the model sent as broken
    JSON goes back as it was sent, so the model sees its mistake."""
    raw = value.get(INVALID_INPUT_KEY)
    if isinstance(raw, str) and len(value) == 1:
        return raw
    return json.dumps(value, ensure_ascii=False)


def unique_id(call_id: str, taken: Iterable[str]) -> str:
    """`call_id`, or `call_id_2`, `_3`, ... when a call of this response already has it."""
    # Two calls under one id would get two results under it, and the model could not tell which
    # answers which: the second is renamed (its results go back under the new id).
    used = set(taken)
    unique, n = call_id, 1
    while unique in used:
        n += 1
        unique = f"{call_id}_{n}"
    return unique
