"""The tracer: one observer of the event union that turns events into GenAI spans and metrics.

Span tree (OpenTelemetry GenAI conventions):

    invoke_agent {agent}            one per submission (SubmissionRunning .. SubmissionSettled)
      chat {model}       CLIENT     one per model call (TurnStart .. TurnEnd)
      execute_tool {tool}           one per tool call (ToolStart .. ToolEnd)
        invoke_agent {subagent}     a delegated task (TaskStart .. TaskEnd), under its `task` call
      compaction {reason}           folding the window (CompactionStart .. CompactionEnd)

Spans export when they end, so the spans of a process killed mid-submission never export; the
recovering owner emits events only for work it does again, so nothing already done appears twice.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from flue_nb.runtime import events as ev
from flue_nb.runtime._redact import redact

__all__ = ["SpanObserver"]

CONTENT_BUDGET = 8_000
"""Characters of content one span attribute may carry (the rest is cut, saying so)."""


_SHAPING = frozenset(
    {
        ev.SubmissionQueued,
        ev.SubmissionRunning,
        ev.SubmissionRecovery,
        ev.SubmissionSettled,
        ev.TaskStart,
        ev.TaskEnd,
        ev.TurnStart,
        ev.MessageEnd,
        ev.TurnEnd,
        ev.ToolStart,
        ev.ToolEnd,
        ev.CompactionStart,
        ev.CompactionEnd,
    }
)
"""The event types `SpanObserver._handle` acts on."""


class SpanObserver:
    """Consumes every event of the process; keeps the open spans per conversation."""

    def __init__(self, tracer: Any, meter: Any, *, content: bool = False, budget: int = CONTENT_BUDGET) -> None:
        from opentelemetry import trace

        self._trace = trace
        self._tracer = tracer
        self._content = content
        self._budget = budget
        self._lock = threading.Lock()
        self._agents: dict[tuple[str, str], Any] = {}
        self._tasks: dict[tuple[str, str], Any] = {}
        self._tools: dict[tuple[str, str], Any] = {}
        self._chats: dict[tuple[str, str | None, str | None], tuple[Any, float, ev.TurnStart]] = {}
        self._compactions: dict[tuple[str, str | None, str | None], Any] = {}
        self._inputs: dict[tuple[str, str], str] = {}
        self._tags: dict[str, dict[str, Any]] = {}
        self.trace_ids: dict[str, str] = {}
        """Submission id -> the hex trace id of its `invoke_agent` span."""
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration"
        )
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Measures number of input and output tokens used"
        )

    def tag(self, submission_id: str, attributes: dict[str, Any]) -> None:
        """Attributes for a submission's `invoke_agent` span (the notebook's path and cell id)."""
        with self._lock:
            self._tags.setdefault(submission_id, {}).update(attributes)
            span = self._agents.get(self._key_of(submission_id))
        if span is not None:
            span.set_attributes(attributes)

    def _key_of(self, submission_id: str) -> tuple[str, str]:
        for key in self._agents:
            if key[1] == submission_id:
                return key
        return ("", submission_id)

    def __call__(self, event: ev.Event) -> None:
        if type(event) not in _SHAPING:  # most events (every streamed delta) shape no span
            return
        with self._lock:
            self._handle(event)

    # --- helpers ------------------------------------------------------------------------------

    def _text(self, text: str) -> str:
        text = redact(text)
        if len(text) > self._budget:
            return text[: self._budget] + f"… [cut: {len(text) - self._budget} more characters]"
        return text

    def _parent(self, e: ev.Event) -> Any:
        cid = e.conversation_id
        if e.task_id is not None and (cid, e.task_id) in self._tasks:
            return self._task_span((cid, e.task_id))
        if e.submission_id is not None:
            return self._agents.get((cid, e.submission_id))
        return None

    def _task_span(self, key: tuple[str, str]) -> Any:
        task = self._tasks[key]
        if isinstance(task, tuple):  # its first event: the span starts when the task did
            name, parent, attrs, started = task
            task = self._tasks[key] = self._start(name, parent, attrs, start_time=started)
        return task

    def _start(
        self, name: str, parent: Any, attributes: dict[str, Any], *, kind: Any = None, start_time: int | None = None
    ) -> Any:
        ctx = self._trace.set_span_in_context(parent) if parent is not None else None
        kw: dict[str, Any] = {"context": ctx, "attributes": attributes}
        if start_time is not None:
            kw["start_time"] = start_time
        if kind is not None:
            kw["kind"] = kind
        return self._tracer.start_span(name, **kw)

    def _fail(self, span: Any, error_type: str, message: str) -> None:
        span.set_attribute("error.type", error_type)
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, message))

    # --- the events ---------------------------------------------------------------------------

    def _handle(self, e: ev.Event) -> None:  # noqa: C901 - one branch per span-shaping event
        cid = e.conversation_id
        match e:
            case ev.SubmissionQueued(text=text) if self._content and e.submission_id:
                self._inputs[(cid, e.submission_id)] = text
            case ev.SubmissionRunning(agent=agent, attempt=attempt) if e.submission_id:
                key = (cid, e.submission_id)
                span = self._agents.get(key)
                if span is None:
                    attrs: dict[str, Any] = {
                        "gen_ai.operation.name": "invoke_agent",
                        "gen_ai.agent.name": agent,
                        "gen_ai.conversation.id": cid,
                        "flue.submission.id": e.submission_id,
                        **self._tags.get(e.submission_id, {}),
                    }
                    text = self._inputs.pop(key, "")
                    if text:
                        attrs["gen_ai.input.messages"] = json.dumps(
                            [{"role": "user", "parts": [{"type": "text", "content": self._text(text)}]}]
                        )
                    span = self._agents[key] = self._start(f"invoke_agent {agent}", None, attrs)
                    self.trace_ids[e.submission_id] = format(span.get_span_context().trace_id, "032x")
                span.set_attribute("flue.submission.attempts", attempt)
            case ev.SubmissionRecovery(attempts=attempts) if e.submission_id:
                self._tags.setdefault(e.submission_id, {}).update(
                    {"flue.submission.recovered": True, "flue.submission.crashed_attempts": attempts}
                )
            case ev.SubmissionSettled(outcome=outcome, error=error) if e.submission_id:
                span = self._agents.pop((cid, e.submission_id), None)
                self._tags.pop(e.submission_id, None)
                if span is None:
                    return
                span.set_attribute("flue.submission.outcome", outcome)
                span.set_attribute("flue.submission.recovered", bool(e.recovered))
                if error is not None:
                    self._fail(span, error.type, error.message)
                span.end()
            case ev.TaskStart(agent=agent, depth=depth) if e.task_id:
                # Started when the subagent first does something: a task that a recovering owner
                # finds already answered in its records ends at once and gets no span again.
                parent = self._tools.get((cid, e.task_id)) or self._agents.get((cid, e.submission_id or ""))
                attrs = {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": agent,
                    "gen_ai.conversation.id": cid,
                    "flue.task.id": e.task_id,
                    "flue.task.depth": depth,
                }
                self._tasks[(cid, e.task_id)] = (f"invoke_agent {agent}", parent, attrs, time.time_ns())
            case ev.TaskEnd(is_error=is_error, error=error) if e.task_id:
                key = (cid, e.task_id)
                # A task that failed before doing anything still shows, with its error.
                span = (
                    self._task_span(key)
                    if key in self._tasks and (is_error or not isinstance(self._tasks[key], tuple))
                    else None
                )
                self._tasks.pop(key, None)
                if span is not None:
                    if is_error:
                        self._fail(span, "task_failed", error or "")
                    span.end()
            case ev.TurnStart(model=model, provider=provider) if model is not None:
                turn_key = (cid, e.submission_id, e.task_id)
                stale = self._chats.pop(turn_key, None)
                if stale is not None:  # the try before a retry: it failed
                    self._fail(stale[0], "retried", "the provider call failed and was retried")
                    stale[0].end()
                span = self._start(
                    f"chat {model}",
                    self._parent(e),
                    {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.provider.name": provider or "flue_nb",
                        "gen_ai.request.model": model,
                        "gen_ai.conversation.id": cid,
                    },
                    kind=self._trace.SpanKind.CLIENT,
                )
                self._chats[turn_key] = (span, time.monotonic(), e)
            case ev.MessageEnd(role="assistant", text=text) if self._content:
                open_chat = self._chats.get((cid, e.submission_id, e.task_id))
                if open_chat is not None:
                    open_chat[0].set_attribute(
                        "gen_ai.output.messages",
                        json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": self._text(text)}]}]),
                    )
            case ev.TurnEnd():
                self._end_chat(e)
            case ev.ToolStart(call_id=call_id, name=name, input=args):
                attrs = {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": call_id,
                    "gen_ai.conversation.id": cid,
                }
                if self._content:
                    attrs["gen_ai.tool.call.arguments"] = self._text(json.dumps(dict(args), default=str))
                self._tools[(cid, call_id)] = self._start(f"execute_tool {name}", self._parent(e), attrs)
            case ev.ToolEnd(call_id=call_id, is_error=is_error, content=content, ended=ended):
                span = self._tools.pop((cid, call_id), None)
                if span is None:
                    return
                if self._content:
                    span.set_attribute("gen_ai.tool.call.result", self._text(content))
                if is_error:
                    self._fail(span, "tool_error" if ended == "completed" else ended, "the tool call failed")
                span.end()
            case ev.CompactionStart(reason=reason, estimated_tokens=tokens):
                self._compactions[(cid, e.submission_id, e.task_id)] = self._start(
                    f"compaction {reason}",
                    self._parent(e),
                    {
                        "gen_ai.operation.name": "compaction",
                        "gen_ai.conversation.id": cid,
                        "flue.compaction.reason": reason,
                        "flue.compaction.estimated_tokens": tokens,
                    },
                )
            case ev.CompactionEnd():
                span = self._compactions.pop((cid, e.submission_id, e.task_id), None)
                if span is None:
                    return
                span.set_attributes(
                    {
                        "flue.compaction.messages_before": e.messages_before,
                        "flue.compaction.messages_after": e.messages_after,
                        "flue.compaction.tokens_before": e.tokens_before,
                        "flue.compaction.tokens_after": e.tokens_after,
                        "flue.compaction.skipped": e.skipped,
                    }
                )
                if e.is_error:
                    self._fail(span, "compaction_failed", e.error or "")
                span.end()
            case _:
                pass

    def _end_chat(self, e: ev.TurnEnd) -> None:
        opened = self._chats.pop((e.conversation_id, e.submission_id, e.task_id), None)
        if opened is None:
            return
        span, started, start = opened
        attrs: dict[str, Any] = {}
        if e.model:
            attrs["gen_ai.response.model"] = e.model
        if e.stop_reason:
            attrs["gen_ai.response.finish_reasons"] = (e.stop_reason,)
        u = e.usage
        if u is not None:
            attrs["gen_ai.usage.input_tokens"] = u.input_tokens
            attrs["gen_ai.usage.output_tokens"] = u.output_tokens
            attrs["gen_ai.usage.cache_read.input_tokens"] = u.cache_read_tokens
            attrs["gen_ai.usage.cache_creation.input_tokens"] = u.cache_write_tokens
        span.set_attributes(attrs)
        if e.stop_reason == "refusal":
            self._fail(span, "model_refused", "the model refused")
        span.end()
        metric = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": start.provider or "flue_nb",
            "gen_ai.request.model": start.model or "",
        }
        if e.model:
            metric["gen_ai.response.model"] = e.model
        self._duration.record(time.monotonic() - started, metric)
        if u is not None:
            self._tokens.record(u.input_tokens, {**metric, "gen_ai.token.type": "input"})
            self._tokens.record(u.output_tokens, {**metric, "gen_ai.token.type": "output"})
