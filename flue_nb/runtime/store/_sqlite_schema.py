"""The SQL side of `SQLiteStore`: schema migrations, row codecs and in-transaction helpers.

Migrations are frozen once released: a schema change is a new entry at the end of `MIGRATIONS`,
never an edit of an old one, because files written by older versions replay only what they lack.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any, get_args

from flue_nb.runtime.errors import SessionBusyError, StoreError
from flue_nb.runtime.store import Outcome, Record, RecordKind, Submission, SubmissionState
from flue_nb.runtime.text import to_json

_SETTLED = SubmissionState.SETTLED.value

# Columns update_submission / SubmissionUpdate may set. Identity and admission columns never
# change, and outcome/settled_at are written only by settle() so the first outcome always wins.
_UPDATABLE = frozenset(
    {
        "state",
        "attempts",
        "started_at",
        "lease_owner",
        "lease_expires",
        "abort_requested",
        "joined_into",
        "result",
        "error",
    }
)

__all__ = [
    "BLOB_CHUNK",
    "DB_NOW",
    "MIGRATIONS",
    "RECORD_COLUMNS",
    "RECORD_KINDS",
    "SCHEMA_VERSION",
    "SUBMISSION_COLUMNS",
    "Migration",
    "apply_update",
    "assignments",
    "check_owner",
    "dump_json",
    "ensure_conversation",
    "is_busy",
    "is_corrupt",
    "load_json",
    "migrate",
    "record_from_row",
    "select_submission",
    "submission_from_row",
    "switch_to_wal",
]


@dataclass(frozen=True, slots=True)
class Migration:
    """One step forward: the statements that take the schema from `version - 1` to `version`."""

    version: int
    statements: tuple[str, ...]


DB_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
"""The store's own clock in SQL (seconds since the epoch): leases are measured by it, never by a
caller's `now`, so a kernel whose clock seam is skewed cannot steal or keep a lease (as with
PostgreSQL's `clock_timestamp()`)."""

_FINAL = frozenset({"state", "result", "error"})
"""What a settled submission keeps forever: its state, result and error (outcome is settle's)."""


# Statements are run one by one, not with executescript(): executescript() commits first, which
# would break the one-transaction-per-migration promise.
_V1 = Migration(
    1,
    (
        """CREATE TABLE conversations (
            id TEXT PRIMARY KEY,
            created_at REAL NOT NULL,
            lease_owner TEXT,
            lease_expires REAL,
            CHECK ((lease_owner IS NULL) = (lease_expires IS NULL))
        ) STRICT""",
        # seq is the rowid with AUTOINCREMENT so admission order never reuses a number.
        """CREATE TABLE submissions (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            conversation_id TEXT NOT NULL REFERENCES conversations (id),
            text TEXT NOT NULL,
            state TEXT NOT NULL
                CHECK (state IN ('queued', 'running', 'joining', 'joined', 'settled')),
            accepted_at REAL NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            started_at REAL,
            lease_owner TEXT,
            lease_expires REAL,
            abort_requested INTEGER NOT NULL DEFAULT 0 CHECK (abort_requested IN (0, 1)),
            joined_into TEXT REFERENCES submissions (id),
            outcome TEXT CHECK (outcome IN ('completed', 'failed', 'aborted')),
            result TEXT,
            error TEXT CHECK (error IS NULL OR json_valid(error)),
            settled_at REAL,
            CHECK ((state = 'settled') = (outcome IS NOT NULL))
        ) STRICT""",
        "CREATE INDEX submissions_by_conversation ON submissions (conversation_id, seq)",
        "CREATE INDEX submissions_by_joined_into ON submissions (joined_into) WHERE joined_into IS NOT NULL",
        # kind is validated in Python against RecordKind rather than by a CHECK, so adding a
        # kind does not need a table rebuild.
        """CREATE TABLE records (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id TEXT NOT NULL REFERENCES conversations (id),
            submission_id TEXT REFERENCES submissions (id),
            kind TEXT NOT NULL,
            data TEXT NOT NULL CHECK (json_valid(data)),
            created_at REAL NOT NULL
        ) STRICT""",
        "CREATE INDEX records_by_conversation ON records (conversation_id, seq)",
        "CREATE INDEX records_by_submission ON records (submission_id, seq) WHERE submission_id IS NOT NULL",
        """CREATE TABLE state (
            conversation_id TEXT NOT NULL REFERENCES conversations (id),
            name TEXT NOT NULL,
            value TEXT NOT NULL CHECK (json_valid(value)),
            PRIMARY KEY (conversation_id, name)
        ) STRICT, WITHOUT ROWID""",
        """CREATE TABLE partials (
            submission_id TEXT PRIMARY KEY REFERENCES submissions (id),
            data TEXT NOT NULL CHECK (json_valid(data))
        ) STRICT""",
    ),
)

