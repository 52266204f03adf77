"""The one fold of a conversation's event stream into typed parts (`views.parts`), for every view.

Pure: no widget, no IPython. `Fold.apply(event)` takes the runtime's events (live, or rebuilt
from the store by `Session.events()`) and keeps one `Block` per submission with its parts in
order. The chat widget renders the blocks as JSON (`chat.wire`), a `%%flue` cell as text and
markdown (`views.transcript`). `Fold(only=sid)` keeps a single submission, and from the moment
its message joins another live response, that response's events too (they answer it).

Order-proof: a submission's state only moves forward (queued → running → settled), so an event
published late (a `SubmissionQueued` after its settlement) never brings it back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from flue_nb.notebook.views._calls import SUMMARY_CHARS as _SUMMARY_CHARS
from flue_nb.notebook.views._calls import call_line, images_of, input_text
from flue_nb.notebook.views.parts import (
    Block,
    BlockState,
    CompactionPart,
    NotePart,
    Part,
    SignalPart,
    TaskPart,
    TextPart,
    ToolPart,
    UserPart,
)
from flue_nb.runtime import events as ev
from flue_nb.runtime.providers import Spend
from flue_nb.runtime.tools.summary import Summaries, one_line

__all__ = ["Fold", "call_line", "input_text", "unfenced"]

_NOTED_LOGS = {"retry", "attempt_failed", "lease_lost", "idle_compaction_failed", "budget", "answer_cut"}
_PLAIN_LOGS = {"retry", "budget", "answer_cut"}
"""Logs whose message says it all (the others are prefixed with their kind)."""
_RANK: dict[BlockState, int] = {"queued": 0, "joining": 0, "running": 1, "joined": 2, "settled": 2}
_USAGE_KEYS = (("input", "input_tokens"), ("output", "output_tokens"),
               ("cache_read", "cache_read_tokens"), ("cache_write", "cache_write_tokens"))  # fmt: skip


class Fold:
    """Blocks (one per submission) built from events; `only` keeps one submission (a cell's)."""

    def __init__(self, *, only: str | None = None, summaries: Summaries | None = None) -> None:
        self.only = only
        self.summaries = summaries if summaries is not None else Summaries()
        """How the agent's tools sum their calls up (a conversation's `Session.summaries`); without
        it, by each call's first text argument."""
        self.blocks: dict[str, Block] = {}
        """Submission id → block, in the order first seen (admission order)."""
        self.usage = {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0}
        """Token totals of the top-level agent's model calls seen (`TurnEnd` usage)."""
        self.unreported = 0
        """Those of its model calls whose server reported no usage (not "0 in, 0 out")."""
        self.spend = Spend()
        """What those calls and their subagents' cost at list prices."""
        self.models: list[str] = []
        """Who answered (subagents included), in order of first response."""
        self.images: dict[str, bytes] = {}
        """Image bytes seen live, by digest (rebuilt events carry references only)."""
        self.dirty: set[str] = set()
        """Blocks changed since the last snapshot (the widget's business)."""
        self.settled_now: set[str] = set()
        """Blocks that settled since the last snapshot (they move from live to history)."""
        self.status_dirty = True
        """Something that changes the gauge or the queue happened (a turn, a settlement...)."""
        self.on_other: Callable[[ev.Event], bool] | None = None
        """With `only`: called with events of other submissions (a cell's recovery notes)."""
        self._containers: dict[tuple[str | None, str], list[Part]] = {}
        """(submission, a `task` call's id) → the part list its subagent's events go into."""
        self._tools: dict[tuple[str | None, str | None, str], ToolPart] = {}
        """(submission, task, call id) → its card: call ids repeat across submissions (an offline
        model starts at `call_1` in every kernel, some servers reuse ids), never within one run."""
        self._latest: dict[str, ToolPart] = {}
        """A call id → the card that last started with it (the one a live approval is about)."""
        self._streaming: dict[str | None, TextPart] = {}
        """Per task id (None: the top level): the text part the next delta extends."""
        self._streamed: set[str | None] = set()
        self._following: str | None = None
        self._one: Block | None = None
        self._aside = 0
        self._current_aside: str | None = None
        self._handlers: dict[type[Any], Callable[[Any], bool]] = {
            ev.SubmissionQueued: self._queued, ev.SubmissionRunning: self._running,
            ev.SubmissionRecovery: self._recovery, ev.SubmissionSettled: self._settled,
            ev.MessageStart: self._message_start, ev.MessageEnd: self._message_end,
            ev.TextDelta: self._delta, ev.ThinkingDelta: self._delta, ev.ToolStart: self._tool_start,
            ev.ToolUpdate: self._tool_update, ev.ToolEnd: self._tool_end, ev.TaskStart: self._task_start, ev.TaskEnd: self._task_end,
            ev.CompactionStart: self._compaction_start, ev.CompactionEnd: self._compaction_end,
            ev.Signal: self._signal, ev.Log: self._log, ev.TurnEnd: self._turn_end,
        }  # fmt: skip

    # --- where an event goes --------------------------------------------------------------------

    def block(self, sid: str | None, text: str = "") -> Block:
        """The block for submission `sid`, created when first seen."""
        if self.only is not None:
            # A cell's view: one block, whichever response answers it (and before its id is known).
            if self._one is None:
                self._one = self.blocks[self.only] = Block(self.only, text=text)
            self.dirty.add(self._one.id)
            return self._one
        if sid is None:
            # Conversation-level events (a compaction while idle) go in a block of their own
            # between the submissions around them, drawn with the history.
            if self._current_aside is None:
                self._aside += 1
                self._current_aside = f"aside-{self._aside}"
            sid = self._current_aside
            self.settled_now.add(sid)
        found = self.blocks.get(sid)
        if found is None:
            aside = sid.startswith("aside-")
            if not aside:
                self._current_aside = None
            found = self.blocks[sid] = Block(sid, "aside" if aside else "submission", text)
            if aside:
                found.state = "settled"
        self.dirty.add(sid)
        return found

    def parts(self, event: ev.Event) -> list[Part]:
        """The part list an event's parts go into (a subagent's events: its task's list)."""
        container = self._containers.get((event.submission_id, event.task_id or ""))
        if event.task_id is not None and container is not None:
            return container
        return self.block(event.submission_id).parts

    def bind(self, submission_id: str) -> None:
        """With `only`: the submission this view shows, once its id is known."""
        self.only = submission_id
        if self._one is not None:
            self.blocks = {submission_id: self._one}
            self._one.id = submission_id

    @property
    def following(self) -> str | None:
        """With `only`: the response this view's message joined, once it did."""
        return self._following

    def _own(self, event: ev.Event) -> bool:
        return self.only is None or event.submission_id in (self.only, self._following)

    def apply(self, event: ev.Event) -> bool:
        """Fold one event in; True when it changed what a view shows."""
        if not self._own(event):
            return self._other(event)
        handler = self._handlers.get(type(event))
        return handler(event) if handler is not None else False

    def _other(self, event: ev.Event) -> bool:
        if isinstance(event, ev.MessageEnd) and event.role == "user" and event.from_submission_id == self.only:
            # This cell's message joined the response already running: that response answers it.
            self._following = event.submission_id
            self.block(self.only).parts.append(NotePart("↪ joined the response that was already running"))
            return True
        return self.on_other(event) if self.on_other is not None else False

    def _forward(self, block: Block, state: BlockState) -> None:
        if _RANK[state] >= _RANK[block.state]:
            block.state = state

    # --- submissions ------------------------------------------------------------------------------

    def _queued(self, e: ev.SubmissionQueued) -> bool:
        b = self.block(e.submission_id, e.text)
        b.text = b.text or e.text
        self._forward(b, "joining" if e.state == "joining" else "queued")
        self.status_dirty = True
        return True

    def _running(self, e: ev.SubmissionRunning) -> bool:
        if e.submission_id == self._following:
            return False
        b = self.block(e.submission_id)
        self._forward(b, "running")
        b.attempt = e.attempt
        self.status_dirty = True
        return True

    def _recovery(self, e: ev.SubmissionRecovery) -> bool:
        b = self.block(e.submission_id)
        b.recovered = True
        note = NotePart(f"↻ recovering after a restart (attempt {e.attempts + 1})")
        if note not in b.parts:
            b.parts.append(note)
        return True

    def _settled(self, e: ev.SubmissionSettled) -> bool:
        if e.submission_id == self._following:
            return False  # the response this cell joined settled; this cell's own settlement follows
        b = self.block(e.submission_id)
        b.state = "joined" if e.joined_into else "settled"
        b.outcome, b.result, b.joined_into = e.outcome, e.result, e.joined_into
        b.recovered = b.recovered or e.recovered
        b.error = {"type": e.error.type, "message": e.error.message} if e.error else None
        if e.recovered and e.result and not any(isinstance(p, TextPart) and p.kind == "text" for p in b.parts):
            # A recovered run's answer may have been written by an earlier kernel.
            b.parts.append(TextPart(chunks=[e.result], recovered=True))
        _close_running(b.parts, e.outcome)
        self._streaming.clear()
        self.settled_now.add(b.id)
        self.status_dirty = True
        return True

    # --- messages and text --------------------------------------------------------------------------

    def _message_start(self, e: ev.MessageStart) -> bool:
        if e.role == "assistant":
            self._streaming.pop(e.task_id, None)
            self._streamed.discard(e.task_id)
        return False

    def _message_end(self, e: ev.MessageEnd) -> bool:
        if e.role == "user":
            return self._user_message(e)
        streamed = self._streaming.get(e.task_id)
        parts = self.parts(e)
        if e.text and e.task_id in self._streamed and streamed is not None:
            # The stored text is the truth: deltas missed while a redraw read the store (or split
            # across a reconnect) cannot leave the answer short.
            streamed.chunks[:] = [e.text]
        elif e.text and not _ends_with_text(parts, e.text):
            parts.append(TextPart(chunks=[e.text]))  # rebuilt from the store: no deltas before it
        if e.aborted:
            parts.append(NotePart("(the answer was cut off)"))
        self._streaming.pop(e.task_id, None)
        self._streamed.discard(e.task_id)
        return True

    def _user_message(self, e: ev.MessageEnd) -> bool:
        origin = e.from_submission_id
        if origin is not None and origin != e.submission_id:
            if self.only is not None:
                return False  # this cell's own message, in the response it joined
            part = UserPart(e.text, origin)
            if part not in self.parts(e):
                self.parts(e).append(part)
            joined = self.block(origin, e.text)
            self._forward(joined, "joined")
            joined.joined_into = e.submission_id
            return True
        if e.task_id is None:
            b = self.block(e.submission_id, e.text)
            b.text = b.text or e.text
        return False

    def _delta(self, e: ev.TextDelta | ev.ThinkingDelta) -> bool:
        kind: Literal["text", "thinking"] = "text" if isinstance(e, ev.TextDelta) else "thinking"
        part = self._streaming.get(e.task_id)
        if part is None or part.kind != kind:
            part = TextPart(kind)
            self.parts(e).append(part)
            self._streaming[e.task_id] = part
        part.chunks.append(e.delta)
        if kind == "text":
            self._streamed.add(e.task_id)
        self.dirty.add(self.block(e.submission_id).id)
        return True

    # --- tools and subagents ------------------------------------------------------------------------

    def _tool_start(self, e: ev.ToolStart) -> bool:
        key = (e.submission_id, e.task_id, e.call_id)
        if key in self._tools:
            return False  # seen twice: once redrawn from the store, once live
        self._streaming.pop(e.task_id, None)
        tool = ToolPart(e.call_id, e.name, call_line(e.name, e.input, self.summaries), dict(e.input))
        self.parts(e).append(tool)
        self._tools[key] = self._latest[e.call_id] = tool
        return True

    def _tool_update(self, e: ev.ToolUpdate) -> bool:
        tool = self._tools.get((e.submission_id, e.task_id, e.call_id))
        if tool is None:
            return False
        done = e.progress
        shown = f"{done:g}/{e.total:g}" if done is not None and e.total else f"{done:g}" if done is not None else ""
        tool.progress = " · ".join(p for p in (shown, e.message or "") if p)[:_SUMMARY_CHARS]
        self.dirty.add(self.block(e.submission_id).id)
        return True

    def _tool_end(self, e: ev.ToolEnd) -> bool:
        key = (e.submission_id, e.task_id, e.call_id)
        tool = self._tools.get(key)
        if tool is None:  # rebuilt history may hold a result without its start
            tool = self._tools[key] = self._latest[e.call_id] = ToolPart(e.call_id, e.name)
            self.parts(e).append(tool)
        details = e.details if isinstance(e.details, Mapping) else {}
        if e.approval is not None:
            tool.approval = e.approval
        denied = tool.approval is not None and tool.approval.approved is False
        if e.ended != "completed":
            tool.status = e.ended
        else:
            tool.status = "denied" if denied else ("error" if e.is_error else "ok")
        tool.duration_ms, tool.result, tool.is_error = e.duration_ms, unfenced(e.content), e.is_error
        tool.ask = tool.asked_at = tool.always = None
        tool.namespace = e.namespace
        tool.images = images_of(e)
        tool.details = dict(details) if details else None
        for image in e.images:
            if image.data is not None:
                self.images[image.digest] = image.data
        self.dirty.add(self.block(e.submission_id).id)
        return True

    def _task_start(self, e: ev.TaskStart) -> bool:
        task = TaskPart(e.agent, e.description or "", e.depth)
        parent = self._task_call(e)
        if parent is not None:
            parent.task = task
            parent.summary = one_line(f"{e.agent}: {e.description or ''}", _SUMMARY_CHARS)
        else:
            self.block(e.submission_id).parts.append(task)
        self._containers[(e.submission_id, e.task_id or "")] = task.parts
        return True

    def _task_call(self, e: ev.TaskStart | ev.TaskEnd) -> ToolPart | None:
        """The `task` call of this submission whose subagent `e` is about (the last started)."""
        for (sid, _, call_id), tool in reversed(self._tools.items()):
            if sid == e.submission_id and call_id == e.task_id and tool.name == "task":
                return tool
        return None

    def _task_end(self, e: ev.TaskEnd) -> bool:
        parent = self._task_call(e)
        task = parent.task if parent is not None else None
        if task is None:
            return False
        task.status = "error" if e.is_error else "ok"
        task.text, task.error = e.text, e.error
        self.dirty.add(self.block(e.submission_id).id)
        return True

    # --- the rest -----------------------------------------------------------------------------------

    def _compaction_start(self, e: ev.CompactionStart) -> bool:
        self._streaming.pop(e.task_id, None)
        self.parts(e).append(CompactionPart(e.reason, tokens_before=e.estimated_tokens))
        return True

    def _compaction_end(self, e: ev.CompactionEnd) -> bool:
        parts = self.parts(e)
        part = next((p for p in reversed(parts) if isinstance(p, CompactionPart) and p.running), None)
        if part is None:
            part = CompactionPart(e.reason)
            parts.append(part)
        part.running, part.reason, part.summary = False, e.reason, e.summary
        part.tokens_before, part.tokens_after = e.tokens_before, e.tokens_after
        part.messages_before, part.messages_after = e.messages_before, e.messages_after
        part.skipped, part.is_error, part.error = e.skipped, e.is_error, e.error
        self.status_dirty = True
        return True

    def _signal(self, e: ev.Signal) -> bool:
        self._streaming.pop(e.task_id, None)
        chip = SignalPart(e.signal_type, list(e.changes))
        parts = self.parts(e)
        if parts and parts[-1] == chip:
            return False
        parts.append(chip)
        return True

    def _log(self, e: ev.Log) -> bool:
        if e.kind not in _NOTED_LOGS:
            return False
        text = e.message if e.kind in _PLAIN_LOGS else f"{e.kind.replace('_', ' ')}: {e.message}"
        self.parts(e).append(NotePart(text, log=True))
        return True

    def _turn_end(self, e: ev.TurnEnd) -> bool:
        self.status_dirty = True
        if e.usage is None:
            if e.task_id is None:
                self.unreported += 1
            return False
        # Tokens are the agent's own; the cost also counts its subagents' calls.
        if e.task_id is None:
            for key, name in _USAGE_KEYS:
                self.usage[key] += getattr(e.usage, name)
        self.spend.add(e.priced_as or e.model, e.usage)
        if e.model and e.model not in self.models:
            self.models.append(e.model)
        return False

    # --- what views ask -------------------------------------------------------------------------------

    def tool(self, call_id: str, submission_id: str | None = None) -> ToolPart | None:
        """The card of a tool call, if this fold has seen it start: the last one started with that
        id (the live one), or with `submission_id`, that submission's."""
        if submission_id is None:
            return self._latest.get(call_id)
        for (sid, _, cid), tool in reversed(self._tools.items()):
            if sid == submission_id and cid == call_id:
                return tool
        return None

    def mark_tool(self, call_id: str, submission_id: str | None = None, **fields: Any) -> None:
        """Change a tool card from outside the event stream (awaiting approval, approved)."""
        tool = self.tool(call_id, submission_id)
        if tool is None:
            return
        for name, value in fields.items():
            setattr(tool, name, value)
        for sid, block in self.blocks.items():
            if not block.settled:
                self.dirty.add(sid)

    def text(self) -> str:
        """Every top-level answer text of every block, joined."""
        return "".join(
            p.text for b in self.blocks.values() for p in b.parts if isinstance(p, TextPart) and p.kind == "text"
        )

    def tool_trace(self) -> list[ToolPart]:
        """Every tool call seen (subagents' included), in the order they started."""
        return list(self._tools.values())


def _ends_with_text(parts: list[Part], text: str) -> bool:
    last = parts[-1] if parts else None
    return isinstance(last, TextPart) and last.kind == "text" and last.text == text


def _close_running(parts: list[Part], outcome: str) -> None:
    """Tool cards still running when their submission settled ended with it; so did those the
    runtime closed with an error result when the run stopped (a result with no duration: the call
    never returned), as they read live (`ToolEnd.ended`)."""
    stopped = outcome in ("aborted", "failed")
    for p in parts:
        if isinstance(p, ToolPart):
            closed = stopped and p.status == "error" and p.duration_ms is None
            if p.status in ("running", "awaiting_approval") or closed:
                p.status = "aborted" if outcome == "aborted" else "failed"
                p.ask = p.asked_at = p.always = None
            if p.task is not None:
                _close_running(p.task.parts, outcome)
        elif isinstance(p, CompactionPart):
            p.running = False


# The envelope the notebook tools put around notebook text (kernel/_envelope.fence) is for the
# model; a person reading the card sees the text alone.
_FENCE = re.compile(r'<notebook-data nonce="[0-9a-f]+">\n|\n</notebook-data nonce="[0-9a-f]+">')


def unfenced(text: str) -> str:
    """A tool result as a person reads it: the untrusted-data envelope's tags taken out."""
    return _FENCE.sub("", text) if "notebook-data" in text else text
