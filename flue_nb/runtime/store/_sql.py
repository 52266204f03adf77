"""`SQLStore`: the `Store` protocol written once in SQL, over a `Dialect` per database engine.

Each backend (sqlite.py, postgres.py) supplies its dialect and one way to run a transaction
(`_run`); everything a `Store` method means is here, in `SQLBase` (_sql_base.py: rows, fences,
ownership) and in `SQLApprovals` (_sql_approvals.py: an approval's one answer). SQL is written
with `?` placeholders and the dialect's pieces (_dialect.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from flue_nb.runtime.errors import StoreError
from flue_nb.runtime.store import Outcome, Record, RecordKind, Submission, SubmissionState, SubmissionUpdate, Watch
from flue_nb.runtime.store._dialect import Dialect, Tx
from flue_nb.runtime.store._rows import BLOB_CHUNK, RECORD_KINDS, SETTLED, UNSETTLED, dump_json, load_json
from flue_nb.runtime.store._sql_approvals import SQLApprovals
from flue_nb.runtime.store._watch import PollWatch

__all__ = ["Dialect", "SQLStore", "Tx"]


class SQLStore(SQLApprovals):
    """The `Store` protocol over one SQL database; subclasses give `dialect` and `_run`."""

    # -- submissions --------------------------------------------------------------------------------

    def admit(
        self,
        conversation_id: str,
        text: str,
        *,
        submission_id: str,
        now: float,
        settings: dict[str, Any] | None = None,
    ) -> Submission:
        d = self.dialect
        key = self._key(conversation_id)
        encoded = d.encode_text(text, "a submission's text")
        settings_json = None if settings is None else dump_json(settings, "submission settings")

        def tx(tx: Tx) -> Submission:
            self._lock_conversation(tx, key, now)
            existing = self._select_submission(tx, submission_id)
            if existing is not None:
                if existing.conversation_id == conversation_id and existing.text == text:
                    return existing
                raise StoreError(
                    f"submission id {submission_id!r} is already taken by another submission",
                    submission_id=submission_id,
                )
            row = tx.one(
                "INSERT INTO submissions (id, conversation_id, text, state, accepted_at, settings)"
                f" VALUES (?, ?, {d.text_param}, ?, ?, {d.json_param}) RETURNING {d.submission_columns}",
                (submission_id, key, encoded, SubmissionState.QUEUED.value, now, settings_json),
            )
            assert row is not None
            self._changed(tx, key)
            return self._submission(row)

        return self._run(tx, write=True)

    def submission(self, submission_id: str) -> Submission | None:
        return self._run(lambda tx: self._select_submission(tx, submission_id), write=False)

    def submissions(
        self,
        conversation_id: str,
        *,
        unsettled: bool = False,
        last: int | None = None,
        before_seq: int | None = None,
    ) -> list[Submission]:
        sql = f"SELECT {self.dialect.submission_columns} FROM submissions WHERE conversation_id = ?"
        params: tuple[Any, ...] = (self._key(conversation_id),)
        if unsettled:
            sql += f" AND {UNSETTLED}"  # a literal: the submissions_unsettled index applies
        if before_seq is not None:
            sql += " AND seq < ?"
            params += (before_seq,)
        if last is None:
            rows = self._run(lambda tx: tx.run(sql + " ORDER BY seq", params), write=False)
        else:
            # The newest `last`, read backwards along the index, given back in admission order.
            rows = self._run(
                lambda tx: tx.run(sql + " ORDER BY seq DESC LIMIT ?", (*params, max(last, 0))), write=False
            )
            rows.reverse()
        return [self._submission(row) for row in rows]

    def count_submissions(self, conversation_id: str, *, before_seq: int | None = None) -> int:
        # The number the store gave the latest of them (migration 7), found by one descent of
        # submissions_by_conversation: a COUNT(*) read every entry, 10,000 in a long conversation.
        sql = "SELECT ordinal FROM submissions WHERE conversation_id = ?"
        params: tuple[Any, ...] = (self._key(conversation_id),)
        if before_seq is not None:
            sql += " AND seq < ?"
            params += (before_seq,)
        row = self._run(lambda tx: tx.one(sql + " ORDER BY seq DESC LIMIT 1", params), write=False)
        return int(row[0]) if row is not None else 0

    def joined_into(self, submission_id: str) -> list[Submission]:
        # By the submissions_by_joined_into index, not a scan of the conversation's submissions.
        sql = f"SELECT {self.dialect.submission_columns} FROM submissions WHERE joined_into = ? ORDER BY seq"
        rows = self._run(lambda tx: tx.run(sql, (submission_id,)), write=False)
        return [self._submission(row) for row in rows]

    def update_submission(
        self,
        submission_id: str,
        *,
        expect: Iterable[SubmissionState] = (),
        owner: str | None = None,
        **fields: Any,
    ) -> bool:
        encoded = self._encode(fields)
        expected = tuple(expect)

        def tx(tx: Tx) -> bool:
            key = self._fence_submission(tx, submission_id, owner)
            if key is None or not self._apply_update(tx, submission_id, expected, encoded):
                return False
            self._changed(tx, key)
            return True

        return self._run(tx, write=True)

    def settle(
        self,
        submission_id: str,
        outcome: Outcome,
        *,
        result: str | None = None,
        error: dict[str, Any] | None = None,
        now: float,
        owner: str | None = None,
    ) -> bool:
        # One compare-and-set (UPDATE ... WHERE state <> 'settled' RETURNING) settles it and the
        # submissions joined into it, each with its own settlement record, in one transaction.
        d = self.dialect
        outcome = Outcome(outcome)
        error_json = None if error is None else dump_json(error, "a settlement error")
        result_value = d.encode_text(result, "a settlement result")
        data = dump_json({"outcome": outcome.value, "result": result, "error": error}, "a settlement")
        joined_data = dump_json(
            {"outcome": outcome.value, "result": result, "error": error, "joined_into": submission_id},
            "a settlement",
        )
        insert = (
            "INSERT INTO records (conversation_id, submission_id, kind, data, created_at)"
            f" VALUES (?, ?, 'settlement', {d.json_param}, ?)"
        )

        def tx(tx: Tx) -> bool:
            row = tx.one("SELECT conversation_id, state FROM submissions WHERE id = ?", (submission_id,))
            if row is None:
                raise StoreError(f"cannot settle unknown submission {submission_id!r}", submission_id=submission_id)
            key, state = row
            if state == SETTLED:
                return False  # already settled: nothing changes, whoever asks
            if owner is not None:
                self._fence(tx, key, owner)
            else:
                self._lock_conversation(tx, key, now)
            settle_sql = (
                f"UPDATE submissions SET state = ?, outcome = ?, result = {d.text_param}, error = {d.json_param},"
                " settled_at = ?, lease_owner = NULL, lease_expires = NULL"
            )
            values = (SETTLED, outcome.value, result_value, error_json, now)
            won = tx.one(settle_sql + " WHERE id = ? AND state <> ? RETURNING seq", (*values, submission_id, SETTLED))
            if won is None:
                return False
            joined = tx.run(
                settle_sql + " WHERE joined_into = ? AND state <> ? RETURNING id, seq",
                (*values, submission_id, SETTLED),
            )
            # Every accepted submission gets its own settlement record (contract 10.4); a joined
            # one's names the response that absorbed it.
            for jid, _ in sorted(joined, key=lambda r: r[1]):
                tx.run(insert, (key, jid, joined_data, now))
            tx.run(insert, (key, submission_id, data, now))
            self._changed(tx, key)
            return True

        return self._run(tx, write=True)

    def request_abort(self, conversation_id: str) -> list[str]:
        key = self._key(conversation_id)

        def tx(tx: Tx) -> list[str]:
            rows = tx.run(
                f"UPDATE submissions SET abort_requested = ? WHERE conversation_id = ? AND {UNSETTLED} RETURNING id, seq",
                (True, key),
            )
            if rows:
                self._changed(tx, key)
            return [sid for sid, _ in sorted(rows, key=lambda r: r[1])]

        return self._run(tx, write=True)

    # -- the record stream --------------------------------------------------------------------------

    def append(
        self,
        conversation_id: str,
        submission_id: str | None,
        items: Sequence[tuple[RecordKind, dict[str, Any]]],
        *,
        now: float,
        updates: Sequence[SubmissionUpdate] = (),
        owner: str | None = None,
    ) -> list[Record]:
        d = self.dialect
        # Serialize before the transaction: a bad value fails without taking the write lock.
        encoded: list[tuple[RecordKind, str, dict[str, Any]]] = []
        for kind, data in items:
            if kind not in RECORD_KINDS:
                raise ValueError(f"unknown record kind {kind!r}; expected one of {sorted(RECORD_KINDS)}")
            if kind == "state" and not isinstance(data.get("name"), str):
                raise ValueError("a `state` record needs a string `name`")
            encoded.append((kind, dump_json(data, f"a {kind!r} record"), data))
        states = {
            i: dump_json(data.get("value"), f"state {data['name']!r}")
            for i, (kind, _, data) in enumerate(encoded)
            if kind == "state"
        }
        planned = [(u, self._encode(u.fields)) for u in updates]
        named = [*([submission_id] if submission_id is not None else []), *(u.submission_id for u in updates)]
        key = self._key(conversation_id)

        def tx(tx: Tx) -> list[Record]:
            if owner is not None:
                self._fence(tx, key, owner)
            else:
                self._lock_conversation(tx, key, now)
            self._check_belongs(tx, key, named)
            for update, columns in planned:
                if not self._apply_update(tx, update.submission_id, tuple(update.expect), columns):
                    current = self._select_submission(tx, update.submission_id)
                    state = None if current is None else current.state.value
                    wanted = [SubmissionState(s).value for s in update.expect]
                    raise StoreError(
                        f"submission {update.submission_id!r} is {state or 'unknown'}, not in "
                        f"{wanted}; nothing was appended",
                        submission_id=update.submission_id,
                        state=state,
                    )
            out: list[Record] = []
            for i, (kind, text, data) in enumerate(encoded):
                row = tx.one(
                    "INSERT INTO records (conversation_id, submission_id, kind, data, created_at)"
                    f" VALUES (?, ?, ?, {d.json_param}, ?) RETURNING seq",
                    (key, submission_id, kind, text, now),
                )
                assert row is not None
                if i in states:
                    tx.run(
                        f"INSERT INTO state (conversation_id, name, value) VALUES (?, ?, {d.json_param})"
                        " ON CONFLICT (conversation_id, name) DO UPDATE SET value = excluded.value",
                        (key, data["name"], states[i]),
                    )
                # Decode what was stored so the caller gets a copy, not its own dict back.
                out.append(Record(row[0], conversation_id, submission_id, kind, load_json(text), float(now)))
            if out or planned:
                self._changed(tx, key)
            return out

        return self._run(tx, write=True)

    def records(
        self,
        conversation_id: str,
        *,
        after_seq: int = 0,
        kinds: Iterable[RecordKind] | None = None,
        submission_id: str | None = None,
        before_seq: int | None = None,
    ) -> list[Record]:
        sql = f"SELECT {self.dialect.record_columns} FROM records WHERE conversation_id = ? AND seq > ?"
        params: list[Any] = [self._key(conversation_id), after_seq]
        if before_seq is not None:
            sql += " AND seq < ?"
            params.append(before_seq)
        if kinds is not None:
            wanted = list(kinds)
            if not wanted:
                return []
            sql += f" AND kind IN ({', '.join('?' * len(wanted))})"
            params.extend(wanted)
        if submission_id is not None:
            sql += " AND submission_id = ?"
            params.append(submission_id)
        rows = self._run(lambda tx: tx.run(sql + " ORDER BY seq", params), write=False)
        return [self._record(row) for row in rows]

    def state(self, conversation_id: str) -> dict[str, Any]:
        key = self._key(conversation_id)
        value = self.dialect.json_out.format("value")
        rows = self._run(
            lambda tx: tx.run(f"SELECT name, {value} FROM state WHERE conversation_id = ? ORDER BY name", (key,)),
            write=False,
        )
        return {name: load_json(v) for name, v in rows}

    def watch(self, conversation_id: str) -> Watch:
        return PollWatch()  # SQLite cannot tell another process; PostgresStore's is notified

    # -- the kept tally (issue 37) --------------------------------------------------------------------

    def tally(self, conversation_id: str) -> tuple[int, dict[str, Any]] | None:
        data = self.dialect.json_out.format("data")
        row = self._run(
            lambda tx: tx.one(
                f"SELECT seq, {data} FROM tallies WHERE conversation_id = ?", (self._key(conversation_id),)
            ),
            write=False,
        )
        return None if row is None else (int(row[0]), load_json(row[1]))

    def keep_tally(self, conversation_id: str, seq: int, data: dict[str, Any]) -> None:
        text = dump_json(data, "a tally")
        self._run(
            lambda tx: tx.run(
                f"INSERT INTO tallies (conversation_id, seq, data) VALUES (?, ?, {self.dialect.json_param})"
                " ON CONFLICT (conversation_id) DO UPDATE SET seq = excluded.seq, data = excluded.data"
                " WHERE tallies.seq < excluded.seq",
                (self._key(conversation_id), seq, text),
            ),
            write=True,
        )

    # -- partial responses (contract 11.2) ----------------------------------------------------------

    def put_partial(self, submission_id: str, data: dict[str, Any], *, owner: str | None = None) -> None:
        text = dump_json(data, "a partial response")

        def tx(tx: Tx) -> None:
            self._fence_submission(tx, submission_id, owner)
            tx.run(
                f"INSERT INTO partials (submission_id, data) VALUES (?, {self.dialect.json_param})"
                " ON CONFLICT (submission_id) DO UPDATE SET data = excluded.data",
                (submission_id, text),
            )

        self._run(tx, write=True)

    def partial(self, submission_id: str) -> dict[str, Any] | None:
        data = self.dialect.json_out.format("data")
        row = self._run(
            lambda tx: tx.one(f"SELECT {data} FROM partials WHERE submission_id = ?", (submission_id,)), write=False
        )
        return None if row is None else load_json(row[0])

    def clear_partial(self, submission_id: str) -> None:
        self._run(lambda tx: tx.run("DELETE FROM partials WHERE submission_id = ?", (submission_id,)), write=True)

    # -- image bytes, content-addressed -------------------------------------------------------------

    def put_blob(self, digest: str, data: bytes) -> None:
        # Kept in rows of BLOB_CHUNK bytes: no single row or statement holds a whole large image.
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise StoreError(
                f"cannot keep a blob under {digest!r}: its bytes' sha256 is {actual!r}; pass the digest of the bytes",
                digest=digest,
            )
        # Views, not slices: slicing copied the whole blob once more (a 200 MB kept value: +200 MB).
        view = memoryview(data)
        parts: list[memoryview | bytes] = [view[i : i + BLOB_CHUNK] for i in range(0, len(data), BLOB_CHUNK)]

        def tx(tx: Tx) -> None:
            kept = tx.run(f"SELECT data FROM blobs WHERE digest = ? ORDER BY part{self.dialect.row_lock}", (digest,))
            if kept:
                if b"".join(bytes(r[0]) for r in kept) != data:
                    raise StoreError(
                        f"the store keeps other bytes under the digest {digest!r} than that digest "
                        "names: the blob is damaged; restore the store from a backup",
                        digest=digest,
                    )
                return
            # Two writers of one new image may both get here: the bytes are the same, keep one.
            tx.many(
                "INSERT INTO blobs (digest, part, data) VALUES (?, ?, ?) ON CONFLICT (digest, part) DO NOTHING",
                [(digest, i, part) for i, part in enumerate(parts or [b""])],
            )

        self._run(tx, write=True)

    def drop_blob(self, digest: str) -> None:
        self._run(lambda tx: tx.run("DELETE FROM blobs WHERE digest = ?", (digest,)), write=True)

    def blob(self, digest: str) -> bytes | None:
        rows = self._run(
            lambda tx: tx.run("SELECT data FROM blobs WHERE digest = ? ORDER BY part", (digest,)), write=False
        )
        return b"".join(bytes(r[0]) for r in rows) if rows else None

    # -- what each user spent (the hub policy's limits) -----------------------------------------------

    def add_spend(self, user: str, usd: float, *, at: float) -> None:
        self._run(
            lambda tx: tx.run("INSERT INTO spend (user_name, at, usd) VALUES (?, ?, ?)", (user, at, float(usd))),
            write=True,
        )

    def spent(self, user: str, *, since: float) -> float:
        rows = self._run(
            lambda tx: tx.run("SELECT COALESCE(SUM(usd), 0) FROM spend WHERE user_name = ? AND at >= ?", (user, since)),
            write=False,
        )
        return float(rows[0][0]) if rows else 0.0
