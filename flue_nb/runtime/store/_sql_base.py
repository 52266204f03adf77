"""`SQLBase`: the plumbing of `SQLStore` (rows, fences, compare-and-set) and conversation ownership.

A backend gives `dialect` and `_run` (one transaction); the rest of the protocol is in _sql.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from flue_nb.runtime.errors import SessionBusyError, StoreError
from flue_nb.runtime.store import ConversationSummary, Outcome, Record, Store, Submission, SubmissionState
from flue_nb.runtime.store._dialect import Dialect, Tx
from flue_nb.runtime.store._rows import FINAL, SETTLED, UNSETTLED, assignments, load_json

__all__ = ["SQLBase"]

T = TypeVar("T")


class SQLBase(Store):
    """Rows, fences and ownership over one SQL database; subclasses give `dialect` and `_run`.

    A `Store` by declaration, so each method's documentation is the protocol's (`help()` and
    `inspect.getdoc` find it there) and mypy checks every signature against it.
    """

    dialect: Dialect

    def _run(self, fn: Callable[[Tx], T], *, write: bool) -> T:
        """Run `fn` in one transaction (a write one excludes other writers) and commit it."""
        raise NotImplementedError

    # -- conversation ids as stored (PostgreSQL scopes them per user) ------------------------------

    def _key(self, conversation_id: str) -> str:
        return conversation_id

    def _cid(self, key: str) -> str:
        return key

    def _visible(self) -> tuple[str, tuple[Any, ...]]:
        """A condition on `c.id` for the conversations `conversations()` lists ("" for all)."""
        return "", ()

    # -- rows ---------------------------------------------------------------------------------------

    def _submission(self, row: tuple[Any, ...]) -> Submission:
        d = self.dialect
        (sid, key, seq, text, state, accepted_at, attempts, started_at, lease_owner, lease_expires) = row[:10]
        (abort_requested, joined_into, outcome, result, error, settled_at, settings) = row[10:]
        return Submission(
            id=sid,
            conversation_id=self._cid(key),
            seq=seq,
            text=d.decode_text(text) or "",
            state=SubmissionState(state),
            accepted_at=accepted_at,
            attempts=attempts,
            started_at=started_at,
            lease_owner=lease_owner,
            lease_expires=lease_expires,
            abort_requested=bool(abort_requested),
            joined_into=joined_into,
            outcome=None if outcome is None else Outcome(outcome),
            result=d.decode_text(result),
            error=load_json(error),
            settled_at=settled_at,
            settings=load_json(settings),
        )

    def _record(self, row: tuple[Any, ...]) -> Record:
        seq, key, submission_id, kind, data, created_at = row
        return Record(seq, self._cid(key), submission_id, kind, load_json(data), created_at)

    def _select_submission(self, tx: Tx, submission_id: str) -> Submission | None:
        row = tx.one(f"SELECT {self.dialect.submission_columns} FROM submissions WHERE id = ?", (submission_id,))
        return None if row is None else self._submission(row)

    # -- helpers inside a transaction ---------------------------------------------------------------

    def _lock_conversation(self, tx: Tx, key: str, now: float | None) -> None:
        """Create the conversation if needed (dated `now`, else by the database's clock) and
        lock its row: one lock order for every write, so a conversation's commit order is its
        `seq` order."""
        created = "?" if now is not None else self.dialect.now
        tx.run(
            f"INSERT INTO conversations (id, created_at) VALUES (?, {created}) ON CONFLICT (id) DO NOTHING",
            (key,) if now is None else (key, now),
        )
        if self.dialect.row_lock:
            tx.run(f"SELECT 1 FROM conversations WHERE id = ?{self.dialect.row_lock}", (key,))

    def _changed(self, tx: Tx, key: str) -> None:
        """Announce at commit that conversation `key` changed (PostgreSQL's NOTIFY; a watch on
        SQLite polls instead). Never sent for a write that rolls back."""
        if self.dialect.notify:
            tx.run(self.dialect.notify, (key,))

    def _fence(self, tx: Tx, key: str, owner: str) -> None:
        """Lock the conversation and raise `SessionBusyError` unless `owner` holds its lease.

        An expired lease that nobody took is still its owner's (as in `renew_lease`): no one else
        can have written in between, and it spares a clock comparison between processes.
        """
        row = tx.one(f"SELECT lease_owner FROM conversations WHERE id = ?{self.dialect.row_lock}", (key,))
        holder = None if row is None else row[0]
        if holder != owner:
            cid = self._cid(key)
            raise SessionBusyError(
                f"{owner!r} no longer owns conversation {cid!r} "
                f"({'it is free' if holder is None else f'{holder!r} does'}); nothing was written",
                conversation_id=cid,
                owner=owner,
                holder=holder,
            )

    def _fence_submission(self, tx: Tx, submission_id: str, owner: str | None) -> str | None:
        """Fence on the lease of the submission's conversation; its stored id, None if unknown."""
        row = tx.one("SELECT conversation_id FROM submissions WHERE id = ?", (submission_id,))
        if row is None:
            return None
        if owner is not None:
            self._fence(tx, row[0], owner)
        return str(row[0])

    def _encode(self, fields: dict[str, Any]) -> list[tuple[str, Any]]:
        d = self.dialect
        out = []
        for name, value in assignments(fields):
            if name == "result":
                value = d.encode_text(value, "a submission result")
            out.append((name, value))
        return out

    def _apply_update(
        self, tx: Tx, submission_id: str, expect: tuple[Any, ...], encoded: list[tuple[str, Any]]
    ) -> bool:
        """One compare-and-set on a submission (its row locked); True if it matched and applied."""
        d = self.dialect
        row = tx.one(f"SELECT state FROM submissions WHERE id = ?{d.row_lock}", (submission_id,))
        if row is None:
            return False
        state = row[0]
        if expect and state not in {SubmissionState(s).value for s in expect}:
            return False
        if state == SETTLED and any(name in FINAL for name, _ in encoded):
            return False  # the first terminal outcome wins, with its result and error
        if encoded:
            params = {"result": d.text_param, "error": d.json_param}
            columns = ", ".join(f"{name} = {params.get(name, '?')}" for name, _ in encoded)
            tx.run(f"UPDATE submissions SET {columns} WHERE id = ?", (*(v for _, v in encoded), submission_id))
        return True

    def _check_belongs(self, tx: Tx, key: str, submission_ids: Iterable[str]) -> None:
        """Raise `StoreError` unless every named submission exists in this conversation."""
        for sid in dict.fromkeys(submission_ids):
            row = tx.one("SELECT conversation_id FROM submissions WHERE id = ?", (sid,))
            if row is None:
                raise StoreError(f"submission {sid!r} is unknown; nothing was appended", submission_id=sid)
            if row[0] != key:
                raise StoreError(
                    f"submission {sid!r} belongs to conversation {self._cid(row[0])!r}, not "
                    f"{self._cid(key)!r}; nothing was appended",
                    submission_id=sid,
                    conversation_id=self._cid(key),
                )

    # -- conversations and ownership ----------------------------------------------------------------

    def ensure_conversation(self, conversation_id: str, *, now: float) -> None:
        key = self._key(conversation_id)
        self._run(lambda tx: self._lock_conversation(tx, key, now), write=True)

    def conversations(self) -> list[ConversationSummary]:
        where, params = self._visible()
        rows = self._run(
            lambda tx: tx.run(
                "SELECT c.id, c.created_at, COUNT(s.id),"
                " COALESCE(SUM(CASE WHEN s.outcome = 'completed' THEN 1 ELSE 0 END), 0),"
                " COALESCE(SUM(CASE WHEN s.outcome = 'failed' THEN 1 ELSE 0 END), 0),"
                " COALESCE(SUM(CASE WHEN s.outcome = 'aborted' THEN 1 ELSE 0 END), 0),"
                " COALESCE(SUM(CASE WHEN s.state <> 'settled' THEN 1 ELSE 0 END), 0)"
                " FROM conversations c LEFT JOIN submissions s ON s.conversation_id = c.id"
                f"{' WHERE ' + where if where else ''}"
                " GROUP BY c.id, c.created_at ORDER BY c.created_at, c.id",
                params,
            ),
            write=False,
        )
        return [
            ConversationSummary(self._cid(key), float(created), *(int(n) for n in counts))
            for key, created, *counts in rows
        ]

    def acquire_lease(self, conversation_id: str, owner: str, *, ttl: float, replacing: str | None = None) -> bool:
        key = self._key(conversation_id)
        now = self.dialect.now

        def tx(tx: Tx) -> bool:
            self._lock_conversation(tx, key, None)
            row = tx.one(
                f"UPDATE conversations SET lease_owner = ?, lease_expires = {now} + ?"
                f" WHERE id = ? AND (lease_owner IS NULL OR lease_expires <= {now} OR lease_owner IN (?, ?))"
                " RETURNING 1",
                (owner, ttl, key, owner, owner if replacing is None else replacing),
            )
            if row is not None:
                self._changed(tx, key)
            return row is not None

        return self._run(tx, write=True)

    def renew_lease(self, conversation_id: str, owner: str, *, ttl: float) -> bool:
        key = self._key(conversation_id)

        def tx(tx: Tx) -> bool:
            row = tx.one(
                f"UPDATE conversations SET lease_expires = {self.dialect.now} + ? WHERE id = ? AND lease_owner = ?"
                " RETURNING lease_expires",
                (ttl, key, owner),
            )
            if row is None:
                return False
            tx.run(
                "UPDATE submissions SET lease_owner = ?, lease_expires = ?"
                f" WHERE conversation_id = ? AND {UNSETTLED} AND state = ?",
                (owner, row[0], key, SubmissionState.RUNNING.value),
            )
            return True

        return self._run(tx, write=True)

    def release_lease(self, conversation_id: str, owner: str) -> None:
        key = self._key(conversation_id)

        def tx(tx: Tx) -> None:
            if tx.run(
                "UPDATE conversations SET lease_owner = NULL, lease_expires = NULL"
                " WHERE id = ? AND lease_owner = ? RETURNING 1",
                (key, owner),
            ):
                self._changed(tx, key)

        self._run(tx, write=True)

    def lease(self, conversation_id: str) -> tuple[str, float] | None:
        key = self._key(conversation_id)
        row = self._run(
            lambda tx: tx.one("SELECT lease_owner, lease_expires FROM conversations WHERE id = ?", (key,)),
            write=False,
        )
        if row is None or row[0] is None:
            return None
        return (row[0], float(row[1]))

    def clock(self) -> float:
        """The database's clock (seconds since the epoch): what lease expiry is measured in."""
        row = self._run(lambda tx: tx.one(f"SELECT {self.dialect.now}"), write=False)
        assert row is not None
        return float(row[0])
