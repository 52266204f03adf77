"""A tool call's approval kept in the store, so every view of the conversation can answer it.

When a run under the `ask` policy has a store (a run of a session; a subagent's request is
recorded under the top-level submission whose `task` call runs it, as its other records are),
`with_approval` records the request (`open_ballot`, fenced by the run's lease) before asking
anyone. A view in another kernel draws it from the records and answers it with
`answer_request`; the asking kernel's approver waits for its own views, its stdin or that answer
(`Ballot.wait`), and every answer, wherever it comes from, goes through `Ballot.close` to
`Store.close_approval`: the first one wins, the others get it back. This kernel's own answer is
closed by `Ballot.decide`, once, whoever in the kernel asks first for the outcome. The records'
keys are in `flue_nb.runtime.store` (`APPROVAL_REQUEST`, `APPROVAL_ANSWER`).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Literal

from flue_nb.runtime.facts import ApprovalFacts
from flue_nb.runtime.store import APPROVAL_ANSWER as ANSWER
from flue_nb.runtime.store import APPROVAL_OUTCOMES as OUTCOMES
from flue_nb.runtime.store import APPROVAL_REQUEST as REQUEST
from flue_nb.runtime.store import Record, Store

__all__ = ["Answer", "Asked", "Ballot", "Outcome", "Unanswered", "answer_request", "approvals", "here", "open_ballot"]

_LOOK = 5.0
"""Seconds between two looks for an answer when the store announced nothing."""


def here() -> str:
    """This kernel (or process) as other views name it: its notebook (when the server said) and its process."""
    # A kernel loads its app before any flue_nb code runs; a script or `flue-nb` is no kernel.
    kind = "kernel" if "ipykernel.kernelapp" in sys.modules else "process"
    proc = f"{kind} {os.getpid()} on {socket.gethostname()}"
    name = os.environ.get("JPY_SESSION_NAME")  # set by jupyter_server for a notebook's kernel
    return f"{os.path.basename(name)} ({proc})" if name else proc


@dataclass(frozen=True, slots=True)
class Unanswered:
    """What an approver returns when it had no one to ask: the fallback policy decides."""

    reason: str
    """Why no one could be asked (`no chat widget shows this call and ...`), shown in the result."""


Outcome = Literal["approved", "denied", "ended"]
"""How a request closes: answered yes or no, or ended without an answer (timed out, asker gone)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """How an approval request closed."""

    outcome: Outcome
    by: str
    """Where it was answered (`here()` of the kernel that closed it)."""
    reason: str | None = None
    """Why it ended, for `ended`."""

    @property
    def approved(self) -> bool | None:
        """True or False for an answer, None for a request that ended without one."""
        return None if self.outcome == "ended" else self.outcome == "approved"

    @property
    def decision(self) -> bool | Unanswered:
        """The answer as an approver's result: `ended` is no answer."""
        return Unanswered(self.reason or "the request ended") if self.outcome == "ended" else self.outcome == "approved"

    def facts(self) -> ApprovalFacts:
        """What a view shows of this answer (before the call's result brings the policy's facts)."""
        if self.outcome == "ended":
            return ApprovalFacts("ended", detail=self.reason or "")
        approved = self.outcome == "approved"
        return ApprovalFacts("approved" if approved else "declined", approved, by=self.by)

    @classmethod
    def of(cls, record: Record) -> Answer:
        """The answer a closing record holds."""
        data = record.data[ANSWER]
        outcome = data.get("outcome")
        reason = data.get("reason")
        return cls(
            outcome if outcome in OUTCOMES else "ended",
            str(data.get("by") or ""),
            None if reason is None else str(reason),
        )


@dataclass(slots=True)
class Ballot:
    """One recorded approval request, answerable from any view of its conversation."""

    store: Store
    conversation_id: str
    seq: int
    """The request record's seq: what an answer names."""
    call_id: str
    _won: Answer | None = field(default=None, repr=False, compare=False)

    def decide(self, answer: bool | Unanswered) -> Answer | None:
        """Close the request with this kernel's answer (`Unanswered` ends it); the answer that won,
        ours or another view's that came first; None when the store could not be reached (ours
        stands). Every close of a request goes through here and is made once, so one click closes
        the record once however many parts of the kernel ask for the outcome."""
        if self._won is None:
            if isinstance(answer, Unanswered):
                outcome: Outcome = "ended"
                reason: str | None = f"no answer ({answer.reason})"
            else:
                outcome, reason = ("approved" if answer else "denied"), None
            try:
                self._won = self.close(outcome, reason=reason)
            except Exception:  # noqa: BLE001 - the store is away: this kernel's answer stands
                return None
        return self._won

    def close(self, outcome: Outcome, *, reason: str | None = None) -> Answer:
        """Close the request as `outcome` now (raises when the store fails); the answer that won.
        A kernel's own answer goes through `decide`, which closes once."""
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
    outcome: Outcome = "ended" if ended is not None else ("approved" if approved else "denied")
    return Ballot(store, conversation_id, seq, "").close(outcome, reason=ended)


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
    submission_id: str | None = None
    """The submission whose run asked (call ids repeat across submissions)."""


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
                r.submission_id,
            )
            latest[call_id] = r.seq
        elif isinstance(ans, dict) and ans.get("request") in asked:
            seq = int(ans["request"])
            a = asked[seq]
            asked[seq] = replace(a, answer=Answer.of(r))
    return {call_id: asked[seq] for call_id, seq in latest.items()}
