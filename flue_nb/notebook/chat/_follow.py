"""A chat follows its conversation's record stream, not only its own process's events.

The runtime's bus carries the events of runs in this process. A conversation open in two
notebooks (two kernels on one store) also changes where this process cannot see it: the other
kernel admits, runs and settles messages. `StoreFollower` polls the store cheaply (the records
appended after the last one seen, and the unsettled submissions) a few times a second; when
something changed that no event of this process explained, the chat is redrawn from the store
(`Session.events()` rebuilds events from records) with a fresh status, so both views say the
same and neither stays "working · 1 queued" for good.
"""

from __future__ import annotations

import threading
from typing import Any

from flue_nb.runtime.coordinator import coordinator

__all__ = ["POLL_INTERVAL", "StoreFollower"]

POLL_INTERVAL = 0.5
"""Seconds between two looks at the store (two indexed queries on SQLite or PostgreSQL)."""


class StoreFollower:
    """Polls the conversation's store for changes made by other processes; redraws the chat."""

    def __init__(
        self,
        widget: Any,
        *,
        interval: float = POLL_INTERVAL,
        baseline: tuple[int, tuple[tuple[str, str], ...]] | None = None,
    ) -> None:
        self.widget = widget
        self.interval = interval
        self.redraws = 0
        """How many times the store showed a change from elsewhere (for tests)."""
        # What the chat was drawn from (`snapshot` taken before the draw): the first look compares
        # with it, so another kernel's run that ends before that look is still drawn.
        self._seq: int | None = baseline[0] if baseline is not None else None
        self._unsettled: tuple[tuple[str, str], ...] | None = baseline[1] if baseline is not None else None
        self._own = False
        self._lock = threading.Lock()
        self._stopped = False
        self._handle: Any = None
        self._schedule()

    @staticmethod
    def snapshot(session: Any) -> tuple[int, tuple[tuple[str, str], ...]]:
        """The newest record's seq and the unsettled submissions: what a redraw now would show."""
        store, cid = session.store, session.conversation_id
        seq = max((r.seq for r in store.records(cid)), default=0)
        return seq, tuple((s.id, s.state.value) for s in store.submissions(cid, unsettled=True))

    def own_event(self) -> None:
        """An event of this process arrived: what it wrote to the store is already drawn."""
        with self._lock:
            self._own = True

    def stop(self) -> None:
        """Stop polling (the chat closed)."""
        with self._lock:
            self._stopped = True
            handle, self._handle = self._handle, None
        if handle is not None:
            coordinator().loop.call_soon_threadsafe(handle.cancel)

    def _schedule(self) -> None:
        co = coordinator()

        def arm() -> None:
            with self._lock:
                if not self._stopped:
                    self._handle = co.loop.call_later(self.interval, self._tick)

        co.call(arm)

    def _tick(self) -> None:
        try:
            if self._changed_elsewhere():
                self.redraws += 1
                self.widget.redraw_from_store()
        except Exception:  # noqa: BLE001 - a store hiccup must not stop the chat; look again later
            pass
        finally:
            self._schedule()

    def _changed_elsewhere(self) -> bool:
        session = self.widget.session
        store, cid = session.store, session.conversation_id
        records = store.records(cid, after_seq=self._seq or 0)
        unsettled = tuple((s.id, s.state.value) for s in store.submissions(cid, unsettled=True))
        with self._lock:
            first = self._seq is None
            if records:
                self._seq = max(r.seq for r in records)
            elif first:
                self._seq = 0
            changed = bool(records) or unsettled != self._unsettled
            self._unsettled = unsettled
            own, self._own = self._own, False
        if first:
            return False  # the chat was just drawn from the store
        # Our own run's records arrive with its events; only a change nothing here explained
        # (another kernel's message, run or settlement) needs the redraw.
        return changed and not own and not _running_here(session)


def _running_here(session: Any) -> bool:
    lease = session.lease()
    return lease is not None and lease.here
