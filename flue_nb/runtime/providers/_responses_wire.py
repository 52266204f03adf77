"""flue_nb messages to Responses API input items, and the Responses stream back to an `AssistantMessage`.

Nothing here sends or knows the SDK: `to_responses_input`/`to_responses_tools` build the
request's arrays, `ResponsesAssembler` folds the stream's events (the SDK's objects, read by
attribute) into the provider's deltas and the final message.

What a response's output items become, in output order:

- `reasoning`: a `ThinkingPart` with its summary (or its raw reasoning text, which compatible
  servers send) for the views, then the item itself, verbatim, as a `ProviderPart`: with
  `store=False` its `encrypted_content` is the model's reasoning, and the item goes back in the
  next request's input unchanged.
- `message`: a `ProviderPart` holding the item without its `content` (`id`, `role`, `status`,
  `phase`), then a `TextPart` with its text.
- `function_call`: a `ProviderPart` holding the item without `name` and `arguments` (`id`,
  `call_id`, `status`), then the `ToolCall`.
- anything else: a `ProviderPart`, verbatim.

The API links a reasoning item to the item after it by that item's id (a reasoning item whose
next item comes back without its id is refused as "provided without its required following
item"), so every item goes back with the id it came with; the `ProviderPart` before a text or a
call is what keeps it. Other providers never see these parts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from flue_nb.runtime.messages import (
    AssistantMessage,
    AssistantPart,
    Message,
    ProviderPart,
    TextPart,
    ThinkingPart,
    ToolCall,
    Usage,
)
from flue_nb.runtime.providers._openai_errors import stream_failure
from flue_nb.runtime.providers._wire_common import UserParts, to_turns, tool_arguments, unique_id
from flue_nb.runtime.providers.model import StreamEvent, TextChunk, ThinkingChunk, ToolCallDelta, ToolSpec
from flue_nb.runtime.providers.streaming import parse_tool_input
from flue_nb.runtime.text import clean, clean_value

__all__ = ["PROVIDER", "ResponsesAssembler", "to_responses_input", "to_responses_tools"]

PROVIDER = "openai"
"""The `ProviderPart.provider` of Responses API items."""

_CONTENT_OF = {"message": ("content",), "function_call": ("name", "arguments")}
"""What flue_nb models itself of an item (in a `TextPart` or `ToolCall`); the rest is kept."""


def to_responses_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """The `tools` array: each tool as a function with its JSON schema, not strict.

    The Responses API makes function tools strict unless told otherwise, and strict mode
    refuses any schema with an optional property or without `additionalProperties: false`.
    """
    return [
        {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": t.input_schema,
            "strict": False,
        }
        for t in tools
    ]


def to_responses_input(messages: list[Message], *, vision: bool, model: str) -> list[dict[str, Any]]:
    """The `input` array: user turns as user messages, each assistant turn as its output items,
    tool results as `function_call_output` items (user-role items merge and images follow the
    turn's outputs as on chat completions)."""
    return to_turns(
        messages, _USER_PARTS, assistant=_assistant_items, tool_result=_tool_result, vision=vision, model=model
    )


_USER_PARTS = UserParts(
    text_type="input_text",
    image=lambda url: {"type": "input_image", "image_url": url, "detail": "auto"},
    model_class="OpenAIResponsesModel",
)


def _tool_result(call_id: str, content: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": content}


def _assistant_items(m: AssistantMessage) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    shell: dict[str, Any] | None = None
    """A message or function_call item's own fields, waiting for the part that completes it."""

    def unpaired() -> None:
        nonlocal shell
        if shell is not None and shell.get("type") == "message":
            items.append({**shell, "content": []})
        shell = None  # a function_call without its ToolCall is no call: dropped

    for p in m.parts:
        if isinstance(p, ProviderPart):
            if p.provider != PROVIDER:
                continue  # another provider's block
            unpaired()
            if p.block_type in _CONTENT_OF:
                shell = p.block
            else:
                items.append(p.block)
        elif isinstance(p, TextPart):
            if shell is not None and shell.get("type") == "message":
                items.append({**shell, "content": [{"type": "output_text", "text": p.text, "annotations": []}]})
                shell = None
            elif p.text:
                unpaired()
                # Text another provider (or a cut-off stream) made: no item of this API behind it.
                items.append({"role": "assistant", "content": p.text})
        elif isinstance(p, ToolCall):
            call = {"type": "function_call", "call_id": p.id, "name": p.name, "arguments": tool_arguments(p.input)}
            if shell is not None and shell.get("type") == "function_call":
                call = {**shell, **call}  # its id and status; the call id flue_nb gave it wins
            else:
                unpaired()
            shell = None
            items.append(call)
        # Thinking goes back inside its reasoning item (other providers' thinking has no place here).
    unpaired()
    # A reasoning item must be followed by the item it led to; one that ends the response (an
    # answer cut off by `max_output_tokens`) is refused with "provided without its required
    # following item".
    while items and items[-1].get("type") == "reasoning":
        items.pop()
    return items


# --- the stream --------------------------------------------------------------------------------


@dataclass
class _Item:
    kind: str
    added: dict[str, Any]
    done: dict[str, Any] | None = None
    text: list[str] = field(default_factory=list)
    """Text or reasoning as it streamed (kept only for an item that never finished)."""
    arguments: list[str] = field(default_factory=list)
    call_id: str = ""
    """A function call's id, unique within the response."""


class ResponsesAssembler:
    """Folds Responses API stream events into deltas for the caller and the final `AssistantMessage`."""

    def __init__(self, model_id: str, *, provider: str) -> None:
        self.model = model_id
        self.provider = provider
        """Who answers, for error messages."""
        self.items: dict[int, _Item] = {}
        self.final: Any = None
        """The response of `response.completed` or `response.incomplete`."""
        self.refused = False
        self.chunks = 0
        """Events fed: none at the end means what came back was not a stream."""

    @property
    def finished(self) -> bool:
        """Whether the response said it ended (a stream cut off before that is truncated)."""
        return self.final is not None

    def feed(self, event: Any) -> Iterator[StreamEvent]:
        """Take one event; yield what the caller should see now."""
        self.chunks += 1
        kind = str(getattr(event, "type", "") or "")
        response = getattr(event, "response", None)
        if response is not None:
            self.model = getattr(response, "model", None) or self.model
        index = getattr(event, "output_index", None)
        if kind == "response.output_item.added":
            yield from self._added(index, _as_dict(getattr(event, "item", None)))
        elif kind == "response.output_item.done":
            finished = _as_dict(getattr(event, "item", None))
            self._item(index, finished).done = finished
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            self.refused = self.refused or kind == "response.refusal.delta"
            yield from self._delta(index, "message", TextChunk, getattr(event, "delta", ""))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            yield from self._delta(index, "reasoning", ThinkingChunk, getattr(event, "delta", ""))
        elif kind == "response.reasoning_summary_part.added" and (getattr(event, "summary_index", None) or 0) > 0:
            yield from self._delta(index, "reasoning", ThinkingChunk, "\n\n")  # between summary parts
        elif kind == "response.function_call_arguments.delta":
            delta = getattr(event, "delta", "")
            if isinstance(delta, str):
                self._item(index, {"type": "function_call"}).arguments.append(delta)
        elif kind in ("response.completed", "response.incomplete"):
            self.final = response
        elif kind == "response.failed":
            error = getattr(response, "error", None)
            raise stream_failure({"error": _as_dict(error)}, self.model, self.provider, fallback="the response failed")
        elif kind == "error":
            # The SDK raises the `{"error": {...}}` form itself; older servers put the fields at the top.
            raise stream_failure(_as_dict(event), self.model, self.provider, fallback="an error event")

    def _item(self, index: Any, item: dict[str, Any]) -> _Item:
        key = index if isinstance(index, int) else len(self.items)
        found = self.items.get(key)
        if found is None:
            found = self.items[key] = _Item(str(item.get("type") or ""), item)
        return found

    def _added(self, index: Any, item: dict[str, Any]) -> Iterator[StreamEvent]:
        entry = self._item(index, item)
        if entry.kind == "function_call" and not entry.call_id:
            entry.call_id = self._unique(str(item.get("call_id") or item.get("id") or f"call_{len(self.items)}"))
            yield ToolCallDelta(entry.call_id, str(item.get("name") or ""))

    def _delta(
        self, index: Any, kind: str, chunk: type[TextChunk] | type[ThinkingChunk], delta: Any
    ) -> Iterator[StreamEvent]:
        if not isinstance(delta, str) or not delta:
            return
        text = clean(delta)
        self._item(index, {"type": kind}).text.append(text)
        yield chunk(text)

    def _unique(self, call_id: str) -> str:
        return unique_id(call_id, (i.call_id for i in self.items.values()))

    # --- the message ---------------------------------------------------------------------------

    def message(self) -> AssistantMessage:
        """The assembled response; tool arguments are parsed once, here."""
        parts: list[AssistantPart] = []
        entries = [self.items[k] for k in sorted(self.items)]
        if not any(e.done for e in entries):
            # A server that sends no `output_item.done` still lists its output at the end.
            output = getattr(self.final, "output", None) or []
            entries = [_Item(str(d.get("type") or ""), d, d) for d in (_as_dict(o) for o in output)]
        for entry in entries:
            parts.extend(self._parts(entry))
        calls = any(isinstance(p, ToolCall) for p in parts)
        return AssistantMessage(parts=parts, usage=self._usage(), stop_reason=self._stop(calls), model=self.model)

    def _parts(self, entry: _Item) -> list[AssistantPart]:
        item = clean_value(entry.done or entry.added)
        kind = str(item.get("type") or entry.kind)
        if kind == "message" and any(
            isinstance(c, dict) and c.get("type") == "refusal" for c in item.get("content") or []
        ):
            self.refused = True
        # The finished item is what the response holds; the deltas are what streamed of it.
        if kind == "reasoning":
            said = _reasoning_text(item) if entry.done else "".join(entry.text)
            thinking: list[AssistantPart] = [ThinkingPart(said)] if said else []
            return [*thinking, ProviderPart(PROVIDER, item)]
        if kind == "message":
            text = _message_text(item) if entry.done else "".join(entry.text)
            shell = ProviderPart(PROVIDER, _without(item, kind))
            return [shell, TextPart(text)] if text else [shell]
        if kind == "function_call":
            raw = item.get("arguments")
            arguments = raw if isinstance(raw, str) and raw else "".join(entry.arguments)
            call_id = entry.call_id or self._unique(str(item.get("call_id") or item.get("id") or "call"))
            entry.call_id = call_id
            name = str(item.get("name") or entry.added.get("name") or "")
            return [ProviderPart(PROVIDER, _without(item, kind)), ToolCall(call_id, name, parse_tool_input(arguments))]
        return [ProviderPart(PROVIDER, item)]

    def _usage(self) -> Usage | None:
        usage = getattr(self.final, "usage", None)
        if usage is None:
            return None  # a server that reports none: 'not reported', not zero
        # `input_tokens` counts the cached ones too; ours keep them apart, as Anthropic's are.
        total = getattr(usage, "input_tokens", None) or 0
        cached = getattr(getattr(usage, "input_tokens_details", None), "cached_tokens", None) or 0
        reasoning = getattr(getattr(usage, "output_tokens_details", None), "reasoning_tokens", None) or 0
        return Usage(
            input_tokens=max(0, total - cached),
            output_tokens=getattr(usage, "output_tokens", None) or 0,
            cache_read_tokens=cached,
            reasoning_tokens=reasoning,
        )

    def _stop(self, calls: bool) -> str:
        if self.refused:
            return "refusal"
        details = getattr(self.final, "incomplete_details", None)
        reason = getattr(details, "reason", None) if details is not None else None
        if getattr(self.final, "status", None) == "incomplete" or reason:
            said = str(reason or "incomplete")
            return {"max_output_tokens": "max_tokens", "content_filter": "refusal"}.get(said, said)
        return "tool_use" if calls else "end_turn"


def _as_dict(obj: Any) -> dict[str, Any]:
    """An SDK object as the JSON the server sent (fields it did not send left out)."""
    if isinstance(obj, dict):
        return obj
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        value = to_dict(mode="json")
        return value if isinstance(value, dict) else {}
    return {}


def _without(item: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in _CONTENT_OF[kind]}


def _reasoning_text(item: dict[str, Any]) -> str:
    summary = [s.get("text", "") for s in item.get("summary") or [] if isinstance(s, dict)]
    if any(summary):
        return "\n\n".join(t for t in summary if t)
    # Compatible servers (vLLM, LM Studio) send the reasoning itself as `reasoning_text` content.
    return "".join(c.get("text", "") for c in item.get("content") or [] if isinstance(c, dict))


def _message_text(item: dict[str, Any]) -> str:
    pieces = []
    for c in item.get("content") or []:
        if isinstance(c, dict):
            pieces.append(str(c.get("text") or c.get("refusal") or ""))
    return "".join(pieces)
