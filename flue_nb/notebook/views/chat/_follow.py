"""A chat follows its conversation's record stream, not only its own process's events.

The runtime's bus carries the events of runs in this process. A conversation open in two
notebooks (two kernels on one store) also changes where this process cannot see it: the other
kernel admits, runs and settles messages. `StoreFollower` waits on the store's `watch` (a
PostgreSQL notification, a half-second poll on SQLite; the follower does not know which) on a
thread of its own, then looks cheaply (the records appended after the last one seen, and the
unsettled submissions); when something changed that no event of this process explained, the
chat is redrawn from the store (`Session.events()` rebuilds events from records) with a fresh
status, so both views say the same and neither stays "working · 1 queued" for good.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flue_nb.runtime.store import POLL_INTERVAL, PollWatch

if TYPE_CHECKING:
    from flue_nb.notebook.views.chat.widget import ChatWidget
    from flue_nb.runtime.session import Session

__all__ = ["IDLE_LOOK", "POLL_INTERVAL", "STALE_AFTER", "StoreFollower"]

IDLE_LOOK = 5.0
"""Seconds after which a chat looks even though nothing was announced: what no write announces
(a kernel that died holding the lease) still shows within this time."""

STALE_AFTER = 1.0
"""Seconds a chat may show a submission unsettled that the store has settled before it is redrawn
(a live event may trail the store by that much). With `IDLE_LOOK`, any chat converges on the
store's state within `IDLE_LOOK + max(IDLE_LOOK, STALE_AFTER)` seconds (10 s), whatever
notification it missed."""

_UNKNOWN = object()
"""The lease before the first look."""


class StoreFollower:
    """Follows the conversation's store for changes made by other processes; redraws the chat."""

    def __init__(
        self,
        widget: ChatWidget,
        *,
        idle: float = IDLE_LOOK,
        baseline: tuple[int, tuple[tuple[str, str], ...]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.widget = widget
        self.idle = idle
        self._clock = clock
        self._stale_since: float | None = None
        """When the chat was first seen showing as unsettled what the store has settled."""
        self.redraws = 0
        """How many times the store showed a change from elsewhere (for tests)."""
        # What the chat was drawn from (`snapshot` taken before the draw): the first look compares
        # with it, so another kernel's run that ends before that look is still drawn.
        self._seq: int | None = baseline[0] if baseline is not None else None
        self._unsettled: tuple[tuple[str, str], ...] | None = baseline[1] if baseline is not None else None
        self._holder: Any = _UNKNOWN
        self._own = False
        self._lock = threading.Lock()
        self._stopped = False
        session = widget.session
        try:
            self._watch: Any = session.store.watch(session.conversation_id)
        except Exception:  # noqa: BLE001 - a store that cannot watch is looked at twice a second
            self._watch = PollWatch()
        self._thread = threading.Thread(target=self._run, name="flue-chat-follow", daemon=True)
        self._thread.start()

    @staticmethod
    def snapshot(session: Session) -> tuple[int, tuple[tuple[str, str], ...]]:
        """The newest record's seq and the unsettled submissions: what a redraw now would show."""
        from flue_nb.runtime.session import StoredConversation

        store, cid = session.store, session.conversation_id
        # Both read by index: the whole record stream was read here at every chat's opening.
        unsettled = tuple((s.id, s.state.value) for s in store.submissions(cid, unsettled=True))
        return StoredConversation(store, cid).newest_seq(), unsettled

    def own_event(self) -> None:
        """An event of this process arrived: what it wrote to the store is already drawn."""
        with self._lock:
            self._own = True

    def stop(self, wait: float = 2.0) -> None:
        """Stop following (the chat closed), and wait up to `wait` s for a look under way to end:
        a chat closed is one that reads its store no more."""
        with self._lock:
            self._stopped = True
        self._watch.close()
        if threading.current_thread() is not self._thread:
            self._thread.join(wait)

    def _run(self) -> None:
        while not self._stopped:
            self._watch.wait(self.idle)
            if self._stopped:
                return
            try:
                if self._changed_elsewhere():
                    self.redraws += 1
                    self.widget.redraw_from_store()
            except Exception:  # noqa: BLE001 - a store hiccup must not stop the chat; look again later
                pass

    def _changed_elsewhere(self) -> bool:
        session = self.widget.session
        store, cid = session.store, session.conversation_id
        records = store.records(cid, after_seq=self._seq or 0)
        unsettled = tuple((s.id, s.state.value) for s in store.submissions(cid, unsettled=True))
        lease = session.lease()
        # Who holds the conversation, and whether it provably died: a card offering another
        # kernel's approval says "ended" once that kernel is gone, though nothing was written.
        holder = None if lease is None else (lease.owner, lease.gone)
        with self._lock:
            first = self._seq is None
            if records:
                self._seq = max(r.seq for r in records)
            elif first:
                self._seq = 0
            changed = (
                bool(records)
                or unsettled != self._unsettled
                or (self._holder is not _UNKNOWN and holder != self._holder)
            )
            self._unsettled, self._holder = unsettled, holder
            own, self._own = self._own, False
        if first:
            return False  # the chat was just drawn from the store
        if self._stale({sid for sid, _ in unsettled}):
            return True
        # Records of a submission the chat does not show are another kernel's, even when ours
        # came in the same look: a message sent here just after another kernel's run settled
        # (before this chat's next look) left that run out of the chat for good.
        if records:
            drawn = {b.id for b in list(self.widget.fold.blocks.values()) if b.kind == "submission"}
            if any(r.submission_id is not None and r.submission_id not in drawn for r in records):
                return True
        # Our own run's records arrive with its events; only a change nothing here explained
        # (another kernel's message, run or settlement) needs the redraw.
        return changed and not own and not (lease is not None and lease.here)

    def _stale(self, unsettled: set[str]) -> bool:
        """Whether the chat has shown, for `STALE_AFTER` seconds, a submission as queued or running
        that the store has settled: whatever notification or event it missed, it is redrawn."""
        shown = {b.id for b in list(self.widget.fold.blocks.values()) if b.kind == "submission" and not b.settled}
        if not shown - unsettled:
            self._stale_since = None
            return False
        now = self._clock()
        if self._stale_since is None:
            self._stale_since = now
            return False
        if now - self._stale_since < STALE_AFTER:
            return False
        self._stale_since = None
        return True
