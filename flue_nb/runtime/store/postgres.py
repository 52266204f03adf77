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
- **Notified views.** Every write transaction notifies `flue_changes` with the conversation's
  stored id; `watch()` wakes on those notifications (one LISTEN connection per store, opened on
  first use, _pg_listen.py) and falls back to a short poll while that connection is down.
- **Per-user conversation ids.** A conversation id is stored under the user's name
  (`JUPYTERHUB_USER`, else the OS user) unless it names a namespace (`team:weekly-report`); the
  caller always sees the id it passed. This is convention: a database role per user is the
  enforcement (see the README).

One connection per store, guarded by a lock, like `SQLiteStore` (`_pg_conn.PgConnection`). The
store's logic is `SQLStore`'s (_sql.py), over the `POSTGRES` dialect.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from flue_nb.runtime.store import Watch
from flue_nb.runtime.store._pg_conn import PgConnection
from flue_nb.runtime.store._pg_listen import CHANNEL, Listener, listen_connection
from flue_nb.runtime.store._pg_schema import NOW, SCHEMA, migrate
from flue_nb.runtime.store._sql import Dialect, SQLStore, Tx
from flue_nb.runtime.store.url import mask_url, namespace_of, scoped_user

__all__ = ["PostgresStore"]

T = TypeVar("T")

POSTGRES = Dialect(
    name="postgres",
    placeholder="%s",
    now=NOW,
    json_param="?::json",
    json_out="{}::text",
    text_as_json=True,
    row_lock=" FOR UPDATE",
    notify=f"SELECT pg_notify('{CHANNEL}', ?)",
)
"""JSON columns are `json`; free text is a JSON string (NUL-safe); every write locks its
conversation's row first, the one lock order that makes commit order `seq` order."""


class PostgresStore(SQLStore):
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
        self._listener: Listener | None = None

    dialect = POSTGRES

    # -- plumbing ---------------------------------------------------------------------------------

    def _run(self, fn: Callable[[Tx], T], *, write: bool) -> T:
        # One kind of transaction: writes take row locks (`Dialect.row_lock`) as they go.
        return self._db.call(lambda conn: fn(Tx(conn, POSTGRES)))

    def watch(self, conversation_id: str) -> Watch:
        # Woken by the server's notifications (one LISTEN connection per store, opened now).
        if self._listener is None:
            url, timeout = self._url, self.connect_timeout
            self._listener = Listener(lambda: listen_connection(url, timeout))
        return self._listener.watch(self._key(conversation_id))

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
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

    def _visible(self) -> tuple[str, tuple[Any, ...]]:
        # This user's conversations and the namespaced ones, not other users'.
        return "(substr(c.id, 1, ?) = ? OR substr(c.id, 1, 5) <> 'user:')", (len(self._prefix), self._prefix)
