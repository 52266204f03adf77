"""Calling the model from a run: retries with backoff under one deadline, and a visible turn's
stream (its events and the durable snapshots of a partial response)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from typing import Any

from flue_nb.runtime import events as ev
from flue_nb.runtime.core.budget import MIN_ANSWER_TOKENS, Budget, Reservation
from flue_nb.runtime.core.run_settings import RunSettings
from flue_nb.runtime.core.tokens import count_text, message_text
from flue_nb.runtime.core.transcript import Recorder
from flue_nb.runtime.errors import ModelRefusedError, PolicyDeniedError, ProviderError, ProviderHTTPError
from flue_nb.runtime.events import Emit, ErrorInfo, ToolCallInfo
from flue_nb.runtime.messages import AssistantMessage, TextPart, ThinkingPart, Usage
from flue_nb.runtime.policy import current_policy
from flue_nb.runtime.providers import price_of
from flue_nb.runtime.providers.model import (
    Model,
    ModelRequest,
    Price,
    ResponseDone,
    TextChunk,
    ThinkingChunk,
    ToolCallDelta,
    provider_of,
)
from flue_nb.runtime.text import clean_response
from flue_nb.runtime.waits import within

__all__ = ["MAX_TRANSIENT_RETRIES", "PARTIAL_EVERY", "ModelCalls", "collect", "refusal_error"]

MAX_TRANSIENT_RETRIES = 3
_REFUSED_KINDS = frozenset({"auth", "bad_request", "rate_limit", "overloaded", "context_overflow"})
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
    budget: Budget
    ends_at: float | None = None
    """When the submission's `timeout` ends, on `settings.clock` (a backoff never sleeps past it)."""
    is_subagent: bool
    agent: Any

    async def call_model(self, request: ModelRequest, model: Model, *, visible: bool = False) -> AssistantMessage:
        """One model call, retrying transient provider errors with backoff (11.3).

        `visible` calls are turns of the conversation: they emit turn and message events, stream
        text deltas and keep durable snapshots of the partial response. Other calls (the
        compaction summary) are quiet: their text is never shown as the answer.
        """
        failures = 0
        limit = self.settings.model_call_timeout
        key = (self.submission_id, self.turn, request.purpose) if self.submission_id is not None else None
        deadline, tried = self._call_deadline(key, limit)
        while True:
            if time.monotonic() >= deadline:
                self._forget_deadline(key)
                raise self._timed_out(limit, tried + failures)
            held = self._reserve(request, model)
            sent = request if held.max_tokens is None else dataclasses.replace(request, max_tokens=held.max_tokens)
            try:
                call = collect(model, sent) if not visible else self._stream(sent, model)
                response = await within(call, max(0.0, deadline - time.monotonic()))
            except BaseException as exc:
                self._count_lost(held, model, exc, visible=visible)
                if isinstance(exc, asyncio.TimeoutError) and time.monotonic() >= deadline:
                    self._forget_deadline(key)
                    raise self._timed_out(limit, tried + failures + 1) from None
                transient = isinstance(exc, ProviderError) and exc.transient
                if not transient or failures >= MAX_TRANSIENT_RETRIES:
                    if key is not None and transient:
                        # The submission's next attempt makes this call again, within this bound.
                        self.settings.call_deadlines[key] = (deadline, tried + failures + 1)
                    else:
                        self._forget_deadline(key)
                    raise  # a timeout of the model's own, a final error, or the retries spent
                assert isinstance(exc, ProviderError)
                failures += 1
                delay = 2.0 * 2 ** (failures - 1) * (0.8 + 0.4 * self.settings.rng.random())
                if delay >= self._time_left():
                    self._forget_deadline(key)
                    raise  # the submission's timeout comes first: it settles with that
                if delay >= deadline - time.monotonic():
                    self._forget_deadline(key)
                    raise ProviderError(
                        f"{exc.message.rstrip('.')}. Another try would pass the {limit:g} s a model call may take in "
                        "all (the run's `model_call_timeout`), so it is not retried.",
                        kind=exc.kind,
                        final=True,
                    ) from exc
                self.emit(
                    ev.Log(
                        kind="retry",
                        message=f"provider error ({exc.kind}); retry {failures} of {MAX_TRANSIENT_RETRIES} in {delay:.1f}s",
                        error=ErrorInfo(exc.type, exc.message),
                    )
                )
                await self.settings.sleep(delay)
            else:
                self._forget_deadline(key)
                if (response.model is None or price_of(response.model) is None) and price_of(model.info.id):
                    # Stored with the response, so `status()` prices it as the budget did.
                    response.priced_as = model.info.id
                usd = self.budget.settle(held, response, answer_tokens=count_text(message_text(response)))
                self._count_for_user(usd)
                return response

    def _call_deadline(self, key: tuple[str, int, str] | None, limit: float) -> tuple[float, int]:
        now = time.monotonic()
        table = self.settings.call_deadlines
        for old in [k for k, (d, _) in table.items() if d < now - limit]:
            del table[old]  # an unfinished call whose submission went on without it
        if key is not None and key in table:
            return table[key]
        return now + limit, 0

    def _forget_deadline(self, key: tuple[str, int, str] | None) -> None:
        if key is not None:
            self.settings.call_deadlines.pop(key, None)

    def _time_left(self) -> float:
        """Seconds before the submission's own timeout (infinite outside a submission)."""
        return float("inf") if self.ends_at is None else self.ends_at - self.settings.clock()

    @staticmethod
    def _timed_out(limit: float, tries: int) -> ProviderError:
        return ProviderError(
            f"the model gave no complete response within {limit:g} s, {max(1, tries)} "
            f"tr{'y' if tries <= 1 else 'ies'} included; the provider may be hung or overloaded. "
            "Try again later (the limit is the run's `model_call_timeout`).",
            kind="timeout",
            final=True,
        )

    def _count_lost(self, held: Reservation, model: Model, exc: BaseException, *, visible: bool) -> None:
        # A request the provider refused before reading it (auth, a bad request, rate limits,
        # overload, a prompt too long) cost nothing; any other failure sent a prompt that was
        # paid for, and a cut-off stream its answer so far too.
        streamed = "".join(getattr(p, "text", "") for p in self.streaming) if visible else ""
        if isinstance(exc, ProviderError):
            refused = isinstance(exc, ProviderHTTPError) or exc.kind in _REFUSED_KINDS
            if refused and not exc.details.get("mid_stream") and not streamed:
                self.budget.release(held)
                return
        why = exc.kind if isinstance(exc, ProviderError) else type(exc).__name__
        usd = self.budget.lost(held, model=model.info.id, streamed_tokens=count_text(streamed), why=why)
        self._count_for_user(usd)

    def _reserve(self, request: ModelRequest, model: Model) -> Reservation:
        # Before every call, the first included: the prompt as it will be sent, and an answer
        # cap the rest of the budget can pay for.
        who = f"subagent {self.agent.name!r}" if self.is_subagent else "this submission"
        prompt = int(self.settings.tokens().used_tokens(request.messages, system=request.system))
        cap = request.max_tokens or model.info.max_output_tokens
        price = model.info.price or price_of(model.info.id)
        allowed = self._hub_policy(model, prompt, price, cap)
        held = self.budget.reserve(who, prompt_tokens=prompt, price=price, cap=min(cap, allowed))
        if allowed < cap and held.max_tokens is None:
            held.max_tokens = allowed  # the user's spending room, not the submission's budget, lowered it
        return held

    def _hub_policy(self, model: Model, prompt_tokens: int, price: Price | None, cap: int) -> int:
        """The hub policy's word on this call: refused (`policy_denied`) for a model it does not
        allow, or when the user's spending room cannot pay for the prompt and the smallest answer;
        else the answer cap that room leaves."""
        policy = current_policy()
        if policy is None:
            return cap
        policy.check_model(provider_of(model), model.info.id)
        if not policy.limits_spend:
            return cap
        if price is None:
            raise PolicyDeniedError(
                f"policy_denied: the hub policy ({policy.source}) limits spending, and model "
                f"`{model.info.id}` has no known price, so the limit cannot be checked; use a priced model",
                policy=policy.source,
                model=model.info.id,
            )
        prompt_usd = price.cost(Usage(prompt_tokens, 0))
        per_token = (price.cost(Usage(prompt_tokens, 1_000_000)) - prompt_usd) / 1_000_000
        least = min(MIN_ANSWER_TOKENS, cap)
        room = policy.room(self._store(), prompt_usd + per_token * least)
        if room is None or per_token <= 0:
            return cap
        return max(least, min(cap, math.floor((room - prompt_usd) / per_token)))

    def _count_for_user(self, usd: float | None) -> None:
        """Count what a call cost against the user's hub spending limits."""
        policy = current_policy()
        if policy is None or usd is None or not policy.limits_spend:
            return
        try:
            policy.count(self._store(), usd)
        except Exception as exc:  # noqa: BLE001 - a store that is away: the run goes on, and says so
            self.emit(ev.Log(kind="budget", message=f"spend not counted for the hub policy: {exc}"))

    def _store(self) -> Any:
        """The conversation's store (None for a bare run): where the user's spending is counted."""
        recorder: Any = self.recorder
        while hasattr(recorder, "parent"):  # a subagent's records go to its top-level run's
            recorder = recorder.parent
        return getattr(recorder, "store", None)

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
