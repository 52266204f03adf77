"""The PostgreSQL side of `PostgresStore`: its schema migrations, its clock and its namespace.

Same rules as the SQLite schema: a migration is frozen once released; a change is a new entry at
the end of `MIGRATIONS`. Everything lives in the `flue` schema of the database the URL names.
Free text (`text`, `result`) is stored as a JSON string, because PostgreSQL's `text` cannot hold
NUL characters and a tool result may.
"""

from __future__ import annotations

from typing import Any

from flue_nb.runtime.errors import StoreError
from flue_nb.runtime.store._rows import Migration

__all__ = ["MIGRATIONS", "NOW", "SCHEMA", "SCHEMA_VERSION", "migrate"]

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

# Per-submission settings, as in the SQLite store's migration 3 (issue 12.8).
_V3 = Migration(3, ("ALTER TABLE submissions ADD COLUMN settings json",))

# Per-user spending, as in the SQLite store's migration 4 (issue 36.4).
_V4 = Migration(
    4,
    (
        """CREATE TABLE spend (
            seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            user_name text NOT NULL,
            at float8 NOT NULL,
            usd float8 NOT NULL
        )""",
        "CREATE INDEX spend_by_user ON spend (user_name, at)",
    ),
)

# The unsettled submissions by one index range, as in the SQLite store's migration 5 (issue 37).
_V5 = Migration(
    5,
    ("CREATE INDEX submissions_unsettled ON submissions (conversation_id, seq) WHERE state <> 'settled'",),
)

# The folded tally of each conversation's records, as in the SQLite store's migration 6 (issue 37).
_V6 = Migration(
    6,
    (
        """CREATE TABLE tallies (
            conversation_id text PRIMARY KEY REFERENCES conversations (id),
            seq bigint NOT NULL,
            data json NOT NULL
        )""",
    ),
)

# Each submission's number in its conversation, as in the SQLite store's migration 7 (issue 37),
# set by a BEFORE INSERT trigger (an older flue_nb's INSERT gets one too). Admissions of one
# conversation lock its row first (READ COMMITTED: the trigger's read sees the one before).
_V7 = Migration(
    7,
    (
        "ALTER TABLE submissions ADD COLUMN ordinal bigint",
        """UPDATE submissions SET ordinal = numbered.n
            FROM (SELECT seq, row_number() OVER (PARTITION BY conversation_id ORDER BY seq) AS n
                  FROM submissions) AS numbered
            WHERE numbered.seq = submissions.seq""",
        "ALTER TABLE submissions ALTER COLUMN ordinal SET NOT NULL",
        f"""CREATE FUNCTION {SCHEMA}.number_submission() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.ordinal := 1 + COALESCE(
                (SELECT p.ordinal FROM {SCHEMA}.submissions AS p
                 WHERE p.conversation_id = NEW.conversation_id
                 ORDER BY p.seq DESC LIMIT 1), 0);
            RETURN NEW;
        END $$""",
        f"""CREATE TRIGGER submissions_ordinal BEFORE INSERT ON submissions
            FOR EACH ROW EXECUTE FUNCTION {SCHEMA}.number_submission()""",
    ),
)

MIGRATIONS: tuple[Migration, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7)
"""Every migration in order; the last one's version is what this code writes."""

SCHEMA_VERSION: int = MIGRATIONS[-1].version
"""The schema version this code reads and writes."""

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
