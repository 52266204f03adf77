"""What observers see of a conversation (contract 15): one closed union of frozen dataclasses.

Every event carries the envelope of 15.1 — `type`, `event_index` (monotonic per conversation),
`timestamp`, `conversation_id`, `submission_id`, `turn_id`, `task_id` — and the fields of its own
type as attributes. Observers (`session.observe`, the cell transcript, the chat widget,
`flue-nb run`) consume them with `match`:

    match event:
        case TextDelta(delta=d): ...
        case ToolEnd(name=n, is_error=True): ...

The types, one per event type of 15.2:

=====================  ===================  ============================================
type                   class                own fields
=====================  ===================  ============================================
agent_start            AgentStart           agent
agent_end              AgentEnd             agent
idle                   Idle                 —
submission_queued      SubmissionQueued     text, accepted_at, state
submission_running     SubmissionRunning    attempt, agent
submission_settled     SubmissionSettled    outcome, result, error, joined_into, recovered
submission_recovery    SubmissionRecovery   attempts
turn_start             TurnStart            turn (+ model, provider)
turn                   TurnEnd              turn, stop_reason, usage (+ model)
message_start          MessageStart         role
message_end            MessageEnd           role, text, tool_calls, usage, aborted, from_submission_id
text_delta             TextDelta            delta
thinking_delta         ThinkingDelta        delta
tool_start             ToolStart            call_id, name, input
tool_update            ToolUpdate           call_id, name, progress, total, message
tool                   ToolEnd              call_id, name, is_error, content, duration_ms, details, ended,
                                            images, approval, namespace
task_start             TaskStart            agent, description, depth
task                   TaskEnd              agent, is_error, text, error
compaction_start       CompactionStart      reason, estimated_tokens
compaction             CompactionEnd        reason, messages_before, messages_after, duration_ms,
                                            is_error, tokens_before, tokens_after, summary, error,
                                            skipped
signal                 Signal               signal_type, text, changes
log                    Log                  kind, message, error
=====================  ===================  ============================================

Events are a live view; the stored records are the truth (15.3): `Session.events()` rebuilds
this list from the store (streamed deltas come back whole, one per message; a tool's progress
updates are live only, its end is stored; a turn's requested model and provider are live only).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from flue_nb.runtime.facts import ApprovalFacts, NamespaceDiff
from flue_nb.runtime.messages import ImagePart, Usage

__all__ = [
    "AgentEnd",
    "AgentStart",
    "CompactionEnd",
    "CompactionStart",
    "ErrorInfo",
    "Event",
    "EventBus",
    "EventType",
    "Idle",
    "Log",
    "MessageEnd",
    "MessageStart",
    "Signal",
    "SubmissionQueued",
    "SubmissionRecovery",
    "SubmissionRunning",
    "SubmissionSettled",
    "TaskEnd",
    "TaskStart",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallInfo",
    "ToolEnd",
    "ToolStart",
    "ToolUpdate",
    "TurnEnd",
    "TurnStart",
]

EventType = Literal[
    "agent_start",
    "agent_end",
    "idle",
    "submission_queued",
    "submission_running",
    "submission_settled",
    "submission_recovery",
    "turn_start",
    "turn",
    "message_start",
    "message_end",
    "text_delta",
    "thinking_delta",
    "tool_start",
    "tool_update",
    "tool",
    "task_start",
    "task",
    "compaction_start",
    "compaction",
    "signal",
    "log",
]
Outcome = Literal["completed", "failed", "aborted"]
CompactionReason = Literal["threshold", "overflow", "manual"]


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """A failure as it is stored: the stable `type` code of contract 16.1 and its message."""

    type: str
    message: str

    @classmethod
    def of(cls, d: Mapping[str, Any] | None) -> ErrorInfo | None:
        """The `{type, message}` form the store keeps, as an `ErrorInfo` (None stays None)."""
        if d is None:
            return None
        return cls(str(d.get("type", "error")), str(d.get("message", "")))


@dataclass(frozen=True, slots=True)
class ToolCallInfo:
    """A tool call named in an assistant message."""

    id: str
    name: str
    input: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Envelope:
    event_index: int = -1
    """Monotonic per conversation; set by the bus when the event is published."""
    timestamp: float = 0.0
    """Seconds since the epoch; set by the bus."""
    conversation_id: str = ""
    submission_id: str | None = None
    turn_id: str | None = None
    task_id: str | None = None
    """Set on events of a subagent's run: the `task` tool call that started it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentStart(_Envelope):
    """An attempt of a submission starts running the agent."""

    type: Literal["agent_start"] = "agent_start"
    agent: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentEnd(_Envelope):
    """The attempt stopped running the agent (before its submission settles)."""

    type: Literal["agent_end"] = "agent_end"
    agent: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Idle(_Envelope):
    """The queue is empty and nothing runs."""

    type: Literal["idle"] = "idle"


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmissionQueued(_Envelope):
    """A message was admitted (10.1); `state` is `joining` when a response is live (10.3)."""

    type: Literal["submission_queued"] = "submission_queued"
    text: str
    accepted_at: float
    state: Literal["queued", "joining"] = "queued"


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmissionRunning(_Envelope):
    """An attempt of the submission started (11.1)."""

    type: Literal["submission_running"] = "submission_running"
    attempt: int
    agent: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmissionSettled(_Envelope):
    """The submission reached its one terminal outcome (10.4).

    A joined message settles with the response that absorbed it: `joined_into` names that
    submission and `result` is its reply.
    """

    type: Literal["submission_settled"] = "submission_settled"
    outcome: Outcome
    result: str | None = None
    error: ErrorInfo | None = None
    joined_into: str | None = None
    recovered: bool = False
    """True when a later owner finished it after the process that started it died."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmissionRecovery(_Envelope):
    """A submission left running by a dead owner is being recovered (11.2)."""

    type: Literal["submission_recovery"] = "submission_recovery"
    attempts: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnStart(_Envelope):
    """A model call starts."""

    type: Literal["turn_start"] = "turn_start"
    turn: int
    model: str | None = None
    """The model id the call asks for (the request model; `TurnEnd.model` is the response's).
    None when the event redraws stored work (a recovered partial response): no call happens."""
    provider: str | None = None
    """Who serves it: `anthropic`, `openai`, or `flue_nb` for the offline models."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEnd(_Envelope):
    """A model call produced its message (it is stored before this event)."""

    type: Literal["turn"] = "turn"
    turn: int
    stop_reason: str | None = None
    usage: Usage | None = None
    model: str | None = None
    """The model id the response names (what its usage is priced by)."""
    priced_as: str | None = None
    """The model the call was made with, when `model` has no known price (`AssistantMessage.priced_as`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageStart(_Envelope):
    """A message begins: the assistant starts streaming, or a user message enters the window."""

    type: Literal["message_start"] = "message_start"
    role: Literal["assistant", "user"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageEnd(_Envelope):
    """A message is complete and stored.

    For a user message, `from_submission_id` is the submission it came from: a message that
    joined a live response (10.3) differs from the event's `submission_id`.
    """

    type: Literal["message_end"] = "message_end"
    role: Literal["assistant", "user"]
    text: str
    tool_calls: tuple[ToolCallInfo, ...] = ()
    usage: Usage | None = None
    aborted: bool = False
    from_submission_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta(_Envelope):
    """A piece of the assistant's text as it streams."""

    type: Literal["text_delta"] = "text_delta"
    delta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingDelta(_Envelope):
    """A piece of the assistant's thinking as it streams."""

    type: Literal["thinking_delta"] = "thinking_delta"
    delta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStart(_Envelope):
    """A tool call starts running."""

    type: Literal["tool_start"] = "tool_start"
    call_id: str
    name: str
    input: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolUpdate(_Envelope):
    """A running tool reported progress (an MCP server's progress notification), between its
    `tool_start` and its `tool` event; live only (not rebuilt from the store)."""

    type: Literal["tool_update"] = "tool_update"
    call_id: str
    name: str
    progress: float | None = None
    """How far it got, in the tool's own units (it only ever grows)."""
    total: float | None = None
    """What `progress` will reach when done, when the tool knows."""
    message: str | None = None
    """What it is doing now, in the tool's words."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolEnd(_Envelope):
    """A tool call ended; `content` is what the model sees.

    `details` is the tool's own structured extra (the `python` tool's result handle under
    `handle`); `approval` says how the call's approval was decided, `namespace` which names its
    code changed. `ended` is `aborted` or `failed` when the run stopped underneath the call.
    """

    type: Literal["tool"] = "tool"
    call_id: str
    name: str
    is_error: bool
    content: str
    duration_ms: float | None = None
    details: Mapping[str, Any] | None = None
    ended: Literal["completed", "aborted", "failed"] = "completed"
    images: tuple[ImagePart, ...] = ()
    """Images the result carries (a figure, an image `read`): live, with their bytes; rebuilt
    from the store, references only (`Store.blob(digest)` has the bytes), for thumbnails."""
    approval: ApprovalFacts | None = None
    """How the call's approval was decided, when a policy other than `allow` applied."""
    namespace: NamespaceDiff | None = None
    """The names the call's code added, changed and removed (the `python` tool)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskStart(_Envelope):
    """A subagent starts (14.2); its own events carry this `task_id`."""

    type: Literal["task_start"] = "task_start"
    agent: str
    description: str | None = None
    depth: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskEnd(_Envelope):
    """A subagent finished: `text` is its answer, or `error` says why it failed."""

    type: Literal["task"] = "task"
    agent: str
    is_error: bool = False
    text: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionStart(_Envelope):
    """Compaction begins (13.7)."""

    type: Literal["compaction_start"] = "compaction_start"
    reason: CompactionReason
    estimated_tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionEnd(_Envelope):
    """Compaction ended (13.7); `skipped` when nothing was old enough to fold."""

    type: Literal["compaction"] = "compaction"
    reason: CompactionReason
    messages_before: int
    messages_after: int
    duration_ms: float
    is_error: bool = False
    tokens_before: int = 0
    tokens_after: int = 0
    summary: str | None = None
    error: str | None = None
    skipped: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Signal(_Envelope):
    """A signal was appended for the model (12.2); `changes` says what changed, one line each."""

    type: Literal["signal"] = "signal"
    signal_type: Literal["resources", "environment"]
    text: str
    changes: tuple[str, ...] = ()


LogKind = Literal[
    "retry",
    "attempt_failed",
    "lease_lost",
    "lease_taken_over",
    "idle_compaction_failed",
    "tool_call_streaming",
    "settings_not_restored",
    "budget",
    "answer_cut",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Log(_Envelope):
    """A diagnostic; `kind` says which (observers branch on it, never on `message`)."""

    type: Literal["log"] = "log"
    kind: LogKind
    message: str
    error: ErrorInfo | None = None
    call_id: str | None = None
    name: str | None = None


Event = Union[
    AgentStart,
    AgentEnd,
    Idle,
    SubmissionQueued,
    SubmissionRunning,
    SubmissionSettled,
    SubmissionRecovery,
    TurnStart,
    TurnEnd,
    MessageStart,
    MessageEnd,
    TextDelta,
    ThinkingDelta,
    ToolStart,
    ToolUpdate,
    ToolEnd,
    TaskStart,
    TaskEnd,
    CompactionStart,
    CompactionEnd,
    Signal,
    Log,
]
"""Every event an observer can receive."""

Observer = Callable[[Event], None]
Emit = Callable[[Event], Event]
"""How the runtime publishes: takes an event, stamps what the caller left unset, delivers it."""

_set = object.__setattr__

_everywhere: list[Observer] = []
"""Observers of every conversation of the process (`flue.instrument()`'s tracer is one)."""


def observe_all(callback: Observer) -> Callable[[], None]:
    """Call `callback` with every event of every conversation from now on; returns a stopper."""
    _everywhere.append(callback)

    def stop() -> None:
        if callback in _everywhere:
            _everywhere.remove(callback)

    return stop


class EventBus:
    """Numbers events per conversation and hands them to observers, in order."""

    def __init__(self, conversation_id: str, *, clock: Callable[[], float] = time.time) -> None:
        self.conversation_id = conversation_id
        self._clock = clock
        self._next_index = 0
        self._observers: list[Observer] = []

    def observe(self, callback: Observer) -> Callable[[], None]:
        """Call `callback` with every event from now on; returns a function that stops it."""
        self._observers.append(callback)

        def stop() -> None:
            if callback in self._observers:
                self._observers.remove(callback)

        return stop

    def publish(self, event: Event, *, submission_id: str | None = None, task_id: str | None = None) -> Event:
        """Stamp the envelope and deliver; an observer's exception never breaks the run.

        The event is new and not yet shared, so stamping it in place is safe (and keeps a
        10,000-delta answer from copying every event).
        """
        _set(event, "event_index", self._next_index)
        _set(event, "timestamp", self._clock())
        _set(event, "conversation_id", self.conversation_id)
        if event.submission_id is None and submission_id is not None:
            _set(event, "submission_id", submission_id)
        if event.task_id is None and task_id is not None:
            _set(event, "task_id", task_id)
        self._next_index += 1
        for cb in [*_everywhere, *self._observers] if _everywhere else list(self._observers):
            try:
                cb(event)
            except Exception:  # noqa: BLE001 - a broken observer must not fail the agent
                logging.getLogger("flue_nb").exception("event observer failed on %s", event.type)
        return event
