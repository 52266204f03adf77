"""flue_nb messages to chat-completions messages, and streamed chunks back to an `AssistantMessage`.

Nothing here sends or knows the SDK: `to_chat_messages`/`to_chat_tools` build the request's
arrays, `ChunkAssembler` folds the stream's chunks (the SDK's objects, read by attribute) into
the provider's deltas and the final message, with the quirks real servers have (tool calls
without ids, ids and names repeated in every fragment, usage in a last chunk or not at all).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from flue_nb.runtime.messages import (
    AssistantMessage,
    AssistantPart,
    Message,
    TextPart,
    ThinkingPart,
    ToolCall,
    Usage,
)
from flue_nb.runtime.providers._wire_common import UserParts, to_turns, tool_arguments, unique_id
from flue_nb.runtime.providers.model import StreamEvent, TextChunk, ThinkingChunk, ToolCallDelta, ToolSpec
from flue_nb.runtime.providers.streaming import parse_tool_input
from flue_nb.runtime.text import clean

__all__ = ["STOP_REASONS", "ChunkAssembler", "to_chat_messages", "to_chat_tools"]

STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
"""`finish_reason` onto the stop reasons the Anthropic provider reports (others pass through)."""


_GRAMMAR_LIMITS = frozenset({"maxLength", "minLength", "maxItems", "minItems", "pattern"})
"""Schema keywords grammar-constrained servers expand into rules: llama.cpp's builder makes one
rule per allowed length, so `maxLength: 4096` crashes the server. The tools check them anyway."""


def to_chat_tools(tools: list[ToolSpec], *, limits: bool = True) -> list[dict[str, Any]]:
    """The `tools` array: each tool as a function with its JSON schema (without the length and
    pattern limits when `limits` is False, for servers that build a grammar from it)."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema if limits else _without_limits(t.input_schema),
            },
        }
        for t in tools
    ]


