"""The tracer: one observer of the event union that turns events into GenAI spans and metrics.

Span tree (OpenTelemetry GenAI conventions):

    invoke_agent {agent}            one per submission (SubmissionRunning .. SubmissionSettled)
      chat {model}       CLIENT     one per model call (TurnStart .. TurnEnd)
      execute_tool {tool}           one per tool call (ToolStart .. ToolEnd)
        invoke_agent {subagent}     a delegated task (TaskStart .. TaskEnd), under its `task` call
      compaction {reason}           folding the window (CompactionStart .. CompactionEnd)

Spans export when they end, so the spans of a process killed mid-submission never export; the
recovering owner emits events only for work it does again, so nothing already done appears twice.

The SDK's work (span creation, attribute checks, metric records) is most of the cost, and it
costs about three times as much interleaved with the loop's own steps, caches cold, as it does in
a batch. So an event only joins a queue (stamped with its time) on the loop's thread, and a
thread of the tracer's hands the queue to the SDK every `delay` seconds, as the SDK's own batch
span processor does with finished spans; spans carry the events' times. `flush()` (and
`trace_id()`, and the process's exit) hand over whatever waits at once.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flue_nb.runtime import events as ev
from flue_nb.runtime.redact import redact

__all__ = ["SpanObserver"]

CONTENT_BUDGET = 8_000
"""Characters of content one span attribute may carry (the rest is cut, saying so)."""

KEPT_TRACE_IDS = 10_000
"""Submissions whose trace id `trace_id()` still knows (a cell asks for its own as it ends)."""

DELAY = 0.2
"""Seconds an event waits before the tracer's thread hands it to the SDK, with those after it."""

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


@dataclass
class _Chat:
    """A model call under way. Its span is made when it ends: nothing starts under a chat span,
    and one SDK call with every attribute costs about a fifth less than a start, a later
    `set_attributes` and an end."""

    start: ev.TurnStart
    parent: Any
    attributes: dict[str, Any]
    started: int


