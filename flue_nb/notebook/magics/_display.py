"""Live cell output: a display handle updated in place from the runtime thread, throttled.

Events arrive on the runtime's thread, one per streamed delta. Re-rendering and sending the whole
transcript for each would flood the front end, so updates go out at most every `interval`
seconds (a timer on the runtime loop sends the last pending one), plus one final update.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable
from typing import Any

from flue_nb.notebook.views.transcript import CellView
from flue_nb.runtime.events import Event

__all__ = ["BLANK", "LiveOutput", "handle_publisher"]

INTERVAL = 0.1
"""Seconds between two updates of a cell's output (at most ~10 per second)."""


class _Blank:
    """An empty output: what a blocking cell's live display starts and ends as (see magics)."""

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": ""}

    def __repr__(self) -> str:
        return ""


BLANK = _Blank()


class LiveOutput:
    """Feeds a conversation's events to a `CellView` and keeps its display up to date."""

    def __init__(
        self,
        view: CellView,
        publish: Callable[[Any], Any],
        *,
        interval: float = INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.view = view
        self._publish_fn = publish
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        # Held while sending, so an update racing the final one can never land after it.
        self._send_lock = threading.Lock()
        # Held while folding events in, so the replay in `bind` keeps them in order.
        self._order = threading.RLock()
        self._last = float("-inf")
        self._dirty = False
        self._timer: asyncio.TimerHandle | None = None
        self._pending: list[Event] | None = []
        """Events seen before the submission id was known (None once bound)."""
        self._closed = False
        self.updates = 0
        """How many updates were sent (the throttle's count, for tests and benchmarks)."""
        self.on_settled: Callable[[], None] | None = None
        """Called on the runtime thread at settlement (a blocking cell finishes itself)."""

    def bind(self, submission_id: str) -> None:
        """Say which submission this cell shows, and fold in what arrived meanwhile."""
        with self._order:  # events arriving meanwhile wait, so they fold in after these
            with self._lock:
                self.view.submission_id = submission_id
                pending, self._pending = self._pending or [], None
            for ev in pending:
                self._fold(ev)

    def feed(self, event: Event) -> None:
        """Observer callback (runtime thread): fold the event in, maybe send an update."""
        with self._order:
            with self._lock:
                if self._closed:
                    return
                if self._pending is not None:
                    self._pending.append(event)
                    return
            self._fold(event)

    def _fold(self, event: Event) -> None:
        changed = self.view.apply(event)
        settled = event.type == "submission_settled" and event.submission_id == self.view.submission_id
        if settled and self.on_settled is not None:
            self.on_settled()  # a background cell: nobody waits, so the final update is sent here
        elif changed:
            self._changed()

    def _changed(self) -> None:
        with self._lock:
            self._dirty = True
            wait = self._last + self.interval - self._clock()
            if wait > 0:
                if self._timer is None:
                    self._timer = self._schedule(wait)
                return
        self.flush()

    def _schedule(self, delay: float) -> asyncio.TimerHandle | None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None  # not on the runtime loop: the next event or the final update sends it
        return loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
        self.flush()

    def flush(self) -> None:
        """Send the current view if it changed since the last update."""
        with self._send_lock:
            with self._lock:
                if not self._dirty or self._closed:
                    return
                self._dirty = False
                self._last = self._clock()
                self.updates += 1
            self._publish_fn(self.view)

    def finish(self, final: Any = None) -> None:
        """Send the final update (`final`, else the view) and stop; no update can follow it."""
        with self._send_lock:
            with self._lock:
                if self._closed:
                    return
                self._closed = True
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                self.updates += 1
            self._publish_fn(self.view if final is None else final)


def handle_publisher(handle: Any) -> Callable[[Any], None]:
    """Update an IPython display handle from any thread.

    An empty context makes ipykernel fall back to the parent header of the cell running now
    rather than the one that happened to start the runtime's worker, so front ends (and
    nbclient, which drops output addressed to cells that already finished) accept the update.
    """

    def publish(obj: Any) -> None:
        contextvars.Context().run(handle.update, obj)

    return publish
