"""Calling the model from a run: retries with backoff under one deadline, and a visible turn's
stream (its events and the durable snapshots of a partial response)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from flue_nb.runtime import events as ev
from flue_nb.runtime.core.run_settings import RunSettings
from flue_nb.runtime.core.transcript import Recorder
from flue_nb.runtime.errors import ModelRefusedError, ProviderError
from flue_nb.runtime.events import Emit, ErrorInfo, ToolCallInfo
from flue_nb.runtime.messages import AssistantMessage, TextPart, ThinkingPart
from flue_nb.runtime.providers.model import (
    Model,
    ModelRequest,
    ResponseDone,
    TextChunk,
    ThinkingChunk,
    ToolCallDelta,
    provider_of,
)
from flue_nb.runtime.text import clean_response

__all__ = ["MAX_TRANSIENT_RETRIES", "PARTIAL_EVERY", "ModelCalls", "collect", "refusal_error"]

MAX_TRANSIENT_RETRIES = 3
PARTIAL_EVERY = 0.25
"""Seconds between durable snapshots of a streaming response (what a crash can keep)."""


class ModelCalls:
    """The model-calling half of `AgentRun` (what it needs of the run is declared here)."""

    emit: Emit
    settings: RunSettings
    recorder: Recorder
    submission_id: str | None
    turn: int
    """Responses this submission has had; a visible call's stream numbers the next one."""
    streaming: list[Any]
    """Parts of the response being streamed (what an abort keeps)."""

    async def call_model(self, request: ModelRequest, model: Model, *, visible: bool = False) -> AssistantMessage:
        """One model call, retrying transient provider errors with backoff (11.3).

        `visible` calls are turns of the conversation: they emit turn and message events, stream
        text deltas and keep durable snapshots of the partial response. Other calls (the
        compaction summary) are quiet: their text is never shown as the answer.
        """
        failures = 0
        limit = self.settings.model_call_timeout
        deadline = time.monotonic() + limit
        while True:
            try:
                call = collect(model, request) if not visible else self._stream(request, model)
                return await asyncio.wait_for(call, max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                if time.monotonic() < deadline:
                    raise  # a timeout of the model's own, not this call's deadline
                raise ProviderError(
                    f"the model gave no complete response within {limit:g} s, {failures + 1} "
                    f"tr{'y' if failures == 0 else 'ies'} included; the provider may be hung or overloaded. "
                    "Try again later (the limit is the run's `model_call_timeout`).",
                    kind="timeout",
                    final=True,
                ) from None
            except ProviderError as exc:
                if not exc.transient or failures >= MAX_TRANSIENT_RETRIES:
                    raise
                failures += 1
                delay = 2.0 * 2 ** (failures - 1) * (0.8 + 0.4 * self.settings.rng.random())
                if time.monotonic() + delay >= deadline:
                    raise  # no time left for another try: the error as it is
                self.emit(
                    ev.Log(
                        kind="retry",
                        message=f"provider error ({exc.kind}); retry {failures} of {MAX_TRANSIENT_RETRIES} in {delay:.1f}s",
                        error=ErrorInfo(exc.type, exc.message),
                    )
                )
                await self.settings.sleep(delay)

    async def _stream(self, request: ModelRequest, model: Model) -> AssistantMessage:
        turn = self.turn + 1
        turn_id = f"t{turn}"
        self.emit(ev.TurnStart(turn=turn, turn_id=turn_id, model=model.info.id, provider=provider_of(model)))
        self.emit(ev.MessageStart(role="assistant", turn_id=turn_id))
        self.streaming = []
        text: list[str] = []
        thinking: list[str] = []
        last_snapshot = self.settings.clock()
        stream_id = f"{self.submission_id}:{turn}:{id(request)}:{last_snapshot}"
        done: AssistantMessage | None = None
        snapshotted = False  # an earlier attempt's snapshot was kept or cleared before this one
        try:
            async for part in model.stream(request):
                if isinstance(part, TextChunk):
                    text.append(part.text)
                    self.emit(ev.TextDelta(delta=part.text, turn_id=turn_id))
                elif isinstance(part, ThinkingChunk):
                    thinking.append(part.thinking)
                    self.emit(ev.ThinkingDelta(delta=part.thinking, turn_id=turn_id))
                elif isinstance(part, ToolCallDelta):
                    self.emit(
                        ev.Log(
                            kind="tool_call_streaming",
                            message=f"the model is writing a `{part.name}` call",
                            call_id=part.id,
                            name=part.name,
                            turn_id=turn_id,
                        )
                    )
                elif isinstance(part, ResponseDone):
                    done = clean_response(part.message)  # always storable (runtime._text)
                self.streaming = [ThinkingPart("".join(thinking))] if thinking else []
                if text:
                    self.streaming.append(TextPart("".join(text)))
                now = self.settings.clock()
                if now - last_snapshot >= PARTIAL_EVERY and self.streaming:
                    last_snapshot, snapshotted = now, True
                    self.recorder.partial(
                        {"text": "".join(text), "thinking": "".join(thinking), "stream_id": stream_id}
                    )
        finally:
            if snapshotted:  # a stream that wrote none has nothing to clear: one write less a turn
                self.recorder.partial(None)
        if done is None:
            raise ProviderError("the model's stream ended without a complete response", kind="connection")
        self.streaming = []
        self.turn = turn
        self.emit(
            ev.MessageEnd(
                role="assistant",
                turn_id=turn_id,
                text=done.text,
                tool_calls=tuple(ToolCallInfo(c.id, c.name, c.input) for c in done.tool_calls),
                usage=done.usage,
            )
        )
        return done


def refusal_error(response: AssistantMessage) -> ModelRefusedError:
    """The error for a response the model refused, with the API's category and explanation."""
    details = response.stop_details or {}
    category, explanation = details.get("category"), details.get("explanation")
    why = f" (category `{category}`)" if category else ""
    said = f": {explanation}" if explanation else "; the API gave no explanation"
    return ModelRefusedError(
        f"{response.model or 'the model'} refused to answer{why}{said}. Rephrase the request "
        "or start a new conversation (`--new`): the refused message stays in this one.",
        category=category,
        explanation=explanation,
    )


async def collect(model: Model, request: ModelRequest) -> AssistantMessage:
    """A model call whose stream nobody watches: only the final message counts."""
    async for part in model.stream(request):
        if isinstance(part, ResponseDone):
            return part.message
    raise ProviderError("the model's stream ended without a complete response", kind="connection")
