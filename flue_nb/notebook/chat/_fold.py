"""The chat widget's model of a conversation: events folded into JSON-ready blocks.

Pure: no widget, no IPython. `ChatFold.apply(event)` takes the runtime's typed events (live, or
rebuilt from the store by `Session.events()`) and keeps one block per submission, each with the
parts the widget draws in order: streamed text, thinking, tool cards (a `task` card nests its
subagent's parts), signal chips, compaction dividers, notes. `snapshot()` returns what changed as
plain lists and dicts, which the widget syncs to the browser.

Streamed text is kept as a list of chunks and joined only when a snapshot is taken, so a
10,000-delta answer costs one join per update, not one copy per delta.
"""

from __future__ import annotations

import json
from typing import Any

from flue_nb.notebook.cells.view import call_summary
from flue_nb.runtime.events import (
    CompactionEnd,
    CompactionStart,
    Event,
    Log,
    MessageEnd,
    MessageStart,
    Signal,
    SubmissionQueued,
    SubmissionRecovery,
    SubmissionRunning,
    SubmissionSettled,
    TaskEnd,
    TaskStart,
    TextDelta,
    ThinkingDelta,
    ToolEnd,
    ToolStart,
    ToolUpdate,
    TurnEnd,
)

__all__ = ["RESULT_CHARS", "ChatFold"]

RESULT_CHARS = 4000
"""How much of a tool result (or its input) the widget receives; the card gives the full size."""
_SUMMARY_CHARS = 80
_KEY_ARG = {
    "bash": "command", "read": "path", "write": "path", "edit": "path", "grep": "pattern",
    "glob": "pattern", "python": "code", "task": "description",
}  # fmt: skip
_NOTED_LOGS = {"retry", "attempt_failed", "lease_lost", "idle_compaction_failed", "budget"}


def _clip(text: str, limit: int = RESULT_CHARS) -> dict[str, Any]:
    """The start of `text` plus its full size: what a card shows of a long value."""
    data = text.encode("utf-8", "replace")
    return {
        "text": text[:limit],
        "bytes": len(data),
        "lines": text.count("\n") + (1 if text and not text.endswith("\n") else 0),
        "clipped": len(text) > limit,
    }


