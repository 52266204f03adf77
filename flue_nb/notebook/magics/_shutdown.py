"""What a kernel does when its frontend shuts it down or restarts it (issue 19.1, 19.6).

A restart or shutdown is the person's decision, like the stop button: the runs this kernel
owns are aborted durably (chat or cell alike; only a crash is recovered on reopen), and each
chat leaves its static copy behind instead of a widget that the next kernel cannot draw.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["on_frontend_shutdown"]

_installed: set[int] = set()


def on_frontend_shutdown(kernel: Any, sessions: Callable[[], Iterable[Any]]) -> None:
    """Wrap `kernel.do_shutdown` (the shutdown_request handler) once; `sessions()` names the
    sessions whose runs this kernel may own."""
    if kernel is None or id(kernel) in _installed or not hasattr(kernel, "do_shutdown"):
        return
    _installed.add(id(kernel))
    original = kernel.do_shutdown

    def do_shutdown(restart: bool) -> Any:
        _abort_owned(sessions())
        try:
            from flue_nb.notebook.chat._saved import retire_all
        except ImportError:  # no `widget` extra: no chat to retire
            pass
        else:
            retire_all()
        return original(restart)

    if inspect.iscoroutinefunction(original):

        async def do_shutdown_async(restart: bool) -> Any:
            return await do_shutdown(restart)

        kernel.do_shutdown = do_shutdown_async
    else:
        kernel.do_shutdown = do_shutdown


def _abort_owned(sessions: Iterable[Any]) -> None:
    seen: set[int] = set()
    for session in sessions:
        if id(session) in seen:
            continue
        seen.add(id(session))
        try:
            lease = session.lease()
            if lease is not None and lease.here:
                session.abort()  # durable first (the store), then the live run stops
        except Exception:  # noqa: BLE001 - the kernel is going; one store failing must not stop it
            continue
