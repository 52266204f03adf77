"""Offline models for tests, demos and CI: `ScriptedModel` and `FunctionModel`.

Both stream like a real provider (text in small deltas, then one `ResponseDone`) and implement
the `Model` protocol, so an agent behaves the same with them as with Claude.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import itertools
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from flue_nb.runtime.errors import (
    ConfigError,
    ContextOverflowError,
    ProviderError,
    ProviderErrorKind,
    ProviderHTTPError,
    raised_at,
)
from flue_nb.runtime.messages import AssistantMessage, TextPart, ThinkingPart, ToolCall, Usage
from flue_nb.runtime.providers.model import (
    ModelInfo,
    ModelRequest,
    ResponseDone,
    StreamEvent,
    TextChunk,
    ThinkingChunk,
    ToolCallDelta,
)

__all__ = ["Fail", "FunctionModel", "Reply", "ScriptedModel", "fail", "reply", "tool_call"]

_call_ids = itertools.count(1)


@dataclass(slots=True)
class Reply:
    """What the model 'says' in one response: text and/or tool calls."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    thinking: str | None = None
    usage: Usage | None = None
    stop_reason: str | None = None


@dataclass(slots=True)
class Fail:
    """A provider error the model raises instead of answering."""

    kind: ProviderErrorKind
    message: str | None = None
    status: int | None = None
    after_text: str | None = None
    """Stream this much text first, then fail (a stream cut off half-way)."""

    def error(self) -> ProviderError:
        """The exception a real provider would raise."""
        msg = self.message or f"scripted {self.kind} error"
        if self.kind == "context_overflow":
            return ContextOverflowError(msg)
        if self.status is not None:
            return ProviderHTTPError(msg, status=self.status, kind=self.kind)
        return ProviderError(msg, kind=self.kind)


Step = Union[Reply, Fail, str]


def tool_call(name: str, _id: str | None = None, /, **input: Any) -> ToolCall:
    """A tool call for a scripted reply: `tool_call("read", path="a.txt")`."""
    return ToolCall(_id or f"call_{next(_call_ids)}", name, input)


def reply(
    text: str = "",
    *calls: ToolCall,
    thinking: str | None = None,
    usage: Usage | tuple[int, int] | None = None,
) -> Reply:
    """A scripted response: `reply("Looking.", tool_call("read", path="a.txt"))`."""
    if isinstance(usage, tuple):
        usage = Usage(*usage)
    return Reply(text, list(calls), thinking, usage)


def fail(
    kind: ProviderErrorKind, message: str | None = None, *, status: int | None = None, after_text: str | None = None
) -> Fail:
    """A scripted provider error of a named kind (overloaded, rate_limit, context_overflow, ...)."""
    return Fail(kind, message, status, after_text)


_WORD = re.compile(r"\S+\s*|\s+")


async def _stream_step(step: Step, model_id: str, delay: float) -> AsyncIterator[StreamEvent]:
    if isinstance(step, str):
        step = Reply(step)
    if isinstance(step, Fail):
        if step.after_text:
            for chunk in _WORD.findall(step.after_text):
                yield TextChunk(chunk)
                if delay:
                    await asyncio.sleep(delay)
        raise step.error()
    parts: list[Any] = []
    if step.thinking:
        yield ThinkingChunk(step.thinking)
        parts.append(ThinkingPart(step.thinking, "scripted"))
    if step.text:
        for chunk in _WORD.findall(step.text):
            yield TextChunk(chunk)
            if delay:
                await asyncio.sleep(delay)
        parts.append(TextPart(step.text))
    for call in step.tool_calls:
        yield ToolCallDelta(call.id, call.name)
        parts.append(ToolCall(call.id, call.name, copy.deepcopy(call.input)))
    stop = step.stop_reason or ("tool_use" if step.tool_calls else "end_turn")
    yield ResponseDone(AssistantMessage(parts, step.usage, stop, model_id))


def snapshot(request: ModelRequest) -> ModelRequest:
    """A copy of a request that later turns cannot change."""
    # The loop keeps appending to its message list; a recorded request must not change after.
    return ModelRequest(
        request.system, list(request.messages), list(request.tools), request.max_tokens, request.purpose
    )


class ScriptedModel:
    """A model that answers from a script, one step per request, recording every request.

    Steps are `reply(...)`, `fail(...)` or plain strings. `summary` (optional) answers
    compaction requests without consuming a step.
    """

    def __init__(
        self,
        steps: Sequence[Step],
        *,
        id: str = "scripted",
        context_window: int = 200_000,
        max_output_tokens: int = 32_000,
        summary: str | None = None,
        delay: float = 0.0,
    ) -> None:
        self.steps = list(steps)
        self.requests: list[ModelRequest] = []
        self.summary = summary
        self.delay = delay
        self._next = 0
        self._info = ModelInfo(id, context_window, max_output_tokens)

    @property
    def info(self) -> ModelInfo:
        """Context window and output limits this script pretends to have."""
        return self._info

    @property
    def remaining(self) -> int:
        """Steps not yet used."""
        return len(self.steps) - self._next

    def assert_complete(self) -> None:
        """Fail if the script has steps the agent never asked for."""
        if self._next < len(self.steps):
            left = self.steps[self._next :]
            raise AssertionError(f"ScriptedModel: {len(left)} step(s) never used: {left!r}")

    def __repr__(self) -> str:
        return f"ScriptedModel({len(self.steps)} steps, {self.remaining} left)"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Answer the request with the next step."""
        self.requests.append(snapshot(request))
        if request.purpose == "compaction" and self.summary is not None:
            step: Step = Reply(self.summary)
        else:
            if self._next >= len(self.steps):
                raise ConfigError(
                    f"ScriptedModel ran out of steps at request #{len(self.requests)} "
                    f"({request.purpose}); add a step to the script"
                )
            step = self.steps[self._next]
            self._next += 1
        async for event in _stream_step(step, self._info.id, self.delay):
            yield event


def _function_error(fn: Any, exc: Exception) -> ProviderError:
    name = getattr(fn, "__name__", "fn")
    return ProviderError(
        f"FunctionModel's function `{name}` raised {type(exc).__name__}: {exc}{raised_at(exc)}",
        kind="other",
    )


class FunctionModel:
    """A model whose responses come from `fn(request)` (sync or async), returning a step."""

    def __init__(
        self,
        fn: Callable[[ModelRequest], Any],
        *,
        id: str = "function",
        context_window: int = 200_000,
        max_output_tokens: int = 32_000,
        delay: float = 0.0,
    ) -> None:
        self.fn = fn
        self.requests: list[ModelRequest] = []
        self.delay = delay
        self._info = ModelInfo(id, context_window, max_output_tokens)

    @property
    def info(self) -> ModelInfo:
        """Context window and output limits this model pretends to have."""
        return self._info

    def __repr__(self) -> str:
        return f"FunctionModel({getattr(self.fn, '__name__', 'fn')})"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Answer with whatever `fn` returns for this request."""
        self.requests.append(snapshot(request))
        try:
            step = self.fn(request)
            if inspect.isawaitable(step):
                step = await step
        except Exception as exc:
            # The user's function is the model here: its bug is a model error (not retried)
            # that points at the user's line, not an internal error of the runtime.
            raise _function_error(self.fn, exc) from exc
        if not isinstance(step, (Reply, Fail, str)):
            raise ConfigError(f"FunctionModel's function returned {step!r}; return reply(...), fail(...) or a str")
        async for event in _stream_step(step, self._info.id, self.delay):
            yield event