# Image bytes, once per sha256 digest (messages keep only the digest), in parts of at most
# BLOB_CHUNK bytes so no single row or statement holds a whole large image.
_V2 = Migration(
    2,
    (
        """CREATE TABLE blobs (
            digest TEXT NOT NULL,
            part INTEGER NOT NULL CHECK (part >= 0),
            data BLOB NOT NULL,
            PRIMARY KEY (digest, part)
        ) STRICT""",
    ),
)

BLOB_CHUNK = 512 * 1024
"""Bytes per `blobs` row."""

# Per-submission settings (agent, model, approval, turn limit) so a recovered run keeps the
# policy its cell was admitted with (issue 12.8).
_V3 = Migration(
    3,
    ("ALTER TABLE submissions ADD COLUMN settings TEXT CHECK (settings IS NULL OR json_valid(settings))",),
)

MIGRATIONS: tuple[Migration, ...] = (_V1, _V2, _V3)
"""Every migration in order; the last one's version is what this code writes."""

SCHEMA_VERSION: int = MIGRATIONS[-1].version
"""The schema version this code reads and writes."""

RECORD_KINDS: frozenset[str] = frozenset(get_args(RecordKind))
"""The record kinds `append` accepts."""

SUBMISSION_COLUMNS = (
    "id, conversation_id, seq, text, state, accepted_at, attempts, started_at, lease_owner,"
    " lease_expires, abort_requested, joined_into, outcome, result, error, settled_at, settings"
)
"""The SELECT list `submission_from_row` decodes."""

RECORD_COLUMNS = "seq, conversation_id, submission_id, kind, data, created_at"
"""The SELECT list `record_from_row` decodes."""


def migrate(conn: sqlite3.Connection, path: str, migrations: tuple[Migration, ...] = MIGRATIONS) -> int:
    """Bring the schema up to the last of `migrations` in one transaction; return the version.

    Raises `StoreError` if the file is newer than `migrations`, or is some other SQLite database.
    """
    latest = migrations[-1].version if migrations else 0
    # IMMEDIATE so two processes opening a fresh file do not both run the same migration.
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = _current_version(conn, path)
        if version > latest:
            raise StoreError(
                f"`{path}` has store schema version {version}, newer than this flue_nb "
                f"understands ({latest}); upgrade flue_nb (`pip install -U flue_nb`) to open it",
                path=path,
                version=version,
                supported=latest,
            )
        for step in migrations:
            if step.version > version:
                for statement in step.statements:
                    conn.execute(statement)
                conn.execute("UPDATE schema_version SET version = ?", (step.version,))
                version = step.version
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return version


def _current_version(conn: sqlite3.Connection, path: str) -> int:
    tables = {
        name
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
    }
    if "schema_version" not in tables:
        if tables:
            # Someone else's database: adding our tables to it would mix two applications' data.
            raise StoreError(
                f"`{path}` is an SQLite database but not a flue_nb store (it has tables "
                f"{sorted(tables)!r} and no `schema_version`); pass a different `db=`",
                path=path,
            )
        conn.execute(
            "CREATE TABLE schema_version ( id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL) STRICT"
        )
        conn.execute("INSERT INTO schema_version (id, version) VALUES (1, 0)")
        return 0
    row = conn.execute("SELECT version FROM schema_version WHERE id = 1").fetchone()
    if row is None:
        raise StoreError(f"`{path}` has an empty `schema_version` table; the store is damaged", path=path)
    return int(row[0])


def dump_json(value: Any, what: str) -> str:
    """Serialize `value` as strict JSON text, or raise `StoreError` naming what it was."""
    try:
        # Strict JSON (no NaN/Infinity: they would fail json_valid() anyway) with lone
        # surrogates escaped, so text that is not valid UTF-8 never fails a write (runtime._text).
        return to_json(value)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"cannot store {what}: it is not JSON-serializable ({exc})") from exc


def load_json(text: str | None) -> Any:
    """Decode JSON text from a column (None stays None)."""
    return None if text is None else json.loads(text)


def submission_from_row(row: tuple[Any, ...]) -> Submission:
    """Build a fresh `Submission` from a row selected with `SUBMISSION_COLUMNS`."""
    (
        sid,
        conversation_id,
        seq,
        text,
        state,
        accepted_at,
        attempts,
        started_at,
        lease_owner,
        lease_expires,
        abort_requested,
        joined_into,
        outcome,
        result,
        error,
        settled_at,
        settings,
    ) = row
    return Submission(
        id=sid,
        conversation_id=conversation_id,
        seq=seq,
        text=text,
        state=SubmissionState(state),
        accepted_at=accepted_at,
        attempts=attempts,
        started_at=started_at,
        lease_owner=lease_owner,
        lease_expires=lease_expires,
        abort_requested=bool(abort_requested),
        joined_into=joined_into,
        outcome=None if outcome is None else Outcome(outcome),
        result=result,
        error=load_json(error),
        settled_at=settled_at,
        settings=load_json(settings),
    )


