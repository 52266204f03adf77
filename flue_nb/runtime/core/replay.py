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

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from flue_nb.runtime import events as ev
from flue_nb.runtime.events import ErrorInfo, Event, ToolCallInfo
from flue_nb.runtime.facts import split_details
from flue_nb.runtime.messages import AssistantMessage, ThinkingPart, image_from_dict, message_from_dict
from flue_nb.runtime.store import Record, RecordKind, Store, Submission

__all__ = ["Page", "newest_seq", "page_records", "rebuild_events", "rebuild_page"]


def rebuild_events(store: Store, conversation_id: str) -> list[Event]:
    """Every event of a conversation, rebuilt from its records, numbered in order."""
    subs = store.submissions(conversation_id)
    records = store.records(conversation_id)
    return _numbered(conversation_id, _events(subs, records))


@dataclass(frozen=True, slots=True)
class Page:
    """The events of a conversation's latest submissions (or of those before `before_seq`)."""

    events: list[Event]
    submissions: list[Submission]
    """The page's submissions, in admission order (joined ones with the response they joined)."""
    older: int
    """How many submissions came before the page's first: on earlier pages."""
    after_seq: int
    """The records read are those after this seq (the previous page's last settlement)."""
    last_seq: int
    """The newest record read (`after_seq` when none was): what a follower compares with."""
    records: list[Record] = field(default_factory=list)
    """The records the events were rebuilt from (a static copy of the page reads them too)."""

    @property
    def first_seq(self) -> int | None:
        """The seq of the page's first submission: the next older page ends before it."""
        return self.submissions[0].seq if self.submissions else None


def rebuild_page(store: Store, conversation_id: str, *, last: int, before_seq: int | None = None) -> Page:
    """The events of the newest `last` submissions (of those before `before_seq`), as
    `rebuild_events` gives them, read by indexes: its cost is the page's, not the conversation's.

    A page starts at a submission of its own: messages that joined an earlier response go with
    that response, on the page before. Submissions run in admission order, so the records of a
    page are the ones after the settlement of the submission before it; while an earlier one is
    still unsettled (a long queue), the page reaches back to it.
    """
    subs, records, older, after = page_records(store, conversation_id, last=last, before_seq=before_seq)
    newest = max((r.seq for r in records), default=after)
    return Page(_numbered(conversation_id, _events(subs, records)), subs, older, after, newest, records)


def page_records(
    store: Store,
    conversation_id: str,
    *,
    last: int,
    before_seq: int | None = None,
    kinds: list[RecordKind] | None = None,
) -> tuple[list[Submission], list[Record], int, int]:
    """A page's submissions, its records (of `kinds`), how many submissions came before it, and
    the seq its records come after (`rebuild_page` says which)."""
    subs = store.submissions(conversation_id, last=last, before_seq=before_seq)
    while subs and subs[0].joined_into:
        subs.pop(0)
    if subs and before_seq is None:
        unsettled = store.submissions(conversation_id, unsettled=True, last=1, before_seq=subs[0].seq)
        if unsettled:  # rare: more unsettled submissions than a page; the page reaches back
            first = store.submissions(conversation_id, unsettled=True)[0]
            subs = [s for s in store.submissions(conversation_id) if s.seq >= first.seq]
    if not subs:
        if before_seq is not None:
            return [], [], 0, 0
        return [], store.records(conversation_id, kinds=kinds), 0, 0  # no submission: a few records
    after = _settled_before(store, conversation_id, subs[0].seq)
    until = None
    if before_seq is not None:
        # The records up to the settlement of this page's last submission: the next page's
        # records begin after it.
        until = _settled_before(store, conversation_id, before_seq) + 1
    records = store.records(conversation_id, after_seq=after, before_seq=until, kinds=kinds)
    return subs, records, store.count_submissions(conversation_id, before_seq=subs[0].seq), after


def newest_seq(store: Store, conversation_id: str) -> int:
    """The seq of the conversation's newest record, read by indexes (0 when it has none)."""
    _, records, _, after = page_records(store, conversation_id, last=1)
    return max((r.seq for r in records), default=after)


def _settled_before(store: Store, conversation_id: str, seq: int) -> int:
    """The seq of the newest settlement record of the submission admitted just before `seq` (0)."""
    prev = store.submissions(conversation_id, last=1, before_seq=seq)
    if not prev:
        return 0
    settled = store.records(conversation_id, kinds=["settlement"], submission_id=prev[0].id)
    if settled:
        return settled[-1].seq
    # Not settled (a page reaching back stops at the first unsettled one, so only an older
    # page's end gets here): its records run on; the end is the newest record.
    return max((r.seq for r in store.records(conversation_id, submission_id=prev[0].id)), default=0)


def _numbered(conversation_id: str, events: Iterator[Event]) -> list[Event]:
    out: list[Event] = []
    for i, event in enumerate(events):
        object.__setattr__(event, "event_index", i)
        object.__setattr__(event, "conversation_id", conversation_id)
        out.append(event)
    return out


def _events(subs: list[Submission], records: list[Record]) -> Iterator[Event]:
    by_id = {s.id: s for s in subs}
    waiting = deque(sorted(subs, key=lambda s: s.seq))  # admissions not yet placed in the stream
    placed: dict[str, Submission] = {}
    """Admitted and not yet settled when last looked, joined ones aside: what may still run."""
    turns: dict[str, int] = {}
    running: dict[str, str] = {}  # submission id -> agent of its open attempt
    recovered: set[str] = set()
    held: list[Event] = []  # joined settlements, shown after the response that absorbed them
    idle_pending = False
    tasks = _Tasks()

    def admitted_until(t: float) -> Iterator[Event]:
        while waiting and waiting[0].accepted_at <= t:
            s = waiting.popleft()
            if not s.joined_into:
                placed[s.id] = s
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
            placed.pop(sid, None)
            idle_pending = not _waits_after(placed, sub.seq if sub else 0, t)
    if idle_pending:
        yield ev.Idle(timestamp=records[-1].created_at if records else 0.0)
    yield from admitted_until(float("inf"))


def _waits_after(placed: dict[str, Submission], seq: int, t: float) -> bool:
    """Whether a submission after `seq` was admitted and not settled by `t` (else: idle).

    Only the placed ones can be (admitted by `t`); each leaves once settled, so a rebuild stays
    linear in the records however long the conversation (it scanned every submission here).
    """
    for done in [o.id for o in placed.values() if o.settled_at is not None and o.settled_at <= t]:
        del placed[done]
    return any(o.seq > seq for o in placed.values())


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
            yield ev.TurnEnd(
                turn=n, stop_reason=m.stop_reason, usage=m.usage, model=m.model, priced_as=m.priced_as, **turn
            )
            for c in calls:
                yield ev.ToolStart(call_id=c.id, name=c.name, input=c.input, **stamp)
    elif kind == "tool_result":
        details, approval, namespace = split_details(d.get("details"))
        yield ev.ToolEnd(
            call_id=d["call_id"],
            name=d["name"],
            is_error=bool(d.get("is_error")),
            content=d["content"],
            duration_ms=d.get("duration_ms"),
            details=details,
            images=tuple(image_from_dict(i) for i in d.get("images") or ()),
            approval=approval,
            namespace=namespace,
            **stamp,
        )
    elif kind == "signal" and d.get("signal_type") in ("resources", "environment"):
        yield ev.Signal(signal_type=d["signal_type"], text=d["text"], changes=tuple(d.get("changes") or ()), **stamp)
