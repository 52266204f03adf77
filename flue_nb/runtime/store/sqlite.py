"""`SQLiteStore`: the embedded durable store (stdlib sqlite3), and `open_store` to find its file.

The store's logic is `SQLStore`'s (_sql.py); this file opens the file and runs transactions.
One connection per store, guarded by a lock: the runtime writes from its coordinator thread and
the notebook's main thread may read. Every public method is one transaction; writes start with
`BEGIN IMMEDIATE` so two processes sharing a file never interleave a read-modify-write.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, TypeVar

from flue_nb.runtime.errors import StoreError
from flue_nb.runtime.store._sql import Dialect, SQLStore, Tx
from flue_nb.runtime.store._sqlite_schema import DB_NOW, is_busy, is_corrupt, migrate, switch_to_wal

__all__ = ["DEFAULT_DB", "SQLiteStore", "open_store", "read_only", "read_only_message"]

DEFAULT_DB = os.path.join(".flue", "flue.sqlite")
"""Where `open_store(None, cwd=...)` keeps the store, relative to the working directory."""

_MEMORY = ":memory:"

T = TypeVar("T")

SQLITE = Dialect(
    name="sqlite",
    placeholder="?",
    now=DB_NOW,
    json_param="?",
    json_out="{}",
    text_as_json=False,
    row_lock="",
)
"""JSON columns are TEXT checked by `json_valid`; `BEGIN IMMEDIATE` excludes other writers, so no
row locks are needed."""


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


class SQLiteStore(SQLStore):
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

    dialect = SQLITE

    # -- plumbing ---------------------------------------------------------------------------------

    def _run(self, fn: Callable[[Tx], T], *, write: bool) -> T:
        with self._tx("IMMEDIATE" if write else "DEFERRED") as conn:
            return fn(Tx(conn, SQLITE))

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
