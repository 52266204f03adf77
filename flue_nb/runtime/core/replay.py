"""Events rebuilt from the stored records (contract 15.3): the store is the truth, events a view.

A redraw after a kernel restart (the chat widget, `Session.events()`) gets the same events an
observer saw live, with three differences that only the live stream can have:

- a streamed text or thinking comes back whole, one delta per message;
- `log` events (retries, diagnostics) are not records, so they are not rebuilt;
- a response cut off by a crash or an abort comes back as a message marked `aborted`.

A subagent's events come back from the steps its `task` call recorded (core/task_record.py):
`task_start` at its first message, its turns and tools (with its `task_id`), and `task` just
before the call's result.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from flue_nb.runtime import events as ev
from flue_nb.runtime.events import ErrorInfo, Event, ToolCallInfo
from flue_nb.runtime.messages import AssistantMessage, ThinkingPart, image_from_dict, message_from_dict
from flue_nb.runtime.store import Record, Store, Submission

__all__ = ["rebuild_events"]


def rebuild_events(store: Store, conversation_id: str) -> list[Event]:
    """Every event of a conversation, rebuilt from its records, numbered in order."""
    subs = store.submissions(conversation_id)
    records = store.records(conversation_id)
    out: list[Event] = []
    for i, event in enumerate(_events(subs, records)):
        object.__setattr__(event, "event_index", i)
        object.__setattr__(event, "conversation_id", conversation_id)
        out.append(event)
    return out


def _events(subs: list[Submission], records: list[Record]) -> Iterator[Event]:
    by_id = {s.id: s for s in subs}
    waiting = sorted(subs, key=lambda s: s.seq)  # admissions not yet placed in the stream
    turns: dict[str, int] = {}
    running: dict[str, str] = {}  # submission id -> agent of its open attempt
    recovered: set[str] = set()
    held: list[Event] = []  # joined settlements, shown after the response that absorbed them
    idle_pending = False
    tasks = _Tasks()

    def admitted_until(t: float) -> Iterator[Event]:
        while waiting and waiting[0].accepted_at <= t:
            s = waiting.pop(0)
            state: Literal["queued", "joining"] = "joining" if s.joined_into else "queued"
            yield ev.SubmissionQueued(
                submission_id=s.id, text=s.text, accepted_at=s.accepted_at, state=state, timestamp=s.accepted_at
            )

    for r in records:
        sid = r.submission_id
        t = r.created_at
        if idle_pending and r.kind not in ("compaction", "system"):
            yield ev.Idle(timestamp=t)
            idle_pending = False
        yield from admitted_until(t)
        stamp: dict[str, Any] = {"submission_id": sid, "timestamp": t}
        d = r.data
        if r.kind == "event" and "attempt" in d:
            assert sid is not None
            yield from _attempt_events(sid, d, stamp, running, recovered)
        elif r.kind == "message":
            yield from tasks.before(d, stamp)
            yield from _message_events(d, sid, stamp, turns)
        elif r.kind == "step":
            yield from tasks.step(d, stamp)
        elif r.kind == "compaction":
            reason = d.get("reason", "manual")
            yield ev.CompactionStart(reason=reason, estimated_tokens=int(d.get("tokens_before", 0)), **stamp)
            yield ev.CompactionEnd(
                reason=reason,
                messages_before=int(d.get("messages_before", 0)),
                messages_after=int(d.get("messages_after", 0)),
                duration_ms=float(d.get("duration_ms", 0.0)),
                tokens_before=int(d.get("tokens_before", 0)),
                tokens_after=int(d.get("tokens_after", 0)),
                summary=d.get("summary"),
                **stamp,
            )
            if idle_pending:
                yield ev.Idle(timestamp=t)
                idle_pending = False
        elif r.kind == "settlement":
            assert sid is not None
            settled = ev.SubmissionSettled(
                outcome=d["outcome"],
                result=d.get("result"),
                error=ErrorInfo.of(d.get("error")),
                joined_into=d.get("joined_into"),
                recovered=sid in recovered,
                **stamp,
            )
            if settled.joined_into:
                held.append(settled)
                continue
            if sid in running:
                yield ev.AgentEnd(agent=running.pop(sid), **stamp)
            yield settled
            yield from held
            held.clear()
            sub = by_id.get(sid)
            later = [
                s
                for s in subs
                if s.seq > (sub.seq if sub else 0)
                and s.accepted_at <= t
                and (s.settled_at is None or s.settled_at > t)
                and not s.joined_into
            ]
            idle_pending = not later
    if idle_pending:
        yield ev.Idle(timestamp=records[-1].created_at if records else 0.0)
    yield from admitted_until(float("inf"))


def _attempt_events(
    sid: str, d: dict[str, Any], stamp: dict[str, Any], running: dict[str, str], recovered: set[str]
) -> Iterator[Event]:
    """An attempt starts: the previous one's agent ends, a recovery is noted once, the agent starts."""
    if sid in running:
        yield ev.AgentEnd(agent=running.pop(sid), **stamp)
    if d.get("recovered") and sid not in recovered:
        recovered.add(sid)
        yield ev.SubmissionRecovery(attempts=int(d["attempt"]) - 1, **stamp)
    running[sid] = str(d.get("agent", ""))
    yield ev.SubmissionRunning(attempt=int(d["attempt"]), agent=running[sid], **stamp)
    yield ev.AgentStart(agent=running[sid], **stamp)


