"""The store side of the context window: recording a run, and rebuilding the window from records."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from flue_nb.runtime.core.compaction import compacted_context
from flue_nb.runtime.core.transcript import Transcript
from flue_nb.runtime.messages import Message, ToolResultMessage, message_from_dict, message_images, message_to_dict
from flue_nb.runtime.store import Record, RecordKind, Store, SubmissionUpdate
from flue_nb.runtime.tools.bound import bound_result, over_limit

__all__ = ["WINDOW_KINDS", "StoreRecorder", "load_images", "load_window", "newer", "put_images"]

WINDOW_KINDS: list[RecordKind] = ["message", "system", "compaction", "state"]
"""The records a window in memory mirrors (with the persistent state): one newer than what a
process loaded or wrote itself means another process wrote the conversation since."""


def put_images(store: Store, messages: Sequence[Message]) -> None:
    """Keep the bytes of every image the messages carry in the store's blob table (once each)."""
    for m in messages:
        for image in message_images(m):
            if image.data is not None:
                store.put_blob(image.digest, image.data)


def load_images(store: Store, messages: Sequence[Message]) -> None:
    """Fill in the bytes of the messages' images from the blob table (each digest read once)."""
    cache: dict[str, bytes | None] = {}
    for m in messages:
        for image in message_images(m):
            if image.data is None:
                if image.digest not in cache:
                    cache[image.digest] = store.blob(image.digest)
                image.data = cache[image.digest]


class StoreRecorder:
    """Appends a run's messages, state writes and steps to the store, one transaction a call."""

    def __init__(
        self,
        store: Store,
        conversation_id: str,
        submission_id: str | None,
        clock: Callable[[], float],
        *,
        owner: str | None = None,
        wrote: Callable[[int], None] | None = None,
    ) -> None:
        self.store = store
        self.cid = conversation_id
        self.sid = submission_id
        self.clock = clock
        self.owner = owner
        """The lease holder writing; a writer that lost its lease is refused (`SessionBusyError`)."""
        self.wrote = wrote
        """Told the seq of the last record of each append (what this process wrote itself)."""

    def append(
        self,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
        extra: Sequence[tuple[str, dict[str, Any]]] = (),
        updates: Sequence[SubmissionUpdate] = (),
    ) -> list[int | None]:
        """Persist messages, state writes, extra records and submission updates atomically."""
        # Image bytes first, by digest: a record never names a blob the store does not hold.
        put_images(self.store, messages)
        items: list[tuple[Any, dict[str, Any]]] = [("message", message_to_dict(m)) for m in messages]
        items += [("state", {"name": k, "value": v}) for k, v in (state or {}).items()]
        items += list(extra)
        if not items:
            return []
        records = self.store.append(
            self.cid, self.sid, items, now=self.clock(), owner=self.owner, updates=list(updates)
        )
        if self.wrote is not None and records:
            self.wrote(records[-1].seq)
        return [r.seq for r in records[: len(messages)]]

    def partial(self, data: dict[str, Any] | None) -> None:
        """Snapshot the streaming response, or forget it."""
        if self.sid is None:
            return
        if data is None:
            self.store.clear_partial(self.sid)
        else:
            self.store.put_partial(self.sid, data)

    def step(self, call_id: str, name: str, value: Any) -> None:
        """Record one durable step's value."""
        self.store.append(
            self.cid,
            self.sid,
            [("step", {"call_id": call_id, "name": name, "value": value})],
            now=self.clock(),
            owner=self.owner,
        )

    def steps(self, call_id: str) -> dict[str, Any]:
        """The recorded steps of one tool call."""
        return {
            r.data["name"]: r.data["value"]
            for r in self.store.records(self.cid, kinds=["step"])
            if r.data.get("call_id") == call_id
        }


def _message(data: dict[str, Any]) -> Message:
    m = message_from_dict(data)
    if isinstance(m, ToolResultMessage) and over_limit(m.content):
        # Stored before every result was bounded (issue 20.1): left whole, it would ride along in
        # every later request and overflow the window again after each compaction.
        m = replace(m, content=bound_result(m.content))
    return m


def load_window(store: Store, conversation_id: str) -> tuple[Transcript, dict[str, Any], int]:
    """Rebuild the current window (frozen prompt, roster, messages) and the persistent state;
    the seq of the newest of the `WINDOW_KINDS` records they reflect."""
    t = Transcript()
    records = store.records(conversation_id, kinds=["message", "system", "compaction", "event"])
    seen = max((r.seq for r in records if r.kind != "event"), default=0)
    # State records come after the messages they were written with; reading them all would
    # cost a load as much again for what one short read after the last message tells.
    seen = max((r.seq for r in store.records(conversation_id, after_seq=seen, kinds=["state"])), default=seen)
    last_compaction = None
    for r in records:
        if r.kind == "compaction":
            last_compaction = r
        elif r.kind == "system":
            t.system = r.data["text"]
            t.roster = r.data.get("roster")
        elif r.kind == "event" and "roster" in r.data:
            t.roster = r.data["roster"]
    msgs = [r for r in records if r.kind == "message"]
    if last_compaction is None:
        t.reset([_message(r.data) for r in msgs], [r.seq for r in msgs], [r.submission_id for r in msgs])
    else:
        first = last_compaction.data["first_kept_seq"]
        kept = [r for r in msgs if r.seq >= first]
        context = compacted_context(last_compaction.data["summary"], [_message(r.data) for r in kept])
        t.reset(context, [None, *(r.seq for r in kept)], [None, *(r.submission_id for r in kept)])
    load_images(store, t.messages)
    return t, store.state(conversation_id), seen


def newer(store: Store, conversation_id: str, seq: int) -> list[Record]:
    """The `WINDOW_KINDS` records after `seq`: what a window that mirrors up to `seq` lacks."""
    return store.records(conversation_id, after_seq=seq, kinds=WINDOW_KINDS)