_observers: weakref.WeakSet[SpanObserver] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # The parent hands its own queue over; a child must not do it again, and the lock or the
    # thread state it inherited may belong to the parent's tracer thread, which the child lacks.
    for observer in list(_observers):
        observer._queue.clear()
        observer._lock = threading.Lock()
        observer._wake = threading.Event()
        observer._waiting = False
        observer._thread = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class SpanObserver:
    """Consumes every event of the process; keeps the open spans per conversation."""

    def __init__(
        self, tracer: Any, meter: Any, *, content: bool = False, budget: int = CONTENT_BUDGET, delay: float = DELAY
    ) -> None:
        from opentelemetry import trace

        self._trace = trace
        self._tracer = tracer
        self._content = content
        self._budget = budget
        self._delay = delay
        self._lock = threading.Lock()
        self._queue: deque[tuple[int, ev.Event]] = deque()
        self._waiting = False
        """An event waits and the thread knows (set on the loop's thread, cleared on the tracer's)."""
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._now = 0
        """The time of the event being handled, ns since the epoch."""
        _observers.add(self)
        self._agents: dict[_Key, _Open] = {}
        self._tasks: dict[_Key, _Open | _PendingTask] = {}
        self._tools: dict[_Key, Any] = {}
        self._chats: dict[_TurnKey, _Chat] = {}
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
            self._drain()
            self._tags.setdefault(submission_id, {}).update(attributes)
            opened = next((o for (_, sid), o in self._agents.items() if sid == submission_id), None)
            if opened is not None:
                opened.span.set_attributes(attributes)

    def trace_id(self, submission_id: str) -> str | None:
        """The hex trace id of a submission's `invoke_agent` span, once it started."""
        self.flush()
        return self.trace_ids.get(submission_id)

    def __call__(self, event: ev.Event) -> None:
        if type(event) not in self._handlers:  # most events (every streamed delta) shape no span
            return
        self._queue.append((time.time_ns(), event))
        if not self._waiting:
            self._waiting = True
            if self._thread is None:  # the first event (or the first after a fork)
                self._thread = threading.Thread(target=self._hand_over, name="flue-tracing", daemon=True)
                self._thread.start()
            self._wake.set()

    def flush(self) -> None:
        """Hand every waiting event to the SDK now."""
        with self._lock:
            self._drain()

    def close(self) -> None:
        """Flush, and stop the tracer's thread."""
        self._closed = True
        self.flush()
        self._wake.set()

    def _hand_over(self) -> None:
        while not self._closed:
            self._wake.wait()
            time.sleep(self._delay)  # let a batch gather
            self._waiting = False
            self._wake.clear()
            self.flush()

    def _drain(self) -> None:
        queue = self._queue
        while queue:
            self._now, event = queue.popleft()
            try:
                self._handlers[type(event)](event)
            except Exception:  # noqa: BLE001 - a bad event must not stop the tracing of the others
                logging.getLogger("flue_nb").exception("tracing failed on %s", event.type)

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

    def _fail(self, span: Any, message: str, code: str) -> None:
        """Mark `span` failed: described by `message` with content on, by its `code` alone with
        content off (an error's message can quote the prompt, an answer or a tool's output)."""
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, redact(message) if self._content else code))

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
        span = self._tracer.start_span(f"invoke_agent {e.agent}", attributes=attrs, start_time=self._now)
        self._agents[key] = self._opened(span)
        self.trace_ids[e.submission_id] = format(span.get_span_context().trace_id, "032x")
        if len(self.trace_ids) > KEPT_TRACE_IDS:  # a kernel may run for months: forget the oldest
            del self.trace_ids[next(iter(self.trace_ids))]

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
            self._fail(opened.span, e.error.message, e.error.type)
        opened.span.end(end_time=self._now)

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
        self._tasks[(cid, e.task_id)] = _PendingTask(f"invoke_agent {e.agent}", parent, attrs, self._now)

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
                self._fail(span, e.error or "", "task_failed")
            span.end(end_time=self._now)

    def _on_turn_start(self, e: ev.TurnStart) -> None:
        if e.model is None:
            return
        turn_key = (e.conversation_id, e.submission_id, e.task_id)
        stale = self._chats.pop(turn_key, None)
        if stale is not None:  # the try before a retry: it failed
            stale.attributes["error.type"] = "retried"
            self._end_chat(stale, "the provider call failed and was retried")
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": e.provider or "flue_nb",
            "gen_ai.request.model": e.model,
            "gen_ai.conversation.id": e.conversation_id,
        }
        self._chats[turn_key] = _Chat(e, self._parent(e), attrs, self._now)

    def _on_message_end(self, e: ev.MessageEnd) -> None:
        if e.role != "assistant":
            return
        chat = self._chats.get((e.conversation_id, e.submission_id, e.task_id))
        if chat is not None:
            chat.attributes["gen_ai.output.messages"] = json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": self._text(e.text)}]}]
            )

    def _on_turn_end(self, e: ev.TurnEnd) -> None:
        chat = self._chats.pop((e.conversation_id, e.submission_id, e.task_id), None)
        if chat is None:
            return
        attrs = chat.attributes
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
        refused = e.stop_reason == "refusal"
        if refused:
            attrs["error.type"] = "model_refused"
        self._end_chat(chat, "the model refused" if refused else None)
        start = chat.start
        duration, inputs, outputs = self._metric_attributes(start.provider or "flue_nb", start.model or "", e.model)
        self._duration.record((self._now - chat.started) / 1e9, duration)
        if u is not None:
            self._tokens.record(u.input_tokens, inputs)
            self._tokens.record(u.output_tokens, outputs)

    def _end_chat(self, chat: _Chat, error: str | None) -> None:
        """Make the call's span whole, now that it ended: one SDK call with every attribute."""
        span = self._tracer.start_span(
            f"chat {chat.start.model}",
            chat.parent,
            self._trace.SpanKind.CLIENT,
            chat.attributes,
            start_time=chat.started,
        )
        if error is not None:
            self._fail(span, error, str(chat.attributes.get("error.type", "error")))
        span.end(end_time=self._now)

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
            f"execute_tool {e.name}", self._parent(e), attributes=attrs, start_time=self._now
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
            self._fail(span, "the tool call failed", str(attrs["error.type"]))
        span.end(end_time=self._now)

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
            start_time=self._now,
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
            self._fail(span, e.error or "", "compaction_failed")
        span.end(end_time=self._now)
