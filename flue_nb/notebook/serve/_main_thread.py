"""Run an outside call's code on the kernel's main thread between cells, like a cell would.

The kernel's main thread runs an asyncio loop that also handles the shell channel: a callback
posted to it runs only once no cell is executing, and no cell starts while it runs, so an outside
call never interleaves with the user's code mid-statement. A call that cannot start within
`busy_timeout` seconds (a long cell) gives up without running and says the kernel is busy. While
it runs, SIGINT raises `KeyboardInterrupt` as it does in a cell (ipykernel ignores SIGINT between
messages), so interrupting the kernel interrupts the call; a Stop (the run cancelled) does too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import threading
from collections.abc import Callable
from typing import Any

from flue_nb.runtime.coordinator import _Call
from flue_nb.runtime.errors import SubmissionAbortedError, ToolRetry

__all__ = ["MainThread"]


class MainThread:
    """A `Runner` (see `kernel.python_tool`) that hops onto the kernel loop's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, busy_timeout: float) -> None:
        self.loop = loop
        self.busy_timeout = busy_timeout

    async def __call__(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the kernel's thread once it is free; its result, or what it raised."""
        call = _Call(fn)
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        lock = threading.Lock()
        gave_up = False

        def run() -> None:
            with lock:
                if gave_up:
                    return
                started.set_result(None)
            _run_with_sigint(call, done)

        self.loop.call_soon_threadsafe(run)
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(started)), self.busy_timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            with lock:
                gave_up = not started.done()
            if gave_up:
                if isinstance(exc, asyncio.CancelledError):
                    raise
                raise ToolRetry(
                    f"The kernel is busy: a cell (or another call) has been running for over "
                    f"{self.busy_timeout:g} s, so this call did not run. Try again when the notebook is idle."
                ) from None
        try:
            return await asyncio.shield(asyncio.wrap_future(done))
        except asyncio.CancelledError:
            call.interrupt()  # Stop / abort: KeyboardInterrupt in the main thread, as for a cell
            raise


def _run_with_sigint(call: _Call, done: concurrent.futures.Future[Any]) -> None:
    """Run `call`, with Ctrl-C / the kernel's interrupt raising in it as in a cell."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler) if main else None
    try:
        done.set_result(call())
    except KeyboardInterrupt:
        done.set_exception(SubmissionAbortedError("interrupted: the kernel was interrupted while this call ran"))
    except BaseException as exc:  # noqa: BLE001 - handed back to the awaiting tool
        done.set_exception(exc)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
