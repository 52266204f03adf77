"""The SQL side of `PostgresStore`: schema migrations, row decoding and in-transaction helpers.

Same rules as the SQLite schema: a migration is frozen once released; a change is a new entry at
the end of `MIGRATIONS`. Everything lives in the `flue` schema of the database the URL names.
Free text (`text`, `result`) is stored as a JSON string, because PostgreSQL's `text` cannot hold
NUL characters and a tool result may.
"""

from __future__ import annotations

from typing import Any

from flue_nb.runtime.errors import SessionBusyError, StoreError
from flue_nb.runtime.store import Submission, SubmissionState
from flue_nb.runtime.store._sqlite_schema import (
    Migration,
    assignments,
    dump_json,
    load_json,
    submission_from_row,
)

__all__ = [
    "BLOB_CHUNK",
    "MIGRATIONS",
    "NOW",
    "RECORD_COLUMNS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SUBMISSION_COLUMNS",
    "apply_update",
    "encode_fields",
    "fence",
    "lock_conversation",
    "migrate",
    "select_submission",
    "submission_from_pg",
]

_SETTLED = SubmissionState.SETTLED.value
_FINAL = frozenset({"state", "result", "error"})
"""Columns a settled submission keeps forever (its outcome is written by `settle` only)."""

SCHEMA = "flue"
"""The PostgreSQL schema (namespace) holding flue_nb's tables."""

NOW = "extract(epoch FROM clock_timestamp())::float8"
"""The database's clock, in seconds since the epoch: leases never read a kernel's clock."""

_V1 = Migration(
    1,
    (
        """CREATE TABLE conversations (
            id text PRIMARY KEY,
            created_at float8 NOT NULL,
            lease_owner text,
            lease_expires float8,
            CHECK ((lease_owner IS NULL) = (lease_expires IS NULL))
        )""",
        # seq comes from a sequence: admission order is the database's, never a kernel's.
        """CREATE TABLE submissions (
            seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id text NOT NULL UNIQUE,
            conversation_id text NOT NULL REFERENCES conversations (id),
            text json NOT NULL,
            state text NOT NULL
                CHECK (state IN ('queued', 'running', 'joining', 'joined', 'settled')),
            accepted_at float8 NOT NULL,
            attempts integer NOT NULL DEFAULT 0,
            started_at float8,
            lease_owner text,
            lease_expires float8,
            abort_requested boolean NOT NULL DEFAULT false,
            joined_into text REFERENCES submissions (id),
            outcome text CHECK (outcome IN ('completed', 'failed', 'aborted')),
            result json,
            error json,
            settled_at float8,
            CHECK ((state = 'settled') = (outcome IS NOT NULL))
        )""",
        "CREATE INDEX submissions_by_conversation ON submissions (conversation_id, seq)",
        "CREATE INDEX submissions_by_joined_into ON submissions (joined_into) WHERE joined_into IS NOT NULL",
        """CREATE TABLE records (
            seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            conversation_id text NOT NULL REFERENCES conversations (id),
            submission_id text REFERENCES submissions (id),
            kind text NOT NULL,
            data json NOT NULL,
            created_at float8 NOT NULL
        )""",
        "CREATE INDEX records_by_conversation ON records (conversation_id, seq)",
        "CREATE INDEX records_by_submission ON records (submission_id, seq) WHERE submission_id IS NOT NULL",
        """CREATE TABLE state (
            conversation_id text NOT NULL REFERENCES conversations (id),
            name text NOT NULL,
            value json NOT NULL,
            PRIMARY KEY (conversation_id, name)
        )""",
        """CREATE TABLE partials (
            submission_id text PRIMARY KEY REFERENCES submissions (id),
            data json NOT NULL
        )""",
    ),
)

# Image bytes, once per sha256 digest (messages keep only the digest), in parts of at most
# BLOB_CHUNK bytes (as in the SQLite store).
_V2 = Migration(
    2,
    (
        """CREATE TABLE blobs (
            digest text NOT NULL,
            part integer NOT NULL CHECK (part >= 0),
            data bytea NOT NULL,
            PRIMARY KEY (digest, part)
        )""",
    ),
)

BLOB_CHUNK = 512 * 1024
"""Bytes per `blobs` row."""

# Per-submission settings, as in the SQLite store's migration 3 (issue 12.8).
_V3 = Migration(3, ("ALTER TABLE submissions ADD COLUMN settings json",))

MIGRATIONS: tuple[Migration, ...] = (_V1, _V2, _V3)
"""Every migration in order; the last one's version is what this code writes."""

SCHEMA_VERSION: int = MIGRATIONS[-1].version
"""The schema version this code reads and writes."""

SUBMISSION_COLUMNS = (
    "id, conversation_id, seq, text::text, state, accepted_at, attempts, started_at, lease_owner,"
    " lease_expires, abort_requested, joined_into, outcome, result::text, error::text, settled_at,"
    " settings::text"
)
"""The SELECT list `submission_from_pg` decodes."""