def _summary(name: str, data: Any) -> str:
    data = data if isinstance(data, dict) else {}
    notebook = call_summary(name, data)  # the notebook tools say what they look at or write
    if notebook is not None:
        return notebook
    value = data.get(_KEY_ARG.get(name, ""))
    if not isinstance(value, str):
        value = next((v for v in data.values() if isinstance(v, str)), "")
    lines = [ln.strip() for ln in value.strip().splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    more = len(lines) > 1 or len(first) > _SUMMARY_CHARS
    return first[:_SUMMARY_CHARS] + ("…" if more else "")


def _names(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [str(k) for k in value]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return []


def _namespace(details: Any) -> dict[str, list[str]] | None:
    """The `python` tool's namespace diff (details `namespace`, or `variables` before it)."""
    if not isinstance(details, dict):
        return None
    diff = details.get("namespace") or details.get("variables")
    if not isinstance(diff, dict):
        return None
    out = {
        "added": _names(diff.get("added", diff.get("created"))),
        "changed": _names(diff.get("changed")),
        "removed": _names(diff.get("removed", diff.get("deleted"))),
    }
    return out if any(out.values()) else {"added": [], "changed": [], "removed": []}


class ChatFold:
    """Blocks (one per submission) built from events; `only` keeps one submission (a cell view)."""

    def __init__(self, *, only: str | None = None) -> None:
        self.only = only
        self.blocks: dict[str, dict[str, Any]] = {}
        """Submission id → block, in the order they were first seen (admission order)."""
        self.usage = {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0}
        """Token totals over every model call seen (MessageEnd usage of assistant messages)."""
        self._containers: dict[str, list[dict[str, Any]]] = {}
        """A `task` call's id → the part list its subagent's events go into."""
        self._tools: dict[str, dict[str, Any]] = {}
        self._streaming: dict[str | None, dict[str, Any]] = {}
        """Per task id (None: the top level): the text part the next delta extends."""
        self._streamed: set[str | None] = set()
        self._aside = 0
        self._current_aside: str | None = None
        self.dirty: set[str] = set()
        """Blocks changed since the last `snapshot`."""
        self.settled_now: set[str] = set()
        """Blocks that settled since the last `snapshot` (they move from live to history)."""
        self.status_dirty = True
        """Something that changes the gauge or the queue happened (a turn, a settlement...)."""

    # --- folding ------------------------------------------------------------------------------

    def block(self, sid: str | None, text: str = "") -> dict[str, Any]:
        """The block for submission `sid`, created when first seen."""
        if sid is None:
            # Conversation-level events (a compaction while idle, `compact()`) go in a block of
            # their own between the submissions around them, drawn with the history.
            if self._current_aside is None:
                self._aside += 1
                self._current_aside = f"aside-{self._aside}"
            sid = self._current_aside
            self.settled_now.add(sid)
        found = self.blocks.get(sid)
        if found is None:
            if not sid.startswith("aside-"):
                self._current_aside = None
            found = self.blocks[sid] = {
                "id": sid, "kind": "aside" if sid.startswith("aside-") else "submission",
                "text": text, "state": "queued", "outcome": None, "error": None,
                "recovered": False, "joined_into": None, "result": None, "attempt": 0,
                "parts": [],
            }  # fmt: skip
            if found["kind"] == "aside":
                found["state"] = "settled"
        self.dirty.add(sid)
        return found

    def _parts(self, event: Event) -> list[dict[str, Any]]:
        if event.task_id is not None and event.task_id in self._containers:
            return self._containers[event.task_id]
        parts: list[dict[str, Any]] = self.block(event.submission_id)["parts"]
        return parts

    def _wanted(self, event: Event) -> bool:
        if self.only is None:
            return True
        return event.submission_id == self.only

    def apply(self, event: Event) -> bool:
        """Fold one event in; True when it changed what the widget shows."""
        if not self._wanted(event):
            return False
        sid = event.submission_id
        # Parts are the JSON the front end draws: plain dicts of mixed values.
        part: dict[str, Any] | None
        tool: dict[str, Any] | None
        task: dict[str, Any] | None
        match event:
            case SubmissionQueued(text=text, state=state):
                b = self.block(sid, text)
                b["text"] = text
                b["state"] = "joining" if state == "joining" else "queued"
                self.status_dirty = True
            case SubmissionRunning(attempt=attempt):
                b = self.block(sid)
                b["state"] = "running"
                b["attempt"] = attempt
                self.status_dirty = True
            case SubmissionRecovery(attempts=attempts):
                b = self.block(sid)
                b["recovered"] = True
                note = {"kind": "note", "text": f"↻ recovering after a restart (attempt {attempts + 1})"}
                if note not in b["parts"]:
                    b["parts"].append(note)
            case SubmissionSettled(outcome=outcome, result=result, error=error, joined_into=into, recovered=rec):
                b = self.block(sid)
                b["state"] = "joined" if into else "settled"
                b["outcome"] = outcome
                b["result"] = result
                b["joined_into"] = into
                b["recovered"] = b["recovered"] or rec
                b["error"] = {"type": error.type, "message": error.message} if error else None
                if rec and result and not self._has_text(b):
                    # A recovered run's answer may have been written by an earlier kernel.
                    b["parts"].append({"kind": "text", "chunks": [result]})
                self._close_running(b["parts"], outcome)
                self._streaming.clear()
                self.settled_now.add(sid or "")
                self.status_dirty = True
            case MessageStart(role="assistant"):
                self._streaming.pop(event.task_id, None)
                self._streamed.discard(event.task_id)
            case MessageEnd(role="user", text=text, from_submission_id=origin):
                if origin is not None and origin != sid:
                    # A message that joined this live response at a turn boundary (10.3).
                    part = {"kind": "user", "text": text, "from": origin}
                    if part not in self._parts(event):
                        self._parts(event).append(part)
                    if self.only is None:
                        joined = self.block(origin, text)
                        joined["state"] = "joined"
                        joined["joined_into"] = sid
                elif event.task_id is None:
                    b = self.block(sid, text)
                    b["text"] = b["text"] or text
            case MessageEnd(role="assistant", text=text, usage=usage, aborted=aborted):
                streamed = self._streaming.get(event.task_id)
                if text and event.task_id in self._streamed and streamed is not None:
                    # The stored text is the truth: deltas missed while a redraw read the store
                    # (or split across a reconnect) cannot leave the answer short.
                    if streamed["kind"] == "text":
                        streamed["chunks"][:] = [text]
                elif text and not self._ends_with_text(self._parts(event), text):
                    # Rebuilt from the store: the whole text, no deltas before it.
                    self._parts(event).append({"kind": "text", "chunks": [text]})
                if aborted:
                    self._parts(event).append({"kind": "note", "text": "(the answer was cut off)"})
                self._streaming.pop(event.task_id, None)
                self._streamed.discard(event.task_id)
                if usage is not None and event.task_id is None:
                    self.usage["input"] += usage.input_tokens
                    self.usage["output"] += usage.output_tokens
                    self.usage["cache_read"] += usage.cache_read_tokens
                    self.usage["cache_write"] += usage.cache_write_tokens
                    self.status_dirty = True
            case TextDelta(delta=delta) | ThinkingDelta(delta=delta):
                kind = "text" if isinstance(event, TextDelta) else "thinking"
                part = self._streaming.get(event.task_id)
                if part is None or part["kind"] != kind:
                    part = {"kind": kind, "chunks": []}
                    self._parts(event).append(part)
                    self._streaming[event.task_id] = part
                part["chunks"].append(delta)
                if kind == "text":
                    self._streamed.add(event.task_id)
                self.dirty.add(sid or "")
            case ToolStart(call_id=call_id) if call_id in self._tools:
                return False  # seen twice: once redrawn from the store, once live
            case ToolStart(call_id=call_id, name=name, input=data):
                self._streaming.pop(event.task_id, None)
                try:
                    shown = json.dumps(dict(data), ensure_ascii=False, indent=1, default=str)
                except (TypeError, ValueError):
                    shown = str(data)
                tool = {
                    "kind": "tool", "call_id": call_id, "name": name,
                    "summary": _summary(name, dict(data)), "input": _clip(shown),
                    "status": "running", "duration_ms": None, "result": None,
                    "namespace": None, "approval": None, "task": None,
                }  # fmt: skip
                self._parts(event).append(tool)
                self._tools[call_id] = tool
            case ToolUpdate(call_id=call_id, progress=done, total=total, message=message) if call_id in self._tools:
                shown = f"{done:g}/{total:g}" if done is not None and total else f"{done:g}" if done is not None else ""
                self._tools[call_id]["progress"] = " · ".join(p for p in (shown, message or "") if p)[:_SUMMARY_CHARS]
                self.dirty.add(sid or "")
            case ToolEnd(
                call_id=call_id,
                name=name,
                is_error=is_error,
                content=content,
                duration_ms=ms,
                details=details,
                ended=ended,
            ):
                tool = self._tools.get(call_id)
                if tool is None:  # rebuilt history may hold a result without its start
                    tool = {
                        "kind": "tool", "call_id": call_id, "name": name, "summary": "",
                        "input": _clip(""), "namespace": None, "approval": None, "task": None,
                    }  # fmt: skip
                    self._parts(event).append(tool)
                    self._tools[call_id] = tool
                tool["status"] = ended if ended != "completed" else ("error" if is_error else "ok")
                tool["duration_ms"] = ms
                tool["result"] = _clip(content)
                if name == "python":
                    tool["namespace"] = _namespace(details)
                approval = (details or {}).get("approval") if isinstance(details, dict) else None
                if isinstance(approval, dict):
                    tool["approval"] = {k: approval.get(k) for k in ("approved", "reason", "fallback", "via")}
                self.dirty.add(sid or "")
            case TaskStart(agent=agent, description=description, depth=depth):
                task = {
                    "kind": "task", "agent": agent, "description": description or "",
                    "depth": depth, "status": "running", "text": None, "error": None, "parts": [],
                }  # fmt: skip
                parent = self._tools.get(event.task_id or "")
                if parent is not None:
                    parent["task"] = task
                else:
                    self.block(sid)["parts"].append(task)
                self._containers[event.task_id or ""] = task["parts"]
                self.dirty.add(sid or "")
            case TaskEnd(is_error=is_error, text=text, error=error):
                parent = self._tools.get(event.task_id or "")
                task = parent.get("task") if parent else None
                if task is not None:
                    task["status"] = "error" if is_error else "ok"
                    task["text"] = text
                    task["error"] = error
                self.dirty.add(sid or "")
            case CompactionStart(reason=reason, estimated_tokens=tokens):
                self._streaming.pop(event.task_id, None)
                self._parts(event).append({
                    "kind": "compaction", "reason": reason, "running": True,
                    "tokens_before": tokens, "tokens_after": None, "summary": None,
                    "skipped": False, "is_error": False, "error": None,
                })  # fmt: skip
            case CompactionEnd():
                parts = self._parts(event)
                part = next((p for p in reversed(parts) if p["kind"] == "compaction" and p["running"]), None)
                if part is None:
                    part = {"kind": "compaction"}
                    parts.append(part)
                part.update(
                    reason=event.reason, running=False, tokens_before=event.tokens_before,
                    tokens_after=event.tokens_after, summary=event.summary, skipped=event.skipped,
                    is_error=event.is_error, error=event.error,
                    messages_before=event.messages_before, messages_after=event.messages_after,
                )  # fmt: skip
                self.status_dirty = True
            case Signal(signal_type=kind, changes=changes):
                self._streaming.pop(event.task_id, None)
                chip = {"kind": "signal", "signal_type": kind, "changes": list(changes)}
                parts = self._parts(event)
                if not parts or parts[-1] != chip:
                    parts.append(chip)
            case Log(kind=kind, message=message) if kind in _NOTED_LOGS:
                self._parts(event).append({"kind": "note", "text": f"{kind.replace('_', ' ')}: {message}"})
            case TurnEnd():
                self.status_dirty = True
                return False
            case _:
                return False
        return True

    @staticmethod
    def _ends_with_text(parts: list[dict[str, Any]], text: str) -> bool:
        return bool(parts) and parts[-1]["kind"] == "text" and _join(parts[-1]) == text

    @staticmethod
    def _has_text(block: dict[str, Any]) -> bool:
        return any(p["kind"] == "text" and any(p["chunks"]) for p in block["parts"])

    def _close_running(self, parts: list[dict[str, Any]], outcome: str) -> None:
        """Tool cards still running when their submission settled ended with it."""
        for p in parts:
            if p["kind"] == "tool":
                if p["status"] in ("running", "awaiting_approval"):
                    p["status"] = "aborted" if outcome == "aborted" else "failed"
                if p.get("task"):
                    self._close_running(p["task"]["parts"], outcome)
            elif p["kind"] == "compaction" and p.get("running"):
                p["running"] = False

    # --- approval state (set by the widget, not by events) ------------------------------------

    def tool(self, call_id: str) -> dict[str, Any] | None:
        """The card of a tool call, if this fold has seen it start."""
        return self._tools.get(call_id)

    def mark_tool(self, call_id: str, **fields: Any) -> None:
        """Change a tool card from outside the event stream (awaiting approval, approved)."""
        tool = self._tools.get(call_id)
        if tool is not None:
            tool.update(fields)
            for sid, block in self.blocks.items():
                if block["state"] not in ("settled", "joined"):
                    self.dirty.add(sid)

    # --- snapshots ----------------------------------------------------------------------------

    def history(self) -> list[dict[str, Any]]:
        """Settled (and joined) blocks, as plain data, in admission order."""
        return [_plain(b) for b in self.blocks.values() if b["state"] in ("settled", "joined")]

    def live(self) -> list[dict[str, Any]]:
        """Blocks still queued or running, as plain data."""
        return [_plain(b) for b in self.blocks.values() if b["state"] not in ("settled", "joined")]

    def text(self) -> str:
        """Every text part of every block, joined: what the widget shows as the answers."""
        out: list[str] = []
        for b in self.blocks.values():
            for p in b["parts"]:
                if p["kind"] == "text":
                    out.append(_join(p))
        return "".join(out)


def _join(part: dict[str, Any]) -> str:
    chunks = part["chunks"]
    if len(chunks) > 1:
        chunks[:] = ["".join(chunks)]
    return chunks[0] if chunks else ""


def _plain_parts(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for p in parts:
        if "chunks" in p:
            out.append({"kind": p["kind"], "text": _join(p)})
        elif p["kind"] == "tool" and p.get("task") is not None:
            task = dict(p["task"], parts=_plain_parts(p["task"]["parts"]))
            out.append(dict(p, task=task))
        elif p["kind"] == "task":
            out.append(dict(p, parts=_plain_parts(p["parts"])))
        else:
            out.append(dict(p))
    return out


def _plain(block: dict[str, Any]) -> dict[str, Any]:
    return dict(block, parts=_plain_parts(block["parts"]))
