"""Closing what a stopped run left half-done, from what the store proves (contract 11.2)."""

from __future__ import annotations

from typing import Any

from flue_nb.runtime import events as ev
from flue_nb.runtime.core.transcript import Recorder, Transcript
from flue_nb.runtime.events import Emit
from flue_nb.runtime.messages import AssistantMessage, Message, SignalMessage, TextPart, ThinkingPart, ToolResultMessage
from flue_nb.runtime.store import Store

__all__ = ["INTERRUPTED_STREAM", "UNKNOWN_OUTCOME", "close_dangling", "keep_partial", "user_recorded"]

UNKNOWN_OUTCOME = (
    "Interrupted: the run stopped while this tool call was in progress; its outcome is unknown. "
    "Check the state before retrying it."
)
INTERRUPTED_STREAM = (
    "Your previous response was interrupted before it finished (the process running it stopped). "
    "The part that arrived is above. Continue from where it stopped."
)


def close_dangling(t: Transcript, recorder: Recorder, sid: str, text: str) -> list[dict[str, str]]:
    """Give every unanswered tool call an error result so the history stays well-formed."""
    calls = t.unresolved_calls()
    if not calls:
        return []
    results: list[Message] = [ToolResultMessage(c.id, c.name, text, is_error=True) for c in calls]
    t.commit(recorder, results, sid=sid)
    return [{"id": c.id, "name": c.name} for c in calls]


def keep_partial(
    store: Store, cid: str, sid: str, partial: dict[str, Any], recorder: Recorder, t: Transcript, emit: Emit
) -> None:
    """Keep a half-streamed response as an aborted message, exactly once (11.2).

    Observers see it as the events a redraw rebuilds for it (15.3), so a view that was drawn
    from the store before the recovery still shows what had streamed.
    """
    stream_id = partial.get("stream_id")
    kept = stream_id is not None and any(
        r.data.get("kept_stream") == stream_id for r in store.records(cid, kinds=["event"], submission_id=sid)
    )
    parts: list[Any] = []
    if partial.get("thinking"):
        parts.append(ThinkingPart(partial["thinking"]))
    if partial.get("text"):
        parts.append(TextPart(partial["text"]))
    if parts and not kept:
        msgs: list[Message] = [
            AssistantMessage(parts, aborted=True, stop_reason="interrupted"),
            SignalMessage("interrupted", INTERRUPTED_STREAM),
        ]
        # The marker commits with the messages, so a crash before the snapshot is cleared
        # cannot keep the same stream twice.
        t.commit(recorder, msgs, sid=sid, extra=[("event", {"kept_stream": stream_id})])
        kept_message = msgs[0]
        assert isinstance(kept_message, AssistantMessage)
        n = sum(1 for m, s in zip(t.messages, t.sids) if isinstance(m, AssistantMessage) and s == sid)
        turn_id = f"t{n}"
        emit(ev.TurnStart(turn=n, turn_id=turn_id))
        emit(ev.MessageStart(role="assistant", turn_id=turn_id))
        if partial.get("thinking"):
            emit(ev.ThinkingDelta(delta=partial["thinking"], turn_id=turn_id))
        if partial.get("text"):
            emit(ev.TextDelta(delta=partial["text"], turn_id=turn_id))
        emit(ev.MessageEnd(role="assistant", text=kept_message.text, aborted=True, turn_id=turn_id))
    store.clear_partial(sid)


def user_recorded(store: Store, cid: str, sid: str) -> bool:
    """True when the submission's own message is already in the record stream."""
    return any(r.data.get("kind") == "user" for r in store.records(cid, kinds=["message"], submission_id=sid))
