"""`PgConnection`: the one psycopg connection behind a `PostgresStore`, and how its faults end.

One transaction per `call`, under a lock (the coordinator thread writes, the notebook's thread
may read). A connection the server dropped is replaced; a transaction that provably did not
commit (the connection failed before `COMMIT` was sent, so the server rolled it back) is run
again on the new one. A server that stays away past `reconnect_timeout`, a lost `COMMIT`, a
statement past `statement_timeout` and every other database error end in `StoreError`, whose
message names the store by its masked URL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from flue_nb.runtime.errors import StoreError

try:
    import psycopg
    from psycopg import errors as pg_errors
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("a postgresql:// store needs psycopg 3: `pip install 'flue_nb[postgres]'`") from exc

__all__ = ["PgConnection"]

T = TypeVar("T")


class _Uncommitted(Exception):
    """The connection failed before COMMIT was sent: the server rolled the transaction back."""


class PgConnection:
    """A reconnecting, lock-guarded psycopg connection running one transaction per call."""

    def __init__(
        self,
        url: str,
        *,
        label: str,
        schema: str,
        statement_timeout: float,
        connect_timeout: float,
        reconnect_timeout: float,
    ) -> None:
        self._url = url
        self.label = label
        """The masked URL: what messages name the store by."""
        self.schema = schema
        self.statement_timeout = statement_timeout
        self.connect_timeout = connect_timeout
        self.reconnect_timeout = reconnect_timeout
        self._lock = threading.Lock()
        self._closed = False
        self._conn: Any = None
        self._away = False
        """The server stayed away past `reconnect_timeout`: later calls try once, not wait again."""

    def open(self, setup: Callable[[Any], object]) -> None:
        """Connect (waiting for a server that is away) and run `setup(conn)`, e.g. migrations."""
        with self._lock:
            # The first connection waits `connect_timeout` in all, not `reconnect_timeout`: a
            # URL that never answered is more likely wrong than restarting (29 s before).
            conn = self._connect_retrying(self.connect_timeout)
            try:
                setup(conn)
            except StoreError:
                conn.close()
                raise
            except psycopg.Error as exc:
                conn.close()
                raise self.error(exc) from exc
            self._conn = conn

    def call(self, fn: Callable[[Any], T]) -> T:
        """Run `fn(conn)` in one transaction; retry it on a fresh connection if it did not commit."""
        with self._lock:
            deadline = time.monotonic() + self.reconnect_timeout
            while True:
                if self._closed:
                    raise StoreError(f"the store {self.label} is closed", path=self.label)
                try:
                    if self._conn is None or self._conn.closed or self._conn.broken:
                        self._conn = None
                        self._conn = self._connect_retrying()
                    return self._once(self._conn, fn)
                except _Uncommitted as lost:
                    cause = lost.__cause__
                    assert isinstance(cause, BaseException)
                    if time.monotonic() > deadline or self._away:
                        raise self.error(cause) from cause
                    self._drop()
                    time.sleep(0.1)

    def close(self) -> None:
        """Release the connection (idempotent); later calls raise `StoreError`."""
        with self._lock:
            self._closed = True
            self._drop()

    def error(self, exc: BaseException) -> StoreError:
        """The `StoreError` for a psycopg error (psycopg's messages never carry the password)."""
        if isinstance(exc, pg_errors.QueryCanceled):
            return StoreError(
                f"the store {self.label} did not answer within the statement timeout "
                f"({self.statement_timeout:g} s); another session may hold a lock: {_first_line(exc)}",
                path=self.label,
            )
        if isinstance(exc, pg_errors.LockNotAvailable):
            return StoreError(
                f"the store {self.label} stayed locked by another session past {self.statement_timeout:g} s",
                path=self.label,
            )
        if isinstance(exc, psycopg.OperationalError):
            return StoreError(
                f"cannot reach the store {self.label} ({_first_line(exc)}); check that the server "
                "is running and the URL is right",
                path=self.label,
            )
        return StoreError(f"the store {self.label} failed: {_first_line(exc)}", path=self.label)

    # -- inside the lock --------------------------------------------------------------------------

    def _connect(self, left: float | None = None) -> Any:
        ms = int(self.statement_timeout * 1000)
        ours = (
            f"-c search_path={self.schema} -c statement_timeout={ms} -c lock_timeout={ms}"
            f" -c idle_in_transaction_session_timeout={ms * 4}"
        )
        try:
            # The URL's own `options` (e.g. `-c role=team`) are kept; ours come after them.
            theirs = psycopg.conninfo.conninfo_to_dict(self._url).get("options") or ""
            return psycopg.connect(
                self._url,
                autocommit=True,  # we send BEGIN/COMMIT ourselves, to know which one failed
                # libpq counts whole seconds per host address; never past what the wait has left.
                connect_timeout=max(1, int(min(self.connect_timeout, left or self.connect_timeout))),
                options=f"{theirs} {ours}".strip(),
                keepalives=1,
                keepalives_idle=10,
                keepalives_interval=5,
                keepalives_count=3,
                application_name="flue_nb",
            )
        except psycopg.Error as exc:
            raise self.error(exc) from exc

    def _connect_retrying(self, wait: float | None = None) -> Any:
        """Connect, retrying while the server is unreachable, up to `wait` s (`reconnect_timeout`).

        Once a wait ran out, the next calls try once each until the server answers again: a run
        that fails makes several store calls (record, settle), and each must not wait again.
        """
        wait = self.reconnect_timeout if wait is None else wait
        deadline = time.monotonic() + (0 if self._away else wait)
        delay = 0.1
        while True:
            try:
                conn = self._connect(max(0.0, deadline - time.monotonic()))
                self._away = False
                return conn
            except StoreError as exc:
                if not _transient(exc.__cause__):
                    raise
                if time.monotonic() + 0.05 >= deadline:
                    self._away = True
                    raise StoreError(
                        f"cannot reach the store {self.label}: no answer within {wait:g} s "
                        f"({_first_line(exc.__cause__ or exc)}); check that the server is running and the URL "
                        "is right",
                        **exc.details,
                    ) from exc.__cause__
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 2.0)

    def _once(self, conn: Any, fn: Callable[[Any], T]) -> T:
        try:
            conn.execute("BEGIN")
            out = fn(conn)
        except BaseException as exc:
            # Also on KeyboardInterrupt: a half-applied write must never become visible.
            if conn.broken or conn.closed:
                if isinstance(exc, psycopg.OperationalError):
                    raise _Uncommitted() from exc
                raise
            try:
                conn.execute("ROLLBACK")
            except psycopg.Error:
                self._drop()
            if isinstance(exc, psycopg.Error):
                raise self.error(exc) from exc
            raise
        try:
            conn.execute("COMMIT")
        except psycopg.Error as exc:
            self._drop()
            if isinstance(exc, psycopg.OperationalError):
                raise StoreError(
                    f"lost the connection to {self.label} while committing; the last write may "
                    "or may not have been stored",
                    path=self.label,
                ) from exc
            raise self.error(exc) from exc
        return out

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - a broken connection may fail to close; it is gone anyway
                pass


def _transient(exc: BaseException | None) -> bool:
    """A server that is away (refused, reset, starting up, shutting down), not a wrong URL.

    A missing database or a refused password is an `OperationalError` too, but waiting will not
    fix it. For a failure while connecting libpq gives psycopg no SQLSTATE, only its message, so
    the message decides here: a `FATAL` from the server is final unless the server said it is
    starting, stopping, recovering or full.
    """
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = getattr(exc, "sqlstate", None)
    if state is not None:
        return str(state).startswith(("08", "57"))
    text = str(exc)
    return "FATAL:" not in text or any(w in text for w in _AWAY)


_AWAY = ("starting up", "shutting down", "in recovery", "too many", "not yet accepting")
"""What a server says while it cannot take connections for now."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