def _without_limits(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_without_limits(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _GRAMMAR_LIMITS and isinstance(value, (int, str)):
            continue
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {name: _without_limits(sub) for name, sub in value.items()}  # names, not keywords
        else:
            out[key] = _without_limits(value)
    return out


def to_chat_messages(system: str, messages: list[Message], *, vision: bool, model: str) -> list[dict[str, Any]]:
    """The `messages` array: the system prompt first, tool results as `tool` messages.

    User-role items between two assistant turns merge into one user message. A tool result's
    images follow the turn's tool messages in a user message, the only place chat completions
    take images; a model that does not take images gets a note in their place.
    """
    wire: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    return wire + to_turns(
        messages, _USER_PARTS, assistant=_assistant, tool_result=_tool_result, vision=vision, model=model
    )


_USER_PARTS = UserParts(
    text_type="text", image=lambda url: {"type": "image_url", "image_url": {"url": url}}, model_class="OpenAIModel"
)


def _tool_result(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _assistant(m: AssistantMessage) -> list[dict[str, Any]]:
    # Thinking is not sent back: chat completions has no field for it (servers that stream
    # `reasoning_content` ask clients to drop it from the next request).
    text = "".join(p.text for p in m.parts if isinstance(p, TextPart))
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": tool_arguments(c.input)}}
        for c in m.tool_calls
    ]
    if not text and not calls:
        return []
    # No `"content": null` beside tool calls: llama.cpp's server answers it with HTTP 500, and
    # OpenAI takes the key left out as well.
    out: dict[str, Any] = {"role": "assistant"}
    if text:
        out["content"] = text
    if calls:
        out["tool_calls"] = calls
    return [out]


# --- the stream --------------------------------------------------------------------------------


@dataclass
class _Call:
    id: str
    """Unique within the response (a server that repeats an id gets a renamed second call)."""
    name: str
    wire_id: str | None
    """The id the server sent, None when it sent none."""
    arguments: list[str] = field(default_factory=list)
    announced: bool = False


class ChunkAssembler:
    """Folds `ChatCompletionChunk`s into deltas for the caller and the final `AssistantMessage`."""

    def __init__(self, model_id: str) -> None:
        self.model = model_id
        self.parts: list[AssistantPart] = []
        self.calls: dict[int, _Call] = {}
        self.order: list[int] = []
        self.alias: dict[int, int] = {}
        self.usage: Usage | None = None
        """None until a chunk reports it: a server that never does is 'not reported', not zero."""
        self.finish_reason: str | None = None
        self.refused = False
        self.chunks = 0
        """Chunks fed: none at the end means what came back was not a stream."""

    @property
    def finished(self) -> bool:
        """Whether a choice said why it stopped (a stream cut off before that is truncated)."""
        return self.finish_reason is not None

    def feed(self, chunk: Any) -> Iterator[StreamEvent]:
        """Take one chunk; yield what the caller should see now."""
        self.chunks += 1
        self.model = getattr(chunk, "model", None) or self.model
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self._take_usage(usage)
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0):
                continue  # n > 1 is never asked for; a second choice would interleave
            delta = getattr(choice, "delta", None)
            if delta is not None:
                yield from self._delta(delta)
            if reason := getattr(choice, "finish_reason", None):
                self.finish_reason = reason

    def _delta(self, delta: Any) -> Iterator[StreamEvent]:
        # vLLM and DeepSeek stream reasoning as `reasoning_content`, Ollama and OpenRouter as
        # `reasoning`: both are thinking, never the answer.
        reasoning = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
        if isinstance(reasoning, str) and reasoning:
            yield from self._thinking(clean(reasoning))
        for attr in ("content", "refusal"):
            text = getattr(delta, attr, None)
            if isinstance(text, str) and text:
                self.refused = self.refused or attr == "refusal"
                yield from self._text(clean(text))
        for fragment in getattr(delta, "tool_calls", None) or []:
            yield from self._fragment(fragment)

    def _thinking(self, text: str) -> Iterator[StreamEvent]:
        last = self.parts[-1] if self.parts else None
        if isinstance(last, ThinkingPart):
            last.thinking += text
        else:
            self.parts.append(ThinkingPart(text))
        yield ThinkingChunk(text)

    def _text(self, text: str) -> Iterator[StreamEvent]:
        last = self.parts[-1] if self.parts else None
        if isinstance(last, TextPart):
            last.text += text
        else:
            self.parts.append(TextPart(text))
        yield TextChunk(text)

    def _fragment(self, fragment: Any) -> Iterator[StreamEvent]:
        index = getattr(fragment, "index", None)
        index = index if isinstance(index, int) else len(self.order)
        fn = getattr(fragment, "function", None)
        call_id = getattr(fragment, "id", None) or None
        name = getattr(fn, "name", None) or None
        args = getattr(fn, "arguments", None)
        call = self.calls.get(self.alias.get(index, index))
        if call is not None and call_id and call.wire_id is not None and call.wire_id != call_id:
            # A new id at a used index: a server that numbers every call 0 (each its own call);
            # the fragments after it at that index belong to the new call.
            self.alias[index] = max(self.calls) + 1
            call = None
        index = self.alias.get(index, index)
        if call is None:
            # Some local servers send no ids: make one, unique within the conversation.
            made = unique_id(call_id, (c.id for c in self.calls.values())) if call_id else None
            call = _Call(made or f"call_flue_{uuid.uuid4().hex[:20]}", name or "", call_id)
            self.calls[index] = call
            self.order.append(index)
        elif name and not call.name:
            call.name = name  # llama.cpp repeats id and name in every fragment: keep the first
        if isinstance(args, str) and args:
            call.arguments.append(args)
        if call.name and not call.announced:
            call.announced = True
            yield ToolCallDelta(call.id, call.name)

    def _take_usage(self, usage: Any) -> None:
        # OpenAI's prompt_tokens count the cached ones too; ours keep them apart, as Anthropic does.
        prompt = getattr(usage, "prompt_tokens", None) or 0
        details = getattr(usage, "prompt_tokens_details", None)
        cached = (getattr(details, "cached_tokens", None) or 0) if details is not None else 0
        self.usage = Usage(
            input_tokens=max(0, prompt - cached),
            output_tokens=getattr(usage, "completion_tokens", None) or 0,
            cache_read_tokens=cached,
        )

    def message(self) -> AssistantMessage:
        """The assembled response; tool arguments are parsed once, here."""
        parts = list(self.parts)
        for index in self.order:
            call = self.calls[index]
            parts.append(ToolCall(call.id, call.name, parse_tool_input("".join(call.arguments))))
        reason = self.finish_reason or ""
        stop = "refusal" if self.refused else STOP_REASONS.get(reason, reason or None)
        if stop == "end_turn" and self.calls:
            stop = "tool_use"  # some servers say `stop` after tool calls
        return AssistantMessage(parts=parts, usage=self.usage, stop_reason=stop, model=self.model)
