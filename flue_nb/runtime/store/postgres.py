"""`PostgresStore`: the `Store` protocol on a PostgreSQL server (psycopg 3), for teams.

The same contract as `SQLiteStore`, with what a shared server needs on top:

- **The database's clock.** Lease expiry and takeover compare against the server's
  `clock_timestamp()`, never a kernel's clock, so kernels on machines with skewed clocks still
  cannot both own a conversation. The write fence is the lease holder itself, as in SQLite.
- **Order from the database.** Submission and record `seq` come from identity sequences; every
  write to a conversation first locks its row, so within a conversation the commit order is the
  `seq` order and a reader following `after_seq` never misses a record.
- **Faults end.** Every statement runs under `statement_timeout` (a locked row cannot hang a cell
  forever). A connection the server dropped is re-established, and the transaction is retried
  when it provably did not commit (it failed before `COMMIT` was sent); otherwise, or when the
  server stays away past `reconnect_timeout`, the call raises `StoreError`.
- **Per-user conversation ids.** A conversation id is stored under the user's name
  (`JUPYTERHUB_USER`, else the OS user) unless it names a namespace (`team:weekly-report`); the
  caller always sees the id it passed. This is convention: a database role per user is the
  enforcement (see the README).

One connection per store, guarded by a lock, like `SQLiteStore` (`_pg_conn.PgConnection`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from flue_nb.runtime.errors import StoreError
from flue_nb.runtime.store import (
    Outcome,
    Record,
    RecordKind,
    Submission,
    SubmissionState,
    SubmissionUpdate,
)
from flue_nb.runtime.store._pg_conn import PgConnection
from flue_nb.runtime.store._pg_schema import (
    BLOB_CHUNK,
    NOW,
    RECORD_COLUMNS,
    SCHEMA,
    SUBMISSION_COLUMNS,
    apply_update,
    encode_fields,
    fence,
    lock_conversation,
    migrate,
    select_submission,
    submission_from_pg,
)
from flue_nb.runtime.store._sqlite_schema import (
    RECORD_KINDS,
    dump_json,
    load_json,
    record_from_row,
)
from flue_nb.runtime.store.url import mask_url, namespace_of, scoped_user

__all__ = ["PostgresStore"]

T = TypeVar("T")

_SETTLED = SubmissionState.SETTLED.value


class PostgresStore:
    """The `Store` protocol on one PostgreSQL database (tables in its `flue` schema)."""

    def __init__(
        self,
        url: str,
        *,
        user: str | None = None,
        statement_timeout: float = 15.0,
        connect_timeout: float = 5.0,
        reconnect_timeout: float = 30.0,
    ) -> None:
        """Connect to `url` (creating and migrating the schema if needed).

        Args:
            url: `postgresql://user[:password]@host[:port]/dbname[?...]` (any libpq URL).
            user: whose conversations unscoped ids name; default `JUPYTERHUB_USER`, else the OS user.
            statement_timeout: seconds any one statement (a lock wait included) may take.
            connect_timeout: seconds the first connection may take in all (an unreachable URL
                fails after it, saying so), and each later connection attempt.
            reconnect_timeout: how long a call keeps reconnecting to a server that went away.
        """
        self._url = url
        self.url: str = mask_url(url)
        """The URL with its password masked: safe to show."""
        self.path: str = self.url
        """Same as `url`; what messages name the store by (`SQLiteStore.path` is its file)."""
        self.user: str = user or scoped_user()
        """Whose conversations an id without a `namespace:` prefix names."""
        self.statement_timeout = statement_timeout
        self.connect_timeout = connect_timeout
        self.reconnect_timeout = reconnect_timeout
        self._prefix = f"user:{self.user}:"
        self._db = PgConnection(
            url,
            label=self.url,
            schema=SCHEMA,
            statement_timeout=statement_timeout,
            connect_timeout=connect_timeout,
            reconnect_timeout=reconnect_timeout,
        )
        self._db.open(lambda conn: migrate(conn, self.url))

    # -- plumbing ---------------------------------------------------------------------------------

    def _call(self, fn: Callable[[Any], T]) -> T:
        """Run `fn(conn)` in one transaction (see `PgConnection.call`)."""
        return self._db.call(fn)

    def close(self) -> None:
        """Release the connection (idempotent); later calls raise `StoreError`."""
        self._db.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r})"

    # -- user scoping -----------------------------------------------------------------------------

    def _key(self, conversation_id: str) -> str:
        return conversation_id if namespace_of(conversation_id) else self._prefix + conversation_id

    def _cid(self, key: str) -> str:
        return key.removeprefix(self._prefix)

    def _submission(self, row: tuple[Any, ...]) -> Submission:
        sub = submission_from_pg(row)
        sub.conversation_id = self._cid(sub.conversation_id)
        return sub

    def _record(self, row: tuple[Any, ...]) -> Record:
        rec = record_from_row(row)
        rec.conversation_id = self._cid(rec.conversation_id)
        return rec

    # -- conversations and ownership --------------------------------------------------------------

    def ensure_conversation(self, conversation_id: str, *, now: float) -> None:
        """Create the conversation if it does not exist."""
        key = self._key(conversation_id)
        self._call(
            lambda conn: conn.execute(
                "INSERT INTO conversations (id, created_at) VALUES (%s, %s) ON CONFLICT (id) DO NOTHING",
                (key, now),
            )
        )

    def acquire_lease(
        self, conversation_id: str, owner: str, *, ttl: float, now: float, replacing: str | None = None
    ) -> bool:
        """Take (or renew) ownership if free, expired by the database's clock, or already ours,
        or held by `replacing` (an owner the caller proved dead).

        `now` dates a conversation this creates; the lease itself never reads a kernel's clock.
        """
        key = self._key(conversation_id)

        def tx(conn: Any) -> bool:
            lock_conversation(conn, key, now)
            row = conn.execute(
                f"UPDATE conversations SET lease_owner = %s, lease_expires = {NOW} + %s"
                f" WHERE id = %s AND (lease_owner IS NULL OR lease_expires <= {NOW} OR lease_owner IN (%s, %s))"
                " RETURNING 1",
                (owner, ttl, key, owner, owner if replacing is None else replacing),
            ).fetchone()
            return row is not None

        return self._call(tx)

    def renew_lease(self, conversation_id: str, owner: str, *, ttl: float, now: float) -> bool:
        """Extend our lease and the running submissions' lease columns; False if not ours now.

        A lease that expired but that nobody else took is still ours and is renewed; a released
        one is not.
        """
        key = self._key(conversation_id)

        def tx(conn: Any) -> bool:
            row = conn.execute(
                f"UPDATE conversations SET lease_expires = {NOW} + %s WHERE id = %s AND lease_owner = %s"
                " RETURNING lease_expires",
                (ttl, key, owner),
            ).fetchone()
            if row is None:
                return False
            conn.execute(
                "UPDATE submissions SET lease_owner = %s, lease_expires = %s WHERE conversation_id = %s AND state = %s",
                (owner, row[0], key, SubmissionState.RUNNING.value),
            )
            return True

        return self._call(tx)

    def release_lease(self, conversation_id: str, owner: str) -> None:
        """Give ownership up (no-op if not ours)."""
        key = self._key(conversation_id)
        self._call(
            lambda conn: conn.execute(
                "UPDATE conversations SET lease_owner = NULL, lease_expires = NULL WHERE id = %s AND lease_owner = %s",
                (key, owner),
            )
        )

    def lease(self, conversation_id: str) -> tuple[str, float] | None:
        """Current (owner, expires_at by the database's clock) as stored; None if free or unknown."""
        key = self._key(conversation_id)
        row = self._call(
            lambda conn: conn.execute(
                "SELECT lease_owner, lease_expires FROM conversations WHERE id = %s", (key,)
            ).fetchone()
        )
        if row is None or row[0] is None:
            return None
        return (row[0], row[1])

    def clock(self) -> float:
        """The database's clock (seconds since the epoch): what lease expiry is measured in."""
        return float(self._call(lambda conn: conn.execute(f"SELECT {NOW}").fetchone()[0]))

    # -- submissions ------------------------------------------------------------------------------

    def admit(
        self,
        conversation_id: str,
        text: str,
        *,
        submission_id: str,
        now: float,
        settings: dict[str, Any] | None = None,
    ) -> Submission:
        """Commit a new queued submission and return it (contract 10.1).

        Admitting the same id again with the same conversation and text returns the stored
        submission unchanged, so a retried admission never duplicates; a different one with a
        taken id raises `StoreError`.
        """
        key = self._key(conversation_id)
        encoded = dump_json(text, "a submission's text")

        def tx(conn: Any) -> Submission:
            lock_conversation(conn, key, now)
            existing = select_submission(conn, submission_id)
            if existing is not None:
                sub = self._submission(existing)
                if sub.conversation_id == conversation_id and sub.text == text:
                    return sub
                raise StoreError(
                    f"submission id {submission_id!r} is already taken by another submission",
                    submission_id=submission_id,
                )
            row = conn.execute(
                "INSERT INTO submissions (id, conversation_id, text, state, accepted_at, settings)"
                f" VALUES (%s, %s, %s::json, %s, %s, %s::json) RETURNING {SUBMISSION_COLUMNS}",
                (
                    submission_id,
                    key,
                    encoded,
                    SubmissionState.QUEUED.value,
                    now,
                    None if settings is None else dump_json(settings, "submission settings"),
                ),
            ).fetchone()
            return self._submission(row)

        return self._call(tx)

    def submission(self, submission_id: str) -> Submission | None:
        """One submission by id."""
        row = self._call(lambda conn: select_submission(conn, submission_id))
        return None if row is None else self._submission(row)

    def submissions(self, conversation_id: str, *, unsettled: bool = False) -> list[Submission]:
        """The conversation's submissions in admission order (without settled ones if asked)."""
        sql = f"SELECT {SUBMISSION_COLUMNS} FROM submissions WHERE conversation_id = %s"
        params: tuple[Any, ...] = (self._key(conversation_id),)
        if unsettled:
            sql += " AND state <> %s"
            params += (_SETTLED,)
        rows = self._call(lambda conn: conn.execute(sql + " ORDER BY seq", params).fetchall())
        return [self._submission(row) for row in rows]

    def update_submission(
        self,
        submission_id: str,
        *,
        expect: Iterable[SubmissionState] = (),
        owner: str | None = None,
        **fields: Any,
    ) -> bool:
        """Set columns if the state is in `expect` (or always when empty); True if applied.

        A settled submission never changes state, result or error again (returns False); `settle`
        is the only way to settle. With `owner`, raises `SessionBusyError` (changing nothing)
        unless it still holds the conversation's lease.
        """
        encoded = encode_fields(fields)
        expected = tuple(expect)

        def tx(conn: Any) -> bool:
            if owner is not None:
                row = conn.execute("SELECT conversation_id FROM submissions WHERE id = %s", (submission_id,)).fetchone()
                if row is None:
                    return False
                fence(conn, row[0], self._cid(row[0]), owner)
            return apply_update(conn, submission_id, expected, encoded)

        return self._call(tx)

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
        """Settle once: the first terminal outcome wins (contract 10.4).

        A compare-and-set (`UPDATE ... WHERE state <> 'settled' RETURNING`) that also settles every
        submission joined into this one, each with its own `settlement` record, in one
        transaction. Returns False if it was already settled. With `owner`, raises
        `SessionBusyError` and changes nothing unless `owner` still holds the lease.
        """
        outcome = Outcome(outcome)
        error_json = None if error is None else dump_json(error, "a settlement error")
        result_json = None if result is None else dump_json(result, "a settlement result")
        data = dump_json({"outcome": outcome.value, "result": result, "error": error}, "a settlement")
        joined_data = dump_json(
            {"outcome": outcome.value, "result": result, "error": error, "joined_into": submission_id},
            "a settlement",
        )

        def tx(conn: Any) -> bool:
            row = conn.execute(
                "SELECT conversation_id, state FROM submissions WHERE id = %s", (submission_id,)
            ).fetchone()
            if row is None:
                raise StoreError(f"cannot settle unknown submission {submission_id!r}", submission_id=submission_id)
            key, state = row
            if state == _SETTLED:
                return False  # already settled: nothing changes, whoever asks
            if owner is not None:
                fence(conn, key, self._cid(key), owner)
            else:
                lock_conversation(conn, key, now)
            settle_sql = (
                "UPDATE submissions SET state = %s, outcome = %s, result = %s::json, error = %s::json,"
                " settled_at = %s, lease_owner = NULL, lease_expires = NULL"
            )
            values = (_SETTLED, outcome.value, result_json, error_json, now)
            won = conn.execute(
                settle_sql + " WHERE id = %s AND state <> %s RETURNING seq", (*values, submission_id, _SETTLED)
            ).fetchone()
            if won is None:
                return False
            joined = conn.execute(
                settle_sql + " WHERE joined_into = %s AND state <> %s RETURNING id, seq",
                (*values, submission_id, _SETTLED),
            ).fetchall()
            # Every accepted submission gets its own settlement record (contract 10.4); a joined
            # one's names the response that absorbed it.
            for jid, _ in sorted(joined, key=lambda r: r[1]):
                conn.execute(
                    "INSERT INTO records (conversation_id, submission_id, kind, data, created_at)"
                    " VALUES (%s, %s, 'settlement', %s::json, %s)",
                    (key, jid, joined_data, now),
                )
            conn.execute(
                "INSERT INTO records (conversation_id, submission_id, kind, data, created_at)"
                " VALUES (%s, %s, 'settlement', %s::json, %s)",
                (key, submission_id, data, now),
            )
            return True

        return self._call(tx)

    def request_abort(self, conversation_id: str) -> list[str]:
        """Record a durable abort intent on every unsettled submission; return their ids."""
        key = self._key(conversation_id)

        def tx(conn: Any) -> list[str]:
            rows = conn.execute(
                "UPDATE submissions SET abort_requested = true WHERE conversation_id = %s"
                " AND state <> %s RETURNING id, seq",
                (key, _SETTLED),
            ).fetchall()
            return [sid for sid, _ in sorted(rows, key=lambda r: r[1])]

        return self._call(tx)

    # -- the record stream ------------------------------------------------------------------------

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
        """Append records (and apply `updates`, and upsert `state` records) atomically.

        If any update's expectation fails, nothing is written and `StoreError` is raised. With
        `owner`, nothing is written and `SessionBusyError` is raised unless `owner` still holds
        the conversation's lease.
        """
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
        planned = [(u, encode_fields(u.fields)) for u in updates]
        key = self._key(conversation_id)

        def tx(conn: Any) -> list[Record]:
            # The conversation's row lock comes first, as in every write: one lock order, and
            # the commit order of a conversation's records is their seq order.
            if owner is not None:
                fence(conn, key, conversation_id, owner)
            else:
                lock_conversation(conn, key, now)
            for update, columns in planned:
                if not apply_update(conn, update.submission_id, tuple(update.expect), columns):
                    current = select_submission(conn, update.submission_id)
                    state = None if current is None else current[4]
                    wanted = [SubmissionState(s).value for s in update.expect]
                    raise StoreError(
                        f"submission {update.submission_id!r} is {state or 'unknown'}, not in "
                        f"{wanted}; nothing was appended",
                        submission_id=update.submission_id,
                        state=state,
                    )
            out: list[Record] = []
            for i, (kind, text, data) in enumerate(encoded):
                (seq,) = conn.execute(
                    "INSERT INTO records (conversation_id, submission_id, kind, data, created_at)"
                    " VALUES (%s, %s, %s, %s::json, %s) RETURNING seq",
                    (key, submission_id, kind, text, now),
                ).fetchone()
                if i in states:
                    conn.execute(
                        "INSERT INTO state (conversation_id, name, value) VALUES (%s, %s, %s::json)"
                        " ON CONFLICT (conversation_id, name) DO UPDATE SET value = excluded.value",
                        (key, data["name"], states[i]),
                    )
                out.append(Record(seq, conversation_id, submission_id, kind, load_json(text), float(now)))
            return out

        return self._call(tx)

    def records(
        self,
        conversation_id: str,
        *,
        after_seq: int = 0,
        kinds: Iterable[RecordKind] | None = None,
        submission_id: str | None = None,
    ) -> list[Record]:
        """Records in stream order, optionally filtered."""
        sql = f"SELECT {RECORD_COLUMNS} FROM records WHERE conversation_id = %s AND seq > %s"
        params: list[Any] = [self._key(conversation_id), after_seq]
        if kinds is not None:
            wanted = list(kinds)
            if not wanted:
                return []
            sql += " AND kind = ANY(%s)"
            params.append(wanted)
        if submission_id is not None:
            sql += " AND submission_id = %s"
            params.append(submission_id)
        rows = self._call(lambda conn: conn.execute(sql + " ORDER BY seq", params).fetchall())
        return [self._record(row) for row in rows]

    def state(self, conversation_id: str) -> dict[str, Any]:
        """The latest value of every persistent-state name."""
        key = self._key(conversation_id)
        rows = self._call(
            lambda conn: conn.execute(
                "SELECT name, value::text FROM state WHERE conversation_id = %s ORDER BY name", (key,)
            ).fetchall()
        )
        return {name: load_json(value) for name, value in rows}

    # -- partial responses (contract 11.2) --------------------------------------------------------

    def put_partial(self, submission_id: str, data: dict[str, Any], *, owner: str | None = None) -> None:
        """Replace the in-progress response snapshot of a submission.

        With `owner`, raises `SessionBusyError` (writing nothing) unless it holds the lease.
        """
        text = dump_json(data, "a partial response")

        def tx(conn: Any) -> None:
            if owner is not None:
                row = conn.execute("SELECT conversation_id FROM submissions WHERE id = %s", (submission_id,)).fetchone()
                if row is not None:
                    fence(conn, row[0], self._cid(row[0]), owner)
            conn.execute(
                "INSERT INTO partials (submission_id, data) VALUES (%s, %s::json)"
                " ON CONFLICT (submission_id) DO UPDATE SET data = excluded.data",
                (submission_id, text),
            )

        self._call(tx)

    def partial(self, submission_id: str) -> dict[str, Any] | None:
        """The snapshot, if a stream was in progress."""
        row = self._call(
            lambda conn: conn.execute(
                "SELECT data::text FROM partials WHERE submission_id = %s", (submission_id,)
            ).fetchone()
        )
        return None if row is None else load_json(row[0])

    def clear_partial(self, submission_id: str) -> None:
        """Forget the snapshot (the response was recorded whole)."""
        self._call(lambda conn: conn.execute("DELETE FROM partials WHERE submission_id = %s", (submission_id,)))

    # -- image bytes, content-addressed --------------------------------------------------------

    def put_blob(self, digest: str, data: bytes) -> None:
        """Keep `data` under its sha256 `digest`, in parts; a no-op when it is already kept."""
        parts = [data[i : i + BLOB_CHUNK] for i in range(0, len(data), BLOB_CHUNK)] or [b""]

        def tx(conn: Any) -> None:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO blobs (digest, part, data) VALUES (%s, %s, %s) ON CONFLICT (digest, part) DO NOTHING",
                    [(digest, i, part) for i, part in enumerate(parts)],
                )

        self._call(tx)

    def blob(self, digest: str) -> bytes | None:
        """The bytes kept under `digest`, or None."""
        rows = self._call(
            lambda conn: conn.execute("SELECT data FROM blobs WHERE digest = %s ORDER BY part", (digest,)).fetchall()
        )
        return b"".join(bytes(r[0]) for r in rows) if rows else None
