"""A tool call's approval kept in the store, so every view of the conversation can answer it.

When a run under the `ask` policy has a store (a run of a session; a subagent's request is
recorded under the top-level submission whose `task` call runs it, as its other records are),
`with_approval` records the request (`open_ballot`, fenced by the run's lease) before asking
anyone. A view in another kernel draws it from the records and answers it with
`answer_request`; the asking kernel's approver waits for its own views, its stdin or that answer
(`Ballot.wait`), and every answer, wherever it comes from, goes through `Store.close_approval`:
the first one wins, the others get it back. The records' shapes are in `flue_nb.runtime.store._sql_approvals`.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from dataclasses import dataclass

from flue_nb.runtime.store import Record, Store
from flue_nb.runtime.store._sql_approvals import ANSWER, REQUEST

__all__ = ["Answer", "Asked", "Ballot", "answer_request", "approvals", "here", "open_ballot"]

_LOOK = 5.0
"""Seconds between two looks for an answer when the store announced nothing."""


def here() -> str:
    """This kernel as other views name it: its notebook (when the server said) and its process."""
    proc = f"kernel {os.getpid()} on {socket.gethostname()}"
    name = os.environ.get("JPY_SESSION_NAME")  # set by jupyter_server for a notebook's kernel
    return f"{os.path.basename(name)} ({proc})" if name else proc


@dataclass(frozen=True, slots=True)
class Answer:
    """How an approval request closed."""

    outcome: str
    """`approved`, `denied`, or `ended` (no answer: timed out, the asker gone)."""
    by: str
    """Where it was answered (`here()` of the kernel that closed it)."""
    reason: str | None = None
    """Why it ended, for `ended`."""

    @property
    def approved(self) -> bool | None:
        """True or False for an answer, None for a request that ended without one."""
        return None if self.outcome == "ended" else self.outcome == "approved"

    @classmethod
    def of(cls, record: Record) -> Answer:
        """The answer a closing record holds."""
        data = record.data[ANSWER]
        reason = data.get("reason")
        return cls(str(data.get("outcome")), str(data.get("by") or ""), None if reason is None else str(reason))


@dataclass(frozen=True, slots=True)
class Ballot:
    """One recorded approval request, answerable from any view of its conversation."""

    store: Store
    conversation_id: str
    seq: int
    """The request record's seq: what an answer names."""
    call_id: str

    def close(self, outcome: str, *, reason: str | None = None) -> Answer:
        """Answer from this kernel (or end it); the answer that won, ours or an earlier one."""
        record = self.store.close_approval(
            self.conversation_id, self.seq, {"outcome": outcome, "by": here(), "reason": reason}, now=time.time()
        )
        return Answer.of(record)

    def answer(self) -> Answer | None:
        """The answer, if the request was closed (one look at the records after it)."""
        for r in self.store.records(self.conversation_id, after_seq=self.seq, kinds=["event"]):
            data = r.data.get(ANSWER)
            if isinstance(data, dict) and data.get("request") == self.seq:
                return Answer.of(r)
        return None

    async def wait(self) -> Answer:
        """Until the request is closed, by any view (woken by the store's `watch`)."""
        watch = self.store.watch(self.conversation_id)
        stop = threading.Event()

        def blocking() -> Answer | None:
            while not stop.is_set():
                found = self.answer()
                if found is not None:
                    return found
                watch.wait(_LOOK)
            return None

        try:
            found = await asyncio.to_thread(blocking)
        finally:
            stop.set()
            watch.close()
        assert found is not None
        return found


def open_ballot(
    store: Store, conversation_id: str, submission_id: str, owner: str, *, call_id: str, tool: str, summary: str
) -> Ballot:
    """Record an approval request of the run holding the lease as `owner` (raises if it lost it)."""
    data = {
        "call_id": call_id,
        "tool": tool,
        "summary": summary,
        "owner": owner,
        "where": here(),
        "asked_at": time.time(),
    }
    [record] = store.append(conversation_id, submission_id, [("event", {REQUEST: data})], now=time.time(), owner=owner)
    return Ballot(store, conversation_id, record.seq, call_id)


def answer_request(store: Store, conversation_id: str, seq: int, approved: bool, *, ended: str | None = None) -> Answer:
    """A view's click on another kernel's request (or, with `ended`, its end); the answer that won."""
    outcome = "ended" if ended is not None else ("approved" if approved else "denied")
    record = store.close_approval(
        conversation_id, seq, {"outcome": outcome, "by": here(), "reason": ended}, now=time.time()
    )
    return Answer.of(record)


@dataclass(frozen=True, slots=True)
class Asked:
    """A recorded request as a view draws it: what was asked, by whom, and its answer if any."""

    seq: int
    call_id: str
    summary: str
    owner: str
    where: str
    asked_at: float
    answer: Answer | None


def approvals(records: list[Record]) -> dict[str, Asked]:
    """The latest request of each tool call among `records` (a conversation's, in order)."""
    asked: dict[int, Asked] = {}
    latest: dict[str, int] = {}
    for r in records:
        if r.kind != "event":
            continue
        req, ans = r.data.get(REQUEST), r.data.get(ANSWER)
        if isinstance(req, dict):
            call_id = str(req.get("call_id"))
            asked[r.seq] = Asked(
                r.seq,
                call_id,
                str(req.get("summary") or ""),
                str(req.get("owner") or ""),
                str(req.get("where") or ""),
                float(req.get("asked_at") or r.created_at),
                None,
            )
            latest[call_id] = r.seq
        elif isinstance(ans, dict) and ans.get("request") in asked:
            seq = int(ans["request"])
            a = asked[seq]
            asked[seq] = Asked(a.seq, a.call_id, a.summary, a.owner, a.where, a.asked_at, Answer.of(r))
    return {call_id: asked[seq] for call_id, seq in latest.items()}
