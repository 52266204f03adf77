"""`PollWatch`: a `Watch` that wakes every `interval` seconds (SQLite's, and PostgreSQL's fallback).

SQLite cannot tell another process that it committed; a look at the records appended after the
last one seen costs one indexed query, so a view simply looks twice a second.
"""

from __future__ import annotations

import threading

__all__ = ["POLL_INTERVAL", "PollWatch"]

POLL_INTERVAL = 0.5
"""Seconds between two looks at a store that cannot announce its changes."""


class PollWatch:
    """Wakes after `interval` seconds, always saying the conversation may have changed."""

    def __init__(self, interval: float = POLL_INTERVAL) -> None:
        self.interval = interval
        self._closed = threading.Event()

    def wait(self, timeout: float) -> bool:
        """Sleep `interval` s (at most `timeout`); True unless closed meanwhile."""
        return not self._closed.wait(max(0.0, min(self.interval, timeout)))

    def close(self) -> None:
        """Wake a waiting `wait` and end every later one at once."""
        self._closed.set()