RECORD_COLUMNS = "seq, conversation_id, submission_id, kind, data::text, created_at"
"""The SELECT list `record_from_row` decodes."""

# Any constant works: it only has to be the same in every process that migrates this database.
_MIGRATION_LOCK = 0x666C7565


def migrate(conn: Any, label: str, migrations: tuple[Migration, ...] = MIGRATIONS) -> int:
    """Bring the `flue` schema up to the last of `migrations` in one transaction; return the version.

    Raises `StoreError` if the database holds a newer schema than `migrations`. An advisory lock
    makes two processes opening a fresh database run each migration once.
    """
    latest = migrations[-1].version if migrations else 0
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_version ("
            " id integer PRIMARY KEY CHECK (id = 1), version integer NOT NULL)"
        )
        conn.execute(f"INSERT INTO {SCHEMA}.schema_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING")
        (version,) = conn.execute(f"SELECT version FROM {SCHEMA}.schema_version WHERE id = 1").fetchone()
        if version > latest:
            raise StoreError(
                f"`{label}` has store schema version {version}, newer than this flue_nb "
                f"understands ({latest}); upgrade flue_nb (`pip install -U flue_nb`) to open it",
                path=label,
                version=version,
                supported=latest,
            )
        for step in migrations:
            if step.version > version:
                for statement in step.statements:
                    conn.execute(statement)
                conn.execute(f"UPDATE {SCHEMA}.schema_version SET version = %s", (step.version,))
                version = step.version
        conn.execute("COMMIT")
    except BaseException:
        if not conn.closed:
            conn.execute("ROLLBACK")
        raise
    return int(version)


def submission_from_pg(row: tuple[Any, ...]) -> Submission:
    """A `Submission` from a row selected with `SUBMISSION_COLUMNS` (text and result are JSON)."""
    values = list(row)
    values[3] = load_json(values[3])
    values[13] = load_json(values[13])
    return submission_from_row(tuple(values))


# -- helpers that run inside a transaction --------------------------------------------------------


def lock_conversation(conn: Any, key: str, now: float) -> str | None:
    """Create the conversation if needed and lock its row; return the lease holder."""
    conn.execute(
        "INSERT INTO conversations (id, created_at) VALUES (%s, %s) ON CONFLICT (id) DO NOTHING",
        (key, now),
    )
    (holder,) = conn.execute("SELECT lease_owner FROM conversations WHERE id = %s FOR UPDATE", (key,)).fetchone()
    return None if holder is None else str(holder)


def fence(conn: Any, key: str, cid: str, owner: str) -> None:
    """Lock the conversation and raise `SessionBusyError` unless `owner` holds its lease."""
    row = conn.execute("SELECT lease_owner FROM conversations WHERE id = %s FOR UPDATE", (key,)).fetchone()
    holder = None if row is None else row[0]
    if holder != owner:
        raise SessionBusyError(
            f"{owner!r} no longer owns conversation {cid!r} "
            f"({'it is free' if holder is None else f'{holder!r} does'}); nothing was written",
            conversation_id=cid,
            owner=owner,
            holder=holder,
        )


def select_submission(conn: Any, submission_id: str) -> tuple[Any, ...] | None:
    """One submission row (`SUBMISSION_COLUMNS`), or None."""
    row = conn.execute(f"SELECT {SUBMISSION_COLUMNS} FROM submissions WHERE id = %s", (submission_id,)).fetchone()
    return None if row is None else tuple(row)


def apply_update(conn: Any, submission_id: str, expect: tuple[Any, ...], encoded: list[tuple[str, Any]]) -> bool:
    """One compare-and-set on a submission (its row locked); True if it matched and applied."""
    row = conn.execute("SELECT state FROM submissions WHERE id = %s FOR UPDATE", (submission_id,)).fetchone()
    if row is None:
        return False
    state = row[0]
    if expect and state not in {SubmissionState(s).value for s in expect}:
        return False
    if state == _SETTLED and any(name in _FINAL for name, _ in encoded):
        return False  # the first terminal outcome wins, with its result and error
    if encoded:
        columns = ", ".join(
            f"{name} = %s::json" if name in ("result", "error") else f"{name} = %s" for name, _ in encoded
        )
        conn.execute(
            f"UPDATE submissions SET {columns} WHERE id = %s",
            (*(value for _, value in encoded), submission_id),
        )
    return True


def encode_fields(fields: dict[str, Any]) -> list[tuple[str, Any]]:
    """`assignments(fields)` as PostgreSQL columns take them (booleans, free text as JSON)."""
    out = []
    for name, value in assignments(fields):
        if name == "abort_requested":
            value = bool(value)
        elif name == "result" and value is not None:
            value = dump_json(value, "a submission result")
        out.append((name, value))
    return out