class _Tasks:
    """Subagents, as their `task` calls' recorded steps show them."""

    def __init__(self) -> None:
        self.calls: dict[str, dict[str, Any]] = {}  # task call id -> its input
        self.open: dict[str, str] = {}  # task id -> agent, between task_start and task
        self.turns: dict[str, int] = {}

    def before(self, d: dict[str, Any], stamp: dict[str, Any]) -> Iterator[Event]:
        """Note task calls; end a subagent just before its call's result."""
        if d.get("kind") == "assistant":
            m = message_from_dict(d)
            assert isinstance(m, AssistantMessage)
            for c in m.tool_calls:
                if c.name == "task":
                    self.calls[c.id] = dict(c.input)
        elif d.get("kind") == "tool_result" and d.get("call_id") in self.open:
            agent = self.open.pop(d["call_id"])
            is_error = bool(d.get("is_error"))
            content = str(d.get("content", ""))
            yield ev.TaskEnd(
                agent=agent,
                is_error=is_error,
                text=None if is_error else content,
                error=content if is_error else None,
                **{**stamp, "task_id": d["call_id"]},
            )

    def step(self, d: dict[str, Any], stamp: dict[str, Any]) -> Iterator[Event]:
        """A subagent's recorded message (possibly a nested one's) as the events it made live."""
        task_id, name, depth = str(d.get("call_id")), str(d.get("name", "")), 1
        while name.startswith("step:"):
            task_id, _, name = name[len("step:") :].partition(":")
            depth += 1
        if not name.startswith("message:") or not isinstance(d.get("value"), dict):
            return
        inner = {**stamp, "task_id": task_id}
        if task_id not in self.open:
            call = self.calls.get(task_id, {})
            self.open[task_id] = str(call.get("agent", ""))
            yield ev.TaskStart(agent=self.open[task_id], description=call.get("description"), depth=depth, **inner)
        value = d["value"]
        if value.get("kind") == "user":
            return  # the task's prompt: not an event live either
        yield from self.before(value, inner)
        yield from _message_events(value, task_id, inner, self.turns)


def _message_events(
    d: dict[str, Any], sid: str | None, stamp: dict[str, Any], turns: dict[str, int]
) -> Iterator[Event]:
    kind = d.get("kind")
    if kind == "user":
        yield ev.MessageStart(role="user", **stamp)
        yield ev.MessageEnd(role="user", text=d["text"], from_submission_id=d.get("submission_id"), **stamp)
    elif kind == "assistant":
        m = message_from_dict(d)
        assert isinstance(m, AssistantMessage)
        n = turns[sid or ""] = turns.get(sid or "", 0) + 1
        turn = {"turn_id": f"t{n}", **stamp}
        yield ev.TurnStart(turn=n, **turn)
        yield ev.MessageStart(role="assistant", **turn)
        thinking = "".join(p.thinking for p in m.parts if isinstance(p, ThinkingPart))
        if thinking:
            yield ev.ThinkingDelta(delta=thinking, **turn)
        if m.text:
            yield ev.TextDelta(delta=m.text, **turn)
        calls = tuple(ToolCallInfo(c.id, c.name, c.input) for c in m.tool_calls)
        yield ev.MessageEnd(role="assistant", text=m.text, tool_calls=calls, usage=m.usage, aborted=m.aborted, **turn)
        if not m.aborted:
            yield ev.TurnEnd(turn=n, stop_reason=m.stop_reason, usage=m.usage, model=m.model, **turn)
            for c in calls:
                yield ev.ToolStart(call_id=c.id, name=c.name, input=c.input, **stamp)
    elif kind == "tool_result":
        yield ev.ToolEnd(
            call_id=d["call_id"],
            name=d["name"],
            is_error=bool(d.get("is_error")),
            content=d["content"],
            duration_ms=d.get("duration_ms"),
            details=d.get("details"),
            images=tuple(image_from_dict(i) for i in d.get("images") or ()),
            **stamp,
        )
    elif kind == "signal" and d.get("signal_type") in ("resources", "environment"):
        yield ev.Signal(signal_type=d["signal_type"], text=d["text"], changes=tuple(d.get("changes") or ()), **stamp)
