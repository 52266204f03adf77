"""`SQLiteStore`: the embedded durable store (stdlib sqlite3), and `open_store` to find its file.

One connection per store, guarded by a lock: the runtime writes from its coordinator thread and
the notebook's main thread may read. Every public method is one transaction; writes start with
`BEGIN IMMEDIATE` so two processes sharing a file never interleave a read-modify-write.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from flue_nb.runtime.errors import StoreError
from flue_nb.runtime.store import (
    Outcome,
    Record,
    RecordKind,
    Submission,
    SubmissionState,
    SubmissionUpdate,
)
from flue_nb.runtime.store._sqlite_schema import (
    BLOB_CHUNK,
    DB_NOW,
    RECORD_COLUMNS,
    RECORD_KINDS,
    SUBMISSION_COLUMNS,
    apply_update,
    assignments,
    check_owner,
    dump_json,
    ensure_conversation,
    is_busy,
    is_corrupt,
    load_json,
    migrate,
    record_from_row,
    select_submission,
    submission_from_row,
    switch_to_wal,
)

__all__ = ["DEFAULT_DB", "SQLiteStore", "open_store", "read_only", "read_only_message"]

DEFAULT_DB = os.path.join(".flue", "flue.sqlite")
"""Where `open_store(None, cwd=...)` keeps the store, relative to the working directory."""

_MEMORY = ":memory:"

_SETTLED = SubmissionState.SETTLED.value


def read_only(path: str) -> bool:
    """True when the store file, or the directory its -wal/-shm files go in, cannot be written."""
    folder = os.path.dirname(os.path.abspath(path))
    return not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK))


def read_only_message(path: str) -> str:
    """The one paragraph that says a store cannot be used because it is read-only."""
    return (
        f"the store `{path}` is read-only (a read-only file, directory or mount): SQLite writes "
        "beside it even to read it (its -wal and -shm files). Copy it somewhere writable and use "
        "the copy (`db=` in flue.init, `--db PATH` in %flue and flue-nb)"
    )


class SQLiteStore:
    """The `Store` protocol on one SQLite file (or `":memory:"`).

    Files use WAL journaling with `synchronous=NORMAL` by default: a commit survives a process
    crash (even SIGKILL of the kernel) but not necessarily a power loss or OS crash, which may
    drop the last few commits. Pass `synchronous="FULL"` to fsync every commit and survive those
    too, at a cost in write throughput.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        busy_timeout: float = 10.0,
    ) -> None:
        """Open (creating and migrating if needed) the store at `path`."""
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', not {synchronous!r}")
        self.path: str = os.fspath(path)
        """The database file, or `":memory:"`."""
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        if os.path.isdir(self.path):
            raise StoreError(
                f"`{self.path}` is a directory, not a store file; name a file in it instead "
                f"(`db=` in flue.init, `--db PATH` in %flue), e.g. `{os.path.join(self.path, 'flue.sqlite')}`",
                path=self.path,
            )
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves, the module never does.
            conn = sqlite3.connect(self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(
                f"cannot open the store `{self.path}` ({exc}); check that its directory exists "
                "and is writable, or use another store (`db=` in flue.init, `--db PATH` in %flue)",
                path=self.path,
            ) from exc
        try:
            self._configure(conn, synchronous, busy_timeout)
            migrate(conn, self.path)
        except StoreError:
            conn.close()
            raise
        except sqlite3.Error as exc:
            conn.close()
            raise self._error(exc) from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _configure(self, conn: sqlite3.Connection, synchronous: str, busy_timeout: float) -> None:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        # Reading the schema reads page 1, so a file that is not SQLite fails here, not later.
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if self.path != _MEMORY:
            # WAL is a property of the file; only switch when needed, since switching takes an
            # exclusive lock that another process opening the same file would have to wait for.
            (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
            if mode.lower() != "wal":
                mode = switch_to_wal(conn, busy_timeout)
                if mode.lower() != "wal":
                    raise StoreError(
                        f"`{self.path}` cannot use WAL journaling (got {mode!r}); put the store on a local filesystem",
                        path=self.path,
                    )
        conn.execute(f"PRAGMA synchronous = {synchronous}")

    # -- plumbing ---------------------------------------------------------------------------------

    @contextmanager
    def _tx(self, mode: Literal["IMMEDIATE", "DEFERRED"]) -> Iterator[sqlite3.Connection]:
        """One transaction under the lock; sqlite3 errors become `StoreError` naming the file."""
        with self._lock:
            conn = self._conn
            if conn is None:
                raise StoreError(f"the store `{self.path}` is closed", path=self.path)
            try:
                conn.execute(f"BEGIN {mode}")
            except sqlite3.Error as exc:
                raise self._error(exc) from exc
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                # Also on KeyboardInterrupt: a half-applied write must never become visible.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise self._error(exc) from exc
                raise

    def _error(self, exc: sqlite3.Error) -> StoreError:
        if is_corrupt(exc):
            return StoreError(
                f"`{self.path}` is damaged or is not a flue_nb store ({exc}): restore it from a "
                "backup, or move the file aside to start a fresh store, or use another store "
                "(`db=` in flue.init, `--db PATH` in %flue)",
                path=self.path,
            )
        if is_busy(exc):
            return StoreError(
                f"the store `{self.path}` stayed locked by another process past the busy timeout",
                path=self.path,
            )
        if read_only(self.path):
            return StoreError(read_only_message(self.path), path=self.path)
        return StoreError(f"the store `{self.path}` failed: {exc}", path=self.path)

    @property
    def journal_mode(self) -> str:
        """The journal mode in effect (`wal` for files, `memory` for `":memory:"`)."""
        with self._tx("DEFERRED") as conn:
            return str(conn.execute("PRAGMA journal_mode").fetchone()[0])

    @property
    def synchronous(self) -> str:
        """The `synchronous` setting in effect: `NORMAL` or `FULL`."""
        with self._tx("DEFERRED") as conn:
            level = int(conn.execute("PRAGMA synchronous").fetchone()[0])
        return {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[level]

    def close(self) -> None:
        """Release the connection (idempotent); later calls raise `StoreError`."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # -- conversations and ownership --------------------------------------------------------------

    def ensure_conversation(self, conversation_id: str, *, now: float) -> None:
        """Create the conversation if it does not exist."""
        with self._tx("IMMEDIATE") as conn:
            ensure_conversation(conn, conversation_id, now)

    def acquire_lease(
        self, conversation_id: str, owner: str, *, ttl: float, now: float, replacing: str | None = None
    ) -> bool:
        """Take (or renew) ownership if free, expired (expires <= now), or already ours, or
        held by `replacing` (an owner the caller proved dead)."""
        with self._tx("IMMEDIATE") as conn:
            ensure_conversation(conn, conversation_id, now)
            cur = conn.execute(
                f"UPDATE conversations SET lease_owner = ?, lease_expires = {DB_NOW} + ? WHERE id = ?"
                f" AND (lease_owner IS NULL OR lease_expires <= {DB_NOW} OR lease_owner IN (?, ?))",
                (owner, ttl, conversation_id, owner, owner if replacing is None else replacing),
            )
            return cur.rowcount == 1

    def renew_lease(self, conversation_id: str, owner: str, *, ttl: float, now: float) -> bool:
        """Extend our lease and the running submissions' lease columns; False if not ours now.

        A lease that expired but that nobody else took is still ours and is renewed; a released
        one is not.
        """
        with self._tx("IMMEDIATE") as conn:
            row = conn.execute(
                f"UPDATE conversations SET lease_expires = {DB_NOW} + ? WHERE id = ? AND lease_owner = ?"
                " RETURNING lease_expires",
                (ttl, conversation_id, owner),
            ).fetchone()
            if row is None:
                return False
            (expires,) = row
            conn.execute(
                "UPDATE submissions SET lease_owner = ?, lease_expires = ? WHERE conversation_id = ? AND state = ?",
                (owner, expires, conversation_id, SubmissionState.RUNNING.value),
            )
            return True

    def release_lease(self, conversation_id: str, owner: str) -> None:
        """Give ownership up (no-op if not ours)."""
        with self._tx("IMMEDIATE") as conn:
            conn.execute(
                "UPDATE conversations SET lease_owner = NULL, lease_expires = NULL WHERE id = ? AND lease_owner = ?",
                (conversation_id, owner),
            )

    def lease(self, conversation_id: str) -> tuple[str, float] | None:
        """Current (owner, expires_at by the store's clock), expired or not; None if free."""
        with self._tx("DEFERRED") as conn:
            row = conn.execute(
                "SELECT lease_owner, lease_expires FROM conversations WHERE id = ?",
                (conversation_id,),
            ).fetchone()
        if row is None or row[0] is None:
            return None
        return (row[0], row[1])

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
        with self._tx("IMMEDIATE") as conn:
            existing = select_submission(conn, submission_id)
            if existing is not None:
                if existing.conversation_id == conversation_id and existing.text == text:
                    return existing
                raise StoreError(
                    f"submission id {submission_id!r} is already taken by another submission",
                    submission_id=submission_id,
                )
            ensure_conversation(conn, conversation_id, now)
            conn.execute(
                "INSERT INTO submissions (id, conversation_id, text, state, accepted_at, settings)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    submission_id,
                    conversation_id,
                    text,
                    SubmissionState.QUEUED.value,
                    now,
                    None if settings is None else dump_json(settings, "submission settings"),
                ),
            )
            created = select_submission(conn, submission_id)
        assert created is not None  # inserted just above, in this transaction
        return created

    def submission(self, submission_id: str) -> Submission | None:
        """One submission by id."""
        with self._tx("DEFERRED") as conn:
            return select_submission(conn, submission_id)

    def submissions(self, conversation_id: str, *, unsettled: bool = False) -> list[Submission]:
        """The conversation's submissions in admission order (without settled ones if asked)."""
        sql = f"SELECT {SUBMISSION_COLUMNS} FROM submissions WHERE conversation_id = ?"
        params: tuple[Any, ...] = (conversation_id,)
        if unsettled:
            sql += " AND state != ?"
            params += (_SETTLED,)
        with self._tx("DEFERRED") as conn:
            rows = conn.execute(sql + " ORDER BY seq", params).fetchall()
        return [submission_from_row(row) for row in rows]

    def update_submission(
        self,
        submission_id: str,
        *,
        expect: Iterable[SubmissionState] = (),
        owner: str | None = None,
        **fields: Any,
    ) -> bool:
        """Set columns if the state is in `expect` (or always when empty); True if applied.

        A settled submission never changes state, result or error again (returns False);
        `settle` is the only way to settle, so `outcome`, `settled_at` and `state=SETTLED` are
        refused here. With `owner`, raises `SessionBusyError` (changing nothing) unless it still
        holds the conversation's lease.
        """
        encoded = assignments(fields)
        with self._tx("IMMEDIATE") as conn:
            if owner is not None:
                row = conn.execute("SELECT conversation_id FROM submissions WHERE id = ?", (submission_id,)).fetchone()
                if row is None:
                    return False
                check_owner(conn, row[0], owner)
            return apply_update(conn, submission_id, tuple(expect), encoded)

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

        Appends a `settlement` record and settles every submission joined into this one with the
        same outcome, result and error (each with its own `settlement` record naming
        `joined_into`), all in one transaction. Returns False if it was already
        settled (nothing changes then). With `owner`, raises `SessionBusyError` and changes
        nothing unless `owner` still holds the conversation's lease.
        """
        outcome = Outcome(outcome)
        error_json = None if error is None else dump_json(error, "a settlement error")
        data = dump_json({"outcome": outcome.value, "result": result, "error": error}, "a settlement")
        with self._tx("IMMEDIATE") as conn:
            row = conn.execute(
                "SELECT conversation_id, state FROM submissions WHERE id = ?", (submission_id,)
            ).fetchone()
            if row is None:
                raise StoreError(
                    f"cannot settle unknown submission {submission_id!r}",
                    submission_id=submission_id,
                )
            conversation_id, state = row
            if state == _SETTLED:
                return False
            if owner is not None:
                check_owner(conn, conversation_id, owner)
            settle_sql = (
                "UPDATE submissions SET state = ?, outcome = ?, result = ?, error = ?,"
                " settled_at = ?, lease_owner = NULL, lease_expires = NULL"
            )
            values = (_SETTLED, outcome.value, result, error_json, now)
            joined = [
                jid
                for (jid,) in conn.execute(
                    "SELECT id FROM submissions WHERE joined_into = ? AND state != ? ORDER BY seq",
                    (submission_id, _SETTLED),
                )
            ]
            conn.execute(settle_sql + " WHERE id = ?", (*values, submission_id))
            conn.execute(
                settle_sql + " WHERE joined_into = ? AND state != ?",
                (*values, submission_id, _SETTLED),
            )
            # Every accepted submission gets its own settlement record (contract 10.4); a joined
            # one's names the response that absorbed it.
            for jid in joined:
                joined_data = dump_json(
                    {"outcome": outcome.value, "result": result, "error": error, "joined_into": submission_id},
                    "a settlement",
                )
                conn.execute(
                    "INSERT INTO records (conversation_id, submission_id, kind, data, created_at)"
                    " VALUES (?, ?, 'settlement', ?, ?)",
                    (conversation_id, jid, joined_data, now),
                )
            conn.execute(
                "INSERT INTO records (conversation_id, submission_id, kind, data, created_at)"
                " VALUES (?, ?, 'settlement', ?, ?)",
                (conversation_id, submission_id, data, now),
            )
            return True

    def request_abort(self, conversation_id: str) -> list[str]:
        """Record a durable abort intent on every unsettled submission; return their ids."""
        with self._tx("IMMEDIATE") as conn:
            ids = [
                sid
                for (sid,) in conn.execute(
                    "SELECT id FROM submissions WHERE conversation_id = ? AND state != ? ORDER BY seq",
                    (conversation_id, _SETTLED),
                )
            ]
            conn.execute(
                "UPDATE submissions SET abort_requested = 1 WHERE conversation_id = ? AND state != ?",
                (conversation_id, _SETTLED),
            )
        return ids

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
        `owner` (a fence for a writer that may have stalled past its lease), nothing is written
        and `SessionBusyError` is raised unless `owner` still holds the conversation's lease.
        """
        # Serialize before the transaction: a bad value fails without taking the write lock.
        encoded: list[tuple[RecordKind, str, dict[str, Any]]] = []
        for kind, data in items:
            if kind not in RECORD_KINDS:
                raise ValueError(f"unknown record kind {kind!r}; expected one of {sorted(RECORD_KINDS)}")
            if kind == "state" and not isinstance(data.get("name"), str):
                raise ValueError("a `state` record needs a string `name`")
            encoded.append((kind, dump_json(data, f"a {kind!r} record"), data))
        planned = [(u, assignments(u.fields)) for u in updates]
        with self._tx("IMMEDIATE") as conn:
            if owner is not None:
                check_owner(conn, conversation_id, owner)
            for update, columns in planned:
                if not apply_update(conn, update.submission_id, tuple(update.expect), columns):
                    current = select_submission(conn, update.submission_id)
                    state = None if current is None else current.state.value
                    wanted = [SubmissionState(s).value for s in update.expect]
                    raise StoreError(
                        f"submission {update.submission_id!r} is {state or 'unknown'}, not in "
                        f"{wanted}; nothing was appended",
                        submission_id=update.submission_id,
                        state=state,
                    )
            ensure_conversation(conn, conversation_id, now)
            out: list[Record] = []
            for kind, text, data in encoded:
                cur = conn.execute(
                    "INSERT INTO records (conversation_id, submission_id, kind, data, created_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (conversation_id, submission_id, kind, text, now),
                )
                if kind == "state":
                    conn.execute(
                        "INSERT INTO state (conversation_id, name, value) VALUES (?, ?, ?)"
                        " ON CONFLICT (conversation_id, name) DO UPDATE SET value = excluded.value",
                        (
                            conversation_id,
                            data["name"],
                            dump_json(data.get("value"), f"state {data['name']!r}"),
                        ),
                    )
                assert cur.lastrowid is not None  # an INSERT into a rowid table always has one
                # Decode what was stored so the caller gets a copy, not its own dict back.
                out.append(
                    Record(
                        cur.lastrowid,
                        conversation_id,
                        submission_id,
                        kind,
                        load_json(text),
                        float(now),
                    )
                )
        return out

    def records(
        self,
        conversation_id: str,
        *,
        after_seq: int = 0,
        kinds: Iterable[RecordKind] | None = None,
        submission_id: str | None = None,
    ) -> list[Record]:
        """Records in stream order, optionally filtered."""
        sql = f"SELECT {RECORD_COLUMNS} FROM records WHERE conversation_id = ? AND seq > ?"
        params: list[Any] = [conversation_id, after_seq]
        if kinds is not None:
            wanted = list(kinds)
            if not wanted:
                return []
            sql += f" AND kind IN ({', '.join('?' * len(wanted))})"
            params.extend(wanted)
        if submission_id is not None:
            sql += " AND submission_id = ?"
            params.append(submission_id)
        with self._tx("DEFERRED") as conn:
            rows = conn.execute(sql + " ORDER BY seq", params).fetchall()
        return [record_from_row(row) for row in rows]

    def state(self, conversation_id: str) -> dict[str, Any]:
        """The latest value of every persistent-state name."""
        with self._tx("DEFERRED") as conn:
            rows = conn.execute(
                "SELECT name, value FROM state WHERE conversation_id = ? ORDER BY name",
                (conversation_id,),
            ).fetchall()
        return {name: load_json(value) for name, value in rows}

    # -- partial responses (contract 11.2) --------------------------------------------------------

    def put_partial(self, submission_id: str, data: dict[str, Any], *, owner: str | None = None) -> None:
        """Replace the in-progress response snapshot of a submission.

        With `owner`, raises `SessionBusyError` (writing nothing) unless it holds the lease.
        """
        text = dump_json(data, "a partial response")
        with self._tx("IMMEDIATE") as conn:
            if owner is not None:
                row = conn.execute("SELECT conversation_id FROM submissions WHERE id = ?", (submission_id,)).fetchone()
                if row is not None:
                    check_owner(conn, row[0], owner)
            conn.execute(
                "INSERT INTO partials (submission_id, data) VALUES (?, ?)"
                " ON CONFLICT (submission_id) DO UPDATE SET data = excluded.data",
                (submission_id, text),
            )

    def partial(self, submission_id: str) -> dict[str, Any] | None:
        """The snapshot, if a stream was in progress."""
        with self._tx("DEFERRED") as conn:
            row = conn.execute("SELECT data FROM partials WHERE submission_id = ?", (submission_id,)).fetchone()
        return None if row is None else load_json(row[0])

    def clear_partial(self, submission_id: str) -> None:
        """Forget the snapshot (the response was recorded whole)."""
        with self._tx("IMMEDIATE") as conn:
            conn.execute("DELETE FROM partials WHERE submission_id = ?", (submission_id,))

    # -- image bytes, content-addressed ----------------------------------------------------------

    def put_blob(self, digest: str, data: bytes) -> None:
        """Keep `data` under its sha256 `digest`, in parts; a no-op when it is already kept."""
        parts = [data[i : i + BLOB_CHUNK] for i in range(0, len(data), BLOB_CHUNK)] or [b""]
        with self._tx("IMMEDIATE") as conn:
            if conn.execute("SELECT 1 FROM blobs WHERE digest = ? LIMIT 1", (digest,)).fetchone():
                return
            conn.executemany(
                "INSERT INTO blobs (digest, part, data) VALUES (?, ?, ?)",
                [(digest, i, part) for i, part in enumerate(parts)],
            )

    def blob(self, digest: str) -> bytes | None:
        """The bytes kept under `digest`, or None."""
        with self._tx("DEFERRED") as conn:
            rows = conn.execute("SELECT data FROM blobs WHERE digest = ? ORDER BY part", (digest,)).fetchall()
        return b"".join(r[0] for r in rows) if rows else None


def open_store(
    db: str | os.PathLike[str] | None,
    *,
    cwd: str,
    synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
) -> SQLiteStore:
    """Open the store `db` names: None is `<cwd>/.flue/flue.sqlite`, relative paths join `cwd`."""
    if db is None:
        path = Path(cwd) / DEFAULT_DB
        path.parent.mkdir(parents=True, exist_ok=True)
        return SQLiteStore(path, synchronous=synchronous)
    if os.fspath(db) == _MEMORY:
        return SQLiteStore(_MEMORY, synchronous=synchronous)
    return SQLiteStore(Path(cwd) / Path(db).expanduser(), synchronous=synchronous)
