"""`Listener`: one LISTEN connection per `PostgresStore`, waking the `NotifyWatch` of each view.

Every write transaction of `SQLStore` on PostgreSQL ends with `pg_notify(CHANNEL, <conversation
key>)`, which the server delivers at commit (never for a rolled-back write). A daemon thread
holds a second, autocommit connection that LISTENs on `CHANNEL` and wakes the watches of the
conversation named in each notification's payload. When that connection is lost, every watch
falls back to a short poll (`PollWatch`'s interval) while the thread reconnects quietly; after a
reconnect every watch is woken once, since a notification may have been missed in the gap.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import psycopg

from flue_nb.runtime.store._watch import POLL_INTERVAL

__all__ = ["CHANNEL", "Listener", "NotifyWatch"]

CHANNEL = "flue_changes"
"""The one notification channel; the payload is the changed conversation's stored id."""

_RETRY = (0.2, 0.5, 1.0, 2.0, 5.0)
"""Seconds between reconnection attempts, growing to the last one."""
_TICK = 0.5
"""Longest `notifies` wait: how soon the thread notices the store closed."""


class NotifyWatch:
    """Wakes when the listener hears of a change to its conversation (or polls while it cannot)."""

    def __init__(self, listener: Listener, key: str) -> None:
        self._listener = listener
        self.key = key
        self._event = threading.Event()
        self._closed = False

    def wait(self, timeout: float) -> bool:
        """Until notified (True) or `timeout` s (False); a short poll (True) while not listening."""
        if self._closed:
            return False
        if not self._listener.listening:
            self._event.wait(max(0.0, min(POLL_INTERVAL, timeout)))
            self._event.clear()
            return not self._closed
        fired = self._event.wait(max(0.0, timeout))
        # Cleared before the caller looks: a notification after this point wakes the next wait,
        # and the commit it announces is visible to the look that follows now.
        self._event.clear()
        return fired and not self._closed

    def wake(self) -> None:
        """The conversation may have changed (the listener's thread)."""
        self._event.set()

    def close(self) -> None:
        """Stop watching; a waiting `wait` returns at once."""
        self._closed = True
        self._listener.forget(self)
        self._event.set()


class Listener:
    """The LISTEN side of one store: a thread, its connection, and the watches to wake."""

    def __init__(self, connect: Any) -> None:
        self._connect = connect
        """`connect()` -> a new autocommit psycopg connection (the store's URL and options)."""
        self._lock = threading.Lock()
        self._watches: dict[str, weakref.WeakSet[NotifyWatch]] = {}
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self.listening = False
        """True while the LISTEN connection is up: watches wait for notifications, not poll."""
        self.notified = 0
        """Notifications received (for tests)."""

    def watch(self, key: str) -> NotifyWatch:
        """A watch on the conversation stored as `key` (starts the thread on first use)."""
        w = NotifyWatch(self, key)
        with self._lock:
            self._watches.setdefault(key, weakref.WeakSet()).add(w)
            if self._thread is None and not self._closed.is_set():
                self._thread = threading.Thread(target=self._run, name="flue-pg-listen", daemon=True)
                self._thread.start()
        return w

    def forget(self, w: NotifyWatch) -> None:
        """Drop a closed watch."""
        with self._lock:
            group = self._watches.get(w.key)
            if group is not None:
                group.discard(w)
                if not group:
                    del self._watches[w.key]

    def close(self) -> None:
        """Stop the thread and close its connection."""
        # The thread sees it within one `notifies` timeout and closes its connection itself
        # (closing it from here would race the wait that holds it).
        self._closed.set()
        self._wake_all()

    # -- the thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        attempt = 0
        while not self._closed.is_set():
            conn = None
            try:
                conn = self._connect()
                conn.execute(f"LISTEN {CHANNEL}")
            except Exception:  # noqa: BLE001 - the server is away: poll meanwhile, try again later
                _close(conn)
                self._closed.wait(_RETRY[min(attempt, len(_RETRY) - 1)])
                attempt += 1
                continue
            attempt = 0
            self.listening = True
            self._wake_all()  # what changed while nobody listened is looked at once
            try:
                while not self._closed.is_set():
                    for note in conn.notifies(timeout=_TICK):
                        self.notified += 1
                        self._wake(note.payload)
            except Exception:  # noqa: BLE001 - a lost connection: the watches poll until it is back
                pass
            finally:
                self.listening = False
                self._wake_all()
                _close(conn)

    def _wake(self, key: str) -> None:
        with self._lock:
            group = list(self._watches.get(key, ()))
        for w in group:
            w.wake()

    def _wake_all(self) -> None:
        with self._lock:
            every = [w for group in self._watches.values() for w in group]
        for w in every:
            w.wake()


def _close(conn: Any) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - a broken connection may fail to close; it is gone anyway
            pass


def listen_connection(url: str, connect_timeout: float) -> Any:
    """A new autocommit connection for LISTEN (no statement timeout: it waits by design)."""
    return psycopg.connect(
        url,
        autocommit=True,
        connect_timeout=max(1, int(connect_timeout)),
        keepalives=1,
        keepalives_idle=10,
        keepalives_interval=5,
        keepalives_count=3,
        application_name="flue_nb listen",
    )