def record_from_row(row: tuple[Any, ...]) -> Record:
    """Build a fresh `Record` from a row selected with `RECORD_COLUMNS`."""
    seq, conversation_id, submission_id, kind, data, created_at = row
    return Record(
        seq=seq,
        conversation_id=conversation_id,
        submission_id=submission_id,
        kind=kind,
        data=load_json(data),
        created_at=created_at,
    )


def switch_to_wal(conn: sqlite3.Connection, busy_timeout: float) -> str:
    """Set WAL journaling, retrying while another connection briefly holds the file.

    SQLite answers `database is locked` to this pragma at once instead of calling the busy
    handler, which two processes opening a fresh file together hit; so wait here ourselves.
    """
    deadline = time.monotonic() + busy_timeout
    delay = 0.005
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def is_corrupt(exc: sqlite3.Error) -> bool:
    """True when SQLite says the file is not a database or is damaged (not merely busy)."""
    code = _primary_code(exc)
    if code is None:  # Python 3.10: only the message says
        return "not a database" in str(exc) or "malformed" in str(exc)
    return code in ("SQLITE_NOTADB", "SQLITE_CORRUPT")


def is_busy(exc: sqlite3.Error) -> bool:
    """True when SQLite gave up waiting for another connection's lock."""
    code = _primary_code(exc)
    if code is None:
        return "locked" in str(exc)
    return code in ("SQLITE_BUSY", "SQLITE_LOCKED")


def _primary_code(exc: sqlite3.Error) -> str | None:
    """`SQLITE_BUSY` also for `SQLITE_BUSY_SNAPSHOT` and the like; None before Python 3.11."""
    name = getattr(exc, "sqlite_errorname", None)
    return None if name is None else "_".join(str(name).split("_")[:2])


# -- helpers that run inside a transaction --------------------------------------------------------


def ensure_conversation(conn: sqlite3.Connection, conversation_id: str, now: float) -> None:
    """Insert the conversation unless it exists."""
    conn.execute(
        "INSERT INTO conversations (id, created_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING",
        (conversation_id, now),
    )


def check_owner(conn: sqlite3.Connection, conversation_id: str, owner: str) -> None:
    """Raise `SessionBusyError` unless `owner` holds the conversation's lease.

    An expired lease that nobody took is still its owner's (as in `renew_lease`): no one else
    can have written in between, and it spares a clock comparison between processes.
    """
    row = conn.execute("SELECT lease_owner FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
    holder = None if row is None else row[0]
    if holder != owner:
        raise SessionBusyError(
            f"{owner!r} no longer owns conversation {conversation_id!r} "
            f"({'it is free' if holder is None else f'{holder!r} does'}); nothing was written",
            conversation_id=conversation_id,
            owner=owner,
            holder=holder,
        )


def select_submission(conn: sqlite3.Connection, submission_id: str) -> Submission | None:
    """One submission row, decoded, or None."""
    row = conn.execute(f"SELECT {SUBMISSION_COLUMNS} FROM submissions WHERE id = ?", (submission_id,)).fetchone()
    return None if row is None else submission_from_row(row)


def assignments(fields: dict[str, Any]) -> list[tuple[str, Any]]:
    """Validate and encode update fields as (column, SQL value) pairs."""
    out: list[tuple[str, Any]] = []
    for name, value in fields.items():
        if name not in _UPDATABLE:
            raise TypeError(
                f"cannot update submission field {name!r}"
                + ("; use `settle()`" if name in ("outcome", "settled_at") else "")
            )
        if name == "state":
            value = SubmissionState(value).value
            if value == _SETTLED:
                raise TypeError("cannot set state to 'settled' directly; use `settle()`")
        elif name == "abort_requested":
            value = int(bool(value))
        elif name == "error" and value is not None:
            value = dump_json(value, "a submission error")
        out.append((name, value))
    return out


def apply_update(
    conn: sqlite3.Connection,
    submission_id: str,
    expect: tuple[SubmissionState, ...],
    encoded: list[tuple[str, Any]],
) -> bool:
    """One compare-and-set of `assignments(...)` on a submission; True if it matched and applied."""
    row = conn.execute("SELECT state FROM submissions WHERE id = ?", (submission_id,)).fetchone()
    if row is None:
        return False
    state = row[0]
    if expect and state not in {SubmissionState(s).value for s in expect}:
        return False
    if state == _SETTLED and any(name in _FINAL for name, _ in encoded):
        return False  # first terminal outcome wins, with its result and error
    if encoded:
        columns = ", ".join(f"{name} = ?" for name, _ in encoded)
        conn.execute(
            f"UPDATE submissions SET {columns} WHERE id = ?",
            (*(value for _, value in encoded), submission_id),
        )
    return True
