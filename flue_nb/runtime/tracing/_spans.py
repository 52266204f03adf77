"""The tracer: one observer of the event union that turns events into GenAI spans and metrics.

Span tree (OpenTelemetry GenAI conventions):

    invoke_agent {agent}            one per submission (SubmissionRunning .. SubmissionSettled)
      chat {model}       CLIENT     one per model call (TurnStart .. TurnEnd)
      execute_tool {tool}           one per tool call (ToolStart .. ToolEnd)
        invoke_agent {subagent}     a delegated task (TaskStart .. TaskEnd), under its `task` call
      compaction {reason}           folding the window (CompactionStart .. CompactionEnd)

Spans export when they end, so the spans of a process killed mid-submission never export; the
recovering owner emits events only for work it does again, so nothing already done appears twice.

Every span and metric point costs the OpenTelemetry SDK a validation of each attribute, so each
span gets its attributes in as few calls as possible (at its start, then once at its end).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flue_nb.runtime import events as ev
from flue_nb.runtime._redact import redact

__all__ = ["SpanObserver"]

CONTENT_BUDGET = 8_000
"""Characters of content one span attribute may carry (the rest is cut, saying so)."""

_Key = tuple[str, str]
_TurnKey = tuple[str, str | None, str | None]


@dataclass
class _Open:
    """A started span and the context its children start in (made once, not per child)."""

    span: Any
    context: Any


@dataclass
class _PendingTask:
    """A delegated task whose span starts with its first event, dated when the task began."""

    name: str
    parent: Any
    attributes: dict[str, Any]
    started: int


class SpanObserver:
    """Consumes every event of the process; keeps the open spans per conversation."""

    def __init__(self, tracer: Any, meter: Any, *, content: bool = False, budget: int = CONTENT_BUDGET) -> None:
        from opentelemetry import trace

        self._trace = trace
        self._tracer = tracer
        self._content = content
        self._budget = budget
        self._lock = threading.Lock()
        self._agents: dict[_Key, _Open] = {}
        self._tasks: dict[_Key, _Open | _PendingTask] = {}
        self._tools: dict[_Key, Any] = {}
        self._chats: dict[_TurnKey, tuple[Any, float, ev.TurnStart]] = {}
        self._compactions: dict[_TurnKey, Any] = {}
        self._inputs: dict[_Key, str] = {}
        self._tags: dict[str, dict[str, Any]] = {}
        self._metric_attrs: dict[tuple[str, str, str | None], tuple[dict[str, Any], ...]] = {}
        self.trace_ids: dict[str, str] = {}
        """Submission id -> the hex trace id of its `invoke_agent` span."""
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration"
        )
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Measures number of input and output tokens used"
        )
        # One handler per span-shaping event type: most events (every streamed delta) shape no
        # span and cost one dictionary lookup.
        self._handlers: dict[type, Callable[[Any], None]] = {
            ev.SubmissionRunning: self._on_running,
            ev.SubmissionRecovery: self._on_recovery,
            ev.SubmissionSettled: self._on_settled,
            ev.TaskStart: self._on_task_start,
            ev.TaskEnd: self._on_task_end,
            ev.TurnStart: self._on_turn_start,
            ev.TurnEnd: self._on_turn_end,
            ev.ToolStart: self._on_tool_start,
            ev.ToolEnd: self._on_tool_end,
            ev.CompactionStart: self._on_compaction_start,
            ev.CompactionEnd: self._on_compaction_end,
        }
        if content:
            self._handlers[ev.SubmissionQueued] = self._on_queued
            self._handlers[ev.MessageEnd] = self._on_message_end

    def tag(self, submission_id: str, attributes: dict[str, Any]) -> None:
        """Attributes for a submission's `invoke_agent` span (the notebook's path and cell id)."""
        with self._lock:
            self._tags.setdefault(submission_id, {}).update(attributes)
            opened = next((o for (_, sid), o in self._agents.items() if sid == submission_id), None)
        if opened is not None:
            opened.span.set_attributes(attributes)

    def __call__(self, event: ev.Event) -> None:
        handle = self._handlers.get(type(event))
        if handle is not None:
            with self._lock:
                handle(event)

    # --- helpers ------------------------------------------------------------------------------

    def _text(self, text: str) -> str:
        text = redact(text)
        if len(text) > self._budget:
            return text[: self._budget] + f"… [cut: {len(text) - self._budget} more characters]"
        return text

    def _parent(self, e: ev.Event) -> Any:
        """The context a span of this event starts in: its task's, else its submission's."""
        cid = e.conversation_id
        if e.task_id is not None and (cid, e.task_id) in self._tasks:
            return self._task_span((cid, e.task_id)).context
        if e.submission_id is not None:
            opened = self._agents.get((cid, e.submission_id))
            return opened.context if opened is not None else None
        return None

    def _task_span(self, key: _Key) -> _Open:
        task = self._tasks[key]
        if isinstance(task, _PendingTask):
            context = self._trace.set_span_in_context(task.parent) if task.parent is not None else None
            task = self._tasks[key] = self._opened(
                self._tracer.start_span(task.name, context, attributes=task.attributes, start_time=task.started)
            )
        return task

    def _opened(self, span: Any) -> _Open:
        return _Open(span, self._trace.set_span_in_context(span))

    def _fail(self, span: Any, message: str) -> None:
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, message))

    # --- the events ---------------------------------------------------------------------------

    def _on_queued(self, e: ev.SubmissionQueued) -> None:
        if e.submission_id:
            self._inputs[(e.conversation_id, e.submission_id)] = e.text

    def _on_running(self, e: ev.SubmissionRunning) -> None:
        if not e.submission_id:
            return
        key = (e.conversation_id, e.submission_id)
        opened = self._agents.get(key)
        if opened is not None:  # a later attempt in the same process
            opened.span.set_attribute("flue.submission.attempts", e.attempt)
            return
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": e.agent,
            "gen_ai.conversation.id": e.conversation_id,
            "flue.submission.id": e.submission_id,
            "flue.submission.attempts": e.attempt,
            **self._tags.get(e.submission_id, {}),
        }
        text = self._inputs.pop(key, "")
        if text:
            attrs["gen_ai.input.messages"] = json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": self._text(text)}]}]
            )
        span = self._tracer.start_span(f"invoke_agent {e.agent}", attributes=attrs)
        self._agents[key] = self._opened(span)
        self.trace_ids[e.submission_id] = format(span.get_span_context().trace_id, "032x")

    def _on_recovery(self, e: ev.SubmissionRecovery) -> None:
        if e.submission_id:
            self._tags.setdefault(e.submission_id, {}).update(
                {"flue.submission.recovered": True, "flue.submission.crashed_attempts": e.attempts}
            )

    def _on_settled(self, e: ev.SubmissionSettled) -> None:
        if not e.submission_id:
            return
        opened = self._agents.pop((e.conversation_id, e.submission_id), None)
        self._tags.pop(e.submission_id, None)
        if opened is None:
            return
        attrs: dict[str, Any] = {"flue.submission.outcome": e.outcome, "flue.submission.recovered": bool(e.recovered)}
        if e.error is not None:
            attrs["error.type"] = e.error.type
        opened.span.set_attributes(attrs)
        if e.error is not None:
            self._fail(opened.span, e.error.message)
        opened.span.end()

    def _on_task_start(self, e: ev.TaskStart) -> None:
        if not e.task_id:
            return
        # Started when the subagent first does something: a task that a recovering owner finds
        # already answered in its records ends at once and gets no span again.
        cid = e.conversation_id
        parent = self._tools.get((cid, e.task_id))
        if parent is None:
            opened = self._agents.get((cid, e.submission_id or ""))
            parent = opened.span if opened is not None else None
        attrs = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": e.agent,
            "gen_ai.conversation.id": cid,
            "flue.task.id": e.task_id,
            "flue.task.depth": e.depth,
        }
        self._tasks[(cid, e.task_id)] = _PendingTask(f"invoke_agent {e.agent}", parent, attrs, time.time_ns())

    def _on_task_end(self, e: ev.TaskEnd) -> None:
        if not e.task_id:
            return
        key = (e.conversation_id, e.task_id)
        task = self._tasks.get(key)
        # A task that failed before doing anything still shows, with its error.
        span = self._task_span(key).span if task is not None and (e.is_error or isinstance(task, _Open)) else None
        self._tasks.pop(key, None)
        if span is not None:
            if e.is_error:
                span.set_attribute("error.type", "task_failed")
                self._fail(span, e.error or "")
            span.end()

    def _on_turn_start(self, e: ev.TurnStart) -> None:
        if e.model is None:
            return
        turn_key = (e.conversation_id, e.submission_id, e.task_id)
        stale = self._chats.pop(turn_key, None)
        if stale is not None:  # the try before a retry: it failed
            stale[0].set_attribute("error.type", "retried")
            self._fail(stale[0], "the provider call failed and was retried")
            stale[0].end()
        span = self._tracer.start_span(
            f"chat {e.model}",
            self._parent(e),
            self._trace.SpanKind.CLIENT,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": e.provider or "flue_nb",
                "gen_ai.request.model": e.model,
                "gen_ai.conversation.id": e.conversation_id,
            },
        )
        self._chats[turn_key] = (span, time.monotonic(), e)

    def _on_message_end(self, e: ev.MessageEnd) -> None:
        if e.role != "assistant":
            return
        open_chat = self._chats.get((e.conversation_id, e.submission_id, e.task_id))
        if open_chat is not None:
            open_chat[0].set_attribute(
                "gen_ai.output.messages",
                json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": self._text(e.text)}]}]),
            )

    def _on_turn_end(self, e: ev.TurnEnd) -> None:
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
        if e.stop_reason == "refusal":
            attrs["error.type"] = "model_refused"
        span.set_attributes(attrs)
        if e.stop_reason == "refusal":
            self._fail(span, "the model refused")
        span.end()
        duration, inputs, outputs = self._metric_attributes(start.provider or "flue_nb", start.model or "", e.model)
        self._duration.record(time.monotonic() - started, duration)
        if u is not None:
            self._tokens.record(u.input_tokens, inputs)
            self._tokens.record(u.output_tokens, outputs)

    def _metric_attributes(self, provider: str, model: str, response_model: str | None) -> tuple[dict[str, Any], ...]:
        """The attributes of a chat's duration, input-token and output-token points (made once per model)."""
        key = (provider, model, response_model)
        made = self._metric_attrs.get(key)
        if made is None:
            base = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider, "gen_ai.request.model": model}
            if response_model:
                base["gen_ai.response.model"] = response_model
            made = self._metric_attrs[key] = (
                base,
                {**base, "gen_ai.token.type": "input"},
                {**base, "gen_ai.token.type": "output"},
            )
        return made

    def _on_tool_start(self, e: ev.ToolStart) -> None:
        attrs = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": e.name,
            "gen_ai.tool.call.id": e.call_id,
            "gen_ai.conversation.id": e.conversation_id,
        }
        if self._content:
            attrs["gen_ai.tool.call.arguments"] = self._text(json.dumps(dict(e.input), default=str))
        self._tools[(e.conversation_id, e.call_id)] = self._tracer.start_span(
            f"execute_tool {e.name}", self._parent(e), attributes=attrs
        )

    def _on_tool_end(self, e: ev.ToolEnd) -> None:
        span = self._tools.pop((e.conversation_id, e.call_id), None)
        if span is None:
            return
        attrs: dict[str, Any] = {}
        if self._content:
            attrs["gen_ai.tool.call.result"] = self._text(e.content)
        if e.is_error:
            attrs["error.type"] = "tool_error" if e.ended == "completed" else e.ended
        if attrs:
            span.set_attributes(attrs)
        if e.is_error:
            self._fail(span, "the tool call failed")
        span.end()

    def _on_compaction_start(self, e: ev.CompactionStart) -> None:
        self._compactions[(e.conversation_id, e.submission_id, e.task_id)] = self._tracer.start_span(
            f"compaction {e.reason}",
            self._parent(e),
            attributes={
                "gen_ai.operation.name": "compaction",
                "gen_ai.conversation.id": e.conversation_id,
                "flue.compaction.reason": e.reason,
                "flue.compaction.estimated_tokens": e.estimated_tokens,
            },
        )

    def _on_compaction_end(self, e: ev.CompactionEnd) -> None:
        span = self._compactions.pop((e.conversation_id, e.submission_id, e.task_id), None)
        if span is None:
            return
        attrs: dict[str, Any] = {
            "flue.compaction.messages_before": e.messages_before,
            "flue.compaction.messages_after": e.messages_after,
            "flue.compaction.tokens_before": e.tokens_before,
            "flue.compaction.tokens_after": e.tokens_after,
            "flue.compaction.skipped": e.skipped,
        }
        if e.is_error:
            attrs["error.type"] = "compaction_failed"
        span.set_attributes(attrs)
        if e.is_error:
            self._fail(span, e.error or "")
        span.end()
