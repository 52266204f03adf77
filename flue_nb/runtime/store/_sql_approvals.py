"""`SQLApprovals`: an approval request and its one answer, kept in the record stream.

A tool call waiting for approval is recorded as an `event` record holding `approval_request`
(who asks: the lease holder, where, the call and its summary); whoever answers it, from any
kernel, appends one `event` record holding `approval_answer` naming the request's seq. The
answer goes through `close_approval`, one transaction under the conversation's lock, so two
answers cannot both win: the second caller gets the first answer back. A request whose asker is
gone (its submission settled, or it no longer holds a live lease) can only be closed as
`ended`: an Approve clicked after the asking kernel died changes nothing.
"""

from __future__ import annotations

from typing import Any

from flue_nb.runtime.errors import StoreError
from flue_nb.runtime.store import APPROVAL_ANSWER as ANSWER
from flue_nb.runtime.store import APPROVAL_OUTCOMES as OUTCOMES
from flue_nb.runtime.store import APPROVAL_REQUEST as REQUEST
from flue_nb.runtime.store import Record
from flue_nb.runtime.store._dialect import Tx
from flue_nb.runtime.store._rows import SETTLED, dump_json, load_json
from flue_nb.runtime.store._sql_base import SQLBase

__all__ = ["SQLApprovals"]


class SQLApprovals(SQLBase):
    """`close_approval` over one SQL database."""

    def close_approval(self, conversation_id: str, request_seq: int, answer: dict[str, Any], *, now: float) -> Record:
        if answer.get("outcome") not in OUTCOMES:
            raise ValueError(f"an approval answer's outcome must be one of {OUTCOMES}, not {answer.get('outcome')!r}")
        d = self.dialect
        key = self._key(conversation_id)

        def tx(tx: Tx) -> Record:
            self._lock_conversation(tx, key, now)
            row = tx.one(
                f"SELECT {d.record_columns} FROM records WHERE seq = ? AND conversation_id = ? AND kind = 'event'",
                (request_seq, key),
            )
            request = self._record(row) if row is not None else None
            asked = request.data.get(REQUEST) if request is not None else None
            if request is None or not isinstance(asked, dict):
                raise StoreError(
                    f"record {request_seq} is not an approval request of conversation {conversation_id!r}",
                    conversation_id=conversation_id,
                )
            for later in tx.run(
                f"SELECT {d.record_columns} FROM records WHERE conversation_id = ? AND kind = 'event' AND seq > ?"
                " ORDER BY seq",
                (key, request_seq),
            ):
                found = self._record(later)
                closed = found.data.get(ANSWER)
                if isinstance(closed, dict) and closed.get("request") == request_seq:
                    return found
            data = {**answer, "request": request_seq}
            if data["outcome"] != "ended":
                gone = self._asker_gone(tx, key, request.submission_id, asked.get("owner"))
                if gone is not None:
                    data = {**data, "outcome": "ended", "reason": gone}
            text = dump_json({ANSWER: data}, "an approval answer")
            out = tx.one(
                "INSERT INTO records (conversation_id, submission_id, kind, data, created_at)"
                f" VALUES (?, ?, 'event', {d.json_param}, ?) RETURNING seq",
                (key, request.submission_id, text, now),
            )
            assert out is not None
            self._changed(tx, key)
            return Record(out[0], conversation_id, request.submission_id, "event", load_json(text), float(now))

        return self._run(tx, write=True)

    def _asker_gone(self, tx: Tx, key: str, submission_id: str | None, owner: Any) -> str | None:
        """Why the request's asker can no longer act on an answer, or None while it can."""
        if submission_id is not None:
            row = tx.one("SELECT state FROM submissions WHERE id = ?", (submission_id,))
            if row is None or row[0] == SETTLED:
                return "its run ended before an answer"
        row = tx.one(
            f"SELECT lease_owner, lease_expires > {self.dialect.now} FROM conversations WHERE id = ?",
            (key,),
        )
        if row is None or row[0] is None or row[0] != owner:
            return "the kernel that asked no longer runs the conversation"
        if not row[1]:
            return "the kernel that asked stopped answering (its lease ran out)"
        return None
