"""Approvals another kernel asked for, drawn on this chat's cards and answered from here.

A run in kernel A records its approval request in the store (`runtime.tools.ballot`). A chat of
the same conversation in kernel B draws its cards from the records, so after each redraw
`overlay` marks the card of every call still waiting: Approve / Deny while the asking kernel
still holds the conversation, "the request ended" once it does not (it died, or another kernel
took the conversation over), and, once answered, who answered where. A click on such a card is
`answer`: the store decides whether it was the first answer, and nothing an ended request is
given takes effect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flue_nb.runtime.facts import ApprovalFacts
from flue_nb.runtime.tools.ballot import Asked, answer_request, approvals

if TYPE_CHECKING:
    from flue_nb.notebook.views.chat._fold import ChatFold
    from flue_nb.runtime.session import Session

__all__ = ["answer", "overlay"]

_GONE = "the kernel that asked stopped before an answer"


def overlay(fold: ChatFold, session: Session, after_seq: int = 0) -> dict[str, int]:
    """Mark the cards of recorded requests on `fold` (those recorded after `after_seq`, where
    its records begin); the seq of each one this chat may answer."""
    asked = approvals(session.store.records(session.conversation_id, kinds=["event"], after_seq=after_seq))
    if not asked:
        return {}
    lease = session.lease()
    open_here: dict[str, int] = {}
    for call_id, a in asked.items():
        sid = a.submission_id
        tool = fold.tool(call_id, sid)
        if tool is None or tool.status not in ("running", "awaiting_approval"):
            continue  # no card, or its result is in: the result's facts say how it was decided
        if a.answer is not None:
            fold.mark_tool(call_id, sid, status="running", ask=None, asked_at=None, approval=a.answer.facts())
        elif _alive(a, lease):
            # Also when this kernel asks: a chat opened after the question was put answers it
            # through the store, which the approver waits on too (a chat it asked has its own).
            fold.mark_tool(call_id, sid, status="awaiting_approval", ask=_question(a), asked_at=a.asked_at)
            open_here[call_id] = a.seq
        else:
            fold.mark_tool(call_id, sid, ask=None, asked_at=None, approval=ApprovalFacts("ended", detail=_GONE))
    return open_here


def answer(session: Session, seq: int, approved: bool) -> Any:
    """Answer another kernel's request from this chat; the answer that won (`ballot.Answer`)."""
    # The request and every answer to it come at or after its seq.
    asked = approvals(session.store.records(session.conversation_id, kinds=["event"], after_seq=seq - 1))
    found = next((a for a in asked.values() if a.seq == seq), None)
    lease = session.lease()
    ended = None if found is not None and _alive(found, lease) else _GONE
    return answer_request(session.store, session.conversation_id, seq, approved, ended=ended)


def _alive(a: Asked, lease: Any) -> bool:
    # The store fences an answer by the lease too; a holder that provably died (same host, its
    # process gone) is known here sooner than its lease runs out.
    return lease is not None and lease.owner == a.owner and not lease.gone


def _question(a: Asked) -> str:
    return f"{a.summary} (asked in {a.where})" if a.where else a.summary
