"""The model protocol: what the turn loop asks of a provider, and what a provider streams back.

A provider turns a `ModelRequest` into a stream of `StreamEvent`s that ends with exactly one
`ResponseDone` holding the assembled `AssistantMessage`. Failures are raised as `ProviderError`
(see errors.py), classified so the loop can decide whether to retry or compact.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Union, runtime_checkable

from flue_nb.runtime.messages import AssistantMessage, ImagePart, Message, Usage, message_images

__all__ = [
    "Model",
    "ModelInfo",
    "ModelRequest",
    "PRICES_AS_OF",
    "Price",
    "ResponseDone",
    "StreamEvent",
    "TextChunk",
    "ThinkingChunk",
    "ToolCallDelta",
    "ToolSpec",
]


PRICES_AS_OF = "2026-11-30"
"""The day the known models' list prices were checked against Anthropic's pricing pages."""


@dataclass(frozen=True, slots=True)
class Price:
    """List prices of a model in USD per million tokens."""

    input: float
    output: float
    cache_write: float
    """A 5-minute cache write, what the provider's `ephemeral` breakpoints buy."""
    cache_read: float
    long_prompt: tuple[int, Price] | None = None
    """(N, rates): a call whose prompt (input and cache tokens) exceeds N tokens pays these
    rates on every token, output included (Claude Haiku 5.5 is priced so)."""

    def cost(self, usage: Usage) -> float:
        """What one call with this usage costs, in USD."""
        prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        rates = self.long_prompt[1] if self.long_prompt is not None and prompt > self.long_prompt[0] else self
        return (
            usage.input_tokens * rates.input
            + usage.output_tokens * rates.output
            + usage.cache_write_tokens * rates.cache_write
            + usage.cache_read_tokens * rates.cache_read
        ) / 1_000_000


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the runtime needs to know about a model to budget its context (and, if known, its cost)."""

    id: str
    context_window: int = 200_000
    max_output_tokens: int = 32_000
    price: Price | None = None
    """List prices, when the model is one whose prices flue_nb knows; None otherwise."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model sees it: name, description and JSON schema of its input."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(slots=True)
class ModelRequest:
    """One model call: the frozen system prompt, the messages, the tools array."""

    system: str
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    max_tokens: int | None = None
    purpose: Literal["turn", "compaction"] = "turn"
    """Why the runtime calls the model; offline models may answer compaction requests differently."""

    @property
    def images(self) -> list[ImagePart]:
        """Every image the request carries (attachments, figures in tool results), in order.

        Each has its bytes in `data`, so an offline model can look at what the agent drew.
        """
        return [p for m in self.messages for p in message_images(m)]


@dataclass(frozen=True, slots=True)
class TextChunk:
    """A piece of assistant text as the provider streams it (observers see `events.TextDelta`)."""

    text: str
    kind: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, slots=True)
class ThinkingChunk:
    """A piece of extended thinking as the provider streams it (observers see `events.ThinkingDelta`)."""

    thinking: str
    kind: Literal["thinking_delta"] = "thinking_delta"


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A tool call has started streaming (its input arrives with `ResponseDone`)."""

    id: str
    name: str
    kind: Literal["tool_call_delta"] = "tool_call_delta"


@dataclass(frozen=True, slots=True)
class ResponseDone:
    """The stream ended; `message` is the whole response with usage and stop reason."""

    message: AssistantMessage
    kind: Literal["done"] = "done"


StreamEvent = Union[TextChunk, ThinkingChunk, ToolCallDelta, ResponseDone]


@runtime_checkable
class Model(Protocol):
    """A model provider. Implementations: Anthropic, `ScriptedModel`, `FunctionModel`."""

    @property
    def info(self) -> ModelInfo:
        """Context window and output limits of this model."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one response; raise `ProviderError` on failure. Cancellation aborts it."""
        ...


def provider_of(model: Any) -> str:
    """The GenAI `gen_ai.provider.name` of a model: `anthropic`, `openai`, or `flue_nb` (offline)."""
    named = getattr(model, "provider_name", None)
    if isinstance(named, str) and named:
        return named
    module = type(model).__module__
    for name in ("anthropic", "openai"):
        if module.endswith(f".providers.{name}"):
            return name
    return "flue_nb"
