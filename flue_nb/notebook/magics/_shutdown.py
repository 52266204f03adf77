"""The kernel's own controls, meaning the same for a chat as for a cell (issue 19.1, 19.6).

- Shut down / restart from the frontend is the person's decision, like the stop button: the
  runs this kernel owns are aborted durably (chat or cell alike; only a crash is recovered on
  reopen), and each chat leaves its static copy behind instead of a widget that the next kernel
  cannot draw.
- The interrupt (■) while no cell runs: ipykernel ignores SIGINT between requests, so a chat's
  run (which holds no cell) would go on; here it aborts the runs this kernel owns. During a cell
  the usual KeyboardInterrupt is left alone (the cell's wait aborts its own run).
"""

from __future__ import annotations

import inspect
import signal
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flue_nb.runtime.session import Session

__all__ = ["on_frontend_shutdown", "on_idle_interrupt"]

_installed: set[int] = set()


def on_frontend_shutdown(kernel: Any, sessions: Callable[[], Iterable[Session]]) -> None:
    """Wrap `kernel.do_shutdown` (the shutdown_request handler) once; `sessions()` names the
    sessions whose runs this kernel may own."""
    if kernel is None or id(kernel) in _installed or not hasattr(kernel, "do_shutdown"):
        return
    _installed.add(id(kernel))
    original = kernel.do_shutdown

    def do_shutdown(restart: bool) -> Any:
        _abort_owned(sessions())
        try:
            from flue_nb.notebook.views.chat.saved_copy import retire_all
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


def on_idle_interrupt(kernel: Any, sessions: Callable[[], Iterable[Session]]) -> None:
    """Between requests, let SIGINT abort this kernel's runs instead of being ignored."""
    if kernel is None or ("sigint", id(kernel)) in _hooked or not hasattr(kernel, "post_handler_hook"):
        return
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set on the main thread
    _hooked.add(("sigint", id(kernel)))

    def idle_interrupt(_signum: int, _frame: object) -> None:
        _abort_owned(sessions())

    original = kernel.post_handler_hook

    def post_handler_hook() -> None:
        original()  # puts back what ipykernel keeps between requests (SIG_IGN)
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            signal.signal(signal.SIGINT, idle_interrupt)

    kernel.post_handler_hook = post_handler_hook
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # loaded at kernel start, not in a cell
        signal.signal(signal.SIGINT, idle_interrupt)


_hooked: set[tuple[str, int]] = set()


def _abort_owned(sessions: Iterable[Session]) -> None:
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
