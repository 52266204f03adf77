"""The live notebook document: the kernel finds its Jupyter server and edits the open notebook.

`connect()` is the one entry point: from inside a kernel started by a Jupyter server that has
real-time collaboration (`jupyter-collaboration`), it returns a `LiveDocument` whose edits show at
once in every open view; anywhere else (no server, no collaboration, VS Code, headless, the
`flue_nb[live]` extra not installed) it returns None, within `timeout` seconds, and `reason()` says
why. Nothing of the extra is imported until `connect()` is called.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from flue_nb.notebook.document.servers import Found, Unavailable, find

if TYPE_CHECKING:
    from flue_nb.notebook.document.live_document import LiveDocument

__all__ = ["connect", "reason"]

log = logging.getLogger(__name__)

_lock = threading.Lock()
_open: dict[Found, LiveDocument] = {}
_reason: str | None = None


def reason() -> str | None:
    """Why the last `connect()` returned None (None when it returned a document)."""
    return _reason


def _fail(why: str) -> None:
    global _reason
    _reason = why
    log.debug("flue_nb: no live notebook document: %s", why)


def connect(*, timeout: float = 5.0) -> LiveDocument | None:
    """The live document of the notebook this kernel runs, or None when there is none (see `reason()`).

    Never raises for "not available" and returns within `timeout` seconds. A document already open
    for the same server and notebook is returned again rather than joined twice.
    """
    global _reason
    deadline = time.monotonic() + timeout
    try:
        found = find(timeout=timeout)
    except Unavailable as exc:
        _fail(str(exc))
        return None
    try:  # only now: a kernel with no server to talk to never loads the extra
        from flue_nb.notebook.document._room import RoomLost
        from flue_nb.notebook.document.live_document import LiveDocument
    except ImportError as exc:
        _fail(
            f"{found.server.url} runs this kernel's notebook {found.path!r}, but the `flue_nb[live]` extra "
            f"is not installed ({exc}); `pip install 'flue_nb[live]'` adds live edits"
        )
        return None
    with _lock:
        doc = _open.get(found)
        if doc is not None and not doc.closed:
            _reason = None
            return doc
        try:
            doc = LiveDocument.open(found, timeout=max(deadline - time.monotonic(), 0.1))
        except (Unavailable, RoomLost) as exc:
            _fail(f"{found.server.url} runs this kernel's notebook {found.path!r}, but {exc}")
            return None
        _open[found] = doc
        _reason = None
        return doc
