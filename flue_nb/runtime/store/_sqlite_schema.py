"""The SQLite side of `SQLiteStore`: schema migrations, WAL switching and error classification.

Migrations are frozen once released: a schema change is a new entry at the end of `MIGRATIONS`,
never an edit of an old one, because files written by older versions replay only what they lack.
"""

from __future__ import annotations

import sqlite3
import time

from flue_nb.runtime.errors import StoreError
from flue_nb.runtime.store._rows import Migration

__all__ = [
    "DB_NOW",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Migration",
    "is_busy",
    "is_corrupt",
    "migrate",
    "switch_to_wal",
]


DB_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
"""The store's own clock in SQL (seconds since the epoch): leases are measured by it, never by a
caller's `now`, so a kernel whose clock seam is skewed cannot steal or keep a lease (as with
PostgreSQL's `clock_timestamp()`)."""

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

# Per-submission settings (agent, model, approval, turn limit) so a recovered run keeps the
# policy its cell was admitted with (issue 12.8).
_V3 = Migration(
    3,
    ("ALTER TABLE submissions ADD COLUMN settings TEXT CHECK (settings IS NULL OR json_valid(settings))",),
)

# What each user spent on model calls, for the hub policy's per-user limits (issue 36.4).
_V4 = Migration(
    4,
    (
        """CREATE TABLE spend (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            user_name TEXT NOT NULL,
            at REAL NOT NULL,
            usd REAL NOT NULL
        ) STRICT""",
        "CREATE INDEX spend_by_user ON spend (user_name, at)",
    ),
)

# The unsettled submissions of a conversation by one index range (issue 37): a run, a status and
# a lease renewal ask for them every turn, and `submissions_by_conversation` made that a scan of
# every submission the conversation ever had. Queries name the state as a literal
# (`state <> 'settled'`), so the planner can prove this partial index applies.
_V5 = Migration(
    5,
    ("CREATE INDEX submissions_unsettled ON submissions (conversation_id, seq) WHERE state <> 'settled'",),
)

# What `status()` and a chat's gauge fold from a conversation's records (token totals, spend,
# outcomes), kept with the seq of the last record it covers (issue 37): a new process folds the
# records after it instead of every record the conversation ever had. A cache of the records,
# never their truth: any process may write it, and only a later seq replaces it.
_V6 = Migration(
    6,
    (
        """CREATE TABLE tallies (
            conversation_id TEXT PRIMARY KEY REFERENCES conversations (id),
            seq INTEGER NOT NULL,
            data TEXT NOT NULL CHECK (json_valid(data))
        ) STRICT""",
    ),
)

# Each submission's number in its conversation (1, 2, ...), so "how many before this one" is one
# index lookup, not a COUNT over every submission the conversation ever had (issue 37: history's
# and a chat's "N earlier not shown"). The database numbers them, by a trigger, so every writer
# does (a process of an older flue_nb still running on the migrated file, a test's raw INSERT):
# one more than the conversation's latest, read along `submissions_by_conversation`. Admissions
# of one conversation are serialized (`BEGIN IMMEDIATE`), so two never take the same number.
_V7 = Migration(
    7,
    (
        # No CHECK on it: SQLite would read the whole table once more to check the rows it has.
        "ALTER TABLE submissions ADD COLUMN ordinal INTEGER",
        """UPDATE submissions SET ordinal = numbered.n
            FROM (SELECT seq, ROW_NUMBER() OVER (PARTITION BY conversation_id ORDER BY seq) AS n
                  FROM submissions) AS numbered
            WHERE numbered.seq = submissions.seq""",
        """CREATE TRIGGER submissions_ordinal AFTER INSERT ON submissions FOR EACH ROW
        BEGIN
            UPDATE submissions SET ordinal = 1 + COALESCE(
                (SELECT p.ordinal FROM submissions AS p
                 WHERE p.conversation_id = NEW.conversation_id AND p.seq < NEW.seq
                 ORDER BY p.seq DESC LIMIT 1), 0)
            WHERE seq = NEW.seq;
        END""",
    ),
)

MIGRATIONS: tuple[Migration, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7)
"""Every migration in order; the last one's version is what this code writes."""

SCHEMA_VERSION: int = MIGRATIONS[-1].version
"""The schema version this code reads and writes."""


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
