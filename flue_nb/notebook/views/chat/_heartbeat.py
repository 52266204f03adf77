"""The kernel's heartbeat to its chat views, so a view can tell that its kernel is gone (issue 19.6).

While a cell runs the shell channel is busy, so the browser cannot ask the kernel whether it is
alive. Instead one daemon thread sends every open chat widget a small custom comm message
(`{"type": "beat"}`) every `EVERY` seconds; it goes out on iopub whatever the main thread does.
The browser (`chat.js`) says the kernel is gone when the beats stop (or at once when the
frontend reports a restart), and hands back what the user typed instead of swallowing it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flue_nb.notebook.views.chat.wire import BeatMsg

__all__ = ["EVERY", "Heartbeat", "start"]

_BEAT: BeatMsg = {"type": "beat"}

EVERY = 3.0
"""Seconds between two beats; `chat.js` waits several of them before calling the kernel silent."""

_lock = threading.Lock()
_running: Heartbeat | None = None


class Heartbeat:
    """A daemon thread sending each widget that `widgets()` names a beat every `every` seconds."""

    def __init__(self, widgets: Callable[[], Iterable[Any]], every: float = EVERY) -> None:
        self.widgets = widgets
        self.every = every
        self.sent = 0
        """How many beats went out (for the tests and the benchmark)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flue-chat-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.beat()

    def beat(self) -> None:
        """Send one beat to every open widget now."""
        for widget in list(self.widgets()):
            if getattr(widget, "comm", None) is None:
                continue  # closed: nobody draws it
            try:
                widget.send(_BEAT)
                self.sent += 1
            except Exception:  # noqa: BLE001 - one closing comm must not end the others' beats
                continue

    def stop(self) -> None:
        """End the thread (tests; a kernel's thread ends with the kernel)."""
        self._stop.set()
        self._thread.join(timeout=self.every + 1)


def start(widgets: Callable[[], Iterable[Any]]) -> Heartbeat:
    """The kernel's one heartbeat thread, started on first use."""
    global _running
    with _lock:
        if _running is None:
            _running = Heartbeat(widgets)
        return _running
