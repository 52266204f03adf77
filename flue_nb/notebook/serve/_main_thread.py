"""Run an outside call's code on the kernel's main thread between cells, like a cell would.

The kernel's main thread runs an asyncio loop that also handles the shell channel: a callback
posted to it runs only once no cell is executing, and no cell starts while it runs, so an outside
call never interleaves with the user's code mid-statement. A call that cannot start within
`busy_timeout` seconds (a long cell) gives up without running and says the kernel is busy.

While its code runs the call *holds* the main thread (`holding()`; listeners, a chat on its
conversation, are told when it takes and releases it). Our SIGINT handler is installed for
exactly that time and raises `KeyboardInterrupt` only while the call runs: the kernel's
interrupt stops the call as it stops a cell, and `stop(call_id)` (any thread: the control
channel a chat's Stop uses, or the run being aborted) sends SIGINT to the main thread, which
breaks even a blocking C call (`time.sleep`). A stop that arrives after the call ended (a user's
cell may be running by then) names a call that no longer holds the thread and interrupts nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import signal
import threading
from collections.abc import Callable
from typing import Any

from flue_nb.runtime.coordinator import raise_in_thread
from flue_nb.runtime.errors import SubmissionAbortedError, ToolRetry

__all__ = ["CALL", "Held", "MainThread", "holding", "listen", "stop"]

CALL: contextvars.ContextVar[tuple[str, str | None] | None] = contextvars.ContextVar("flue_serve_call", default=None)
"""(tool call id, conversation id) of the outside call being run; set around each served tool."""

INTERRUPTED = "interrupted: the kernel was interrupted while this call ran"


class Held:
    """The outside call holding the kernel's main thread (or about to)."""

    __slots__ = ("call_id", "conversation_id", "ended", "running", "stopped", "thread_id")

    def __init__(self, call_id: str, conversation_id: str | None) -> None:
        self.call_id = call_id
        self.conversation_id = conversation_id
        self.running = False
        """True while its code runs: the only time our SIGINT handler raises."""
        self.ended = False
        self.stopped: str | None = None
        """Why it was stopped, if it was (before it started, it then does not run)."""
        self.thread_id: int | None = None


_lock = threading.Lock()
_held: Held | None = None
_listeners: list[Callable[[Held], None]] = []


def holding() -> Held | None:
    """The outside call whose code runs on the main thread now, if any."""
    held = _held
    return held if held is not None and held.running else None


def listen(fn: Callable[[Held], None]) -> None:
    """Call `fn(held)` on the main thread when a call takes it (`held.running`) and releases it."""
    if fn not in _listeners:
        _listeners.append(fn)


def stop(call_id: str, reason: str) -> bool:
    """Interrupt the call `call_id` if its code holds the main thread now; True if it did."""
    held = _held
    if held is None or held.call_id != call_id:
        return False
    return _interrupt(held, reason, only_running=True)


def _interrupt(held: Held, reason: str, *, only_running: bool) -> bool:
    with _lock:
        # Checked and sent under the lock the call's release takes: it cannot end in between.
        if held.ended or held.stopped is not None or (only_running and not held.running):
            return False
        held.stopped = reason
        if held.running and held.thread_id is not None:
            if held.thread_id == threading.main_thread().ident:
                signal.pthread_kill(held.thread_id, signal.SIGINT)  # breaks a blocking C call too
            else:
                raise_in_thread(held.thread_id, KeyboardInterrupt)
        return True


def _on_sigint(_signum: int, _frame: Any) -> None:
    held = _held
    if held is not None and held.running:
        raise KeyboardInterrupt
    # Otherwise the call has just ended: a late interrupt meant for it stops nothing.


class MainThread:
    """A `Runner` (see `kernel.python_tool`) that hops onto the kernel loop's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, busy_timeout: float) -> None:
        self.loop = loop
        self.busy_timeout = busy_timeout

    async def __call__(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the kernel's thread once it is free; its result, or what it raised."""
        call_id, conversation_id = CALL.get() or (f"call-{id(fn):x}", None)
        held = Held(call_id, conversation_id)
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        lock = threading.Lock()
        gave_up = False

        def run() -> None:
            with lock:
                if gave_up:
                    return
                started.set_result(None)
            _hold(held, fn, done)

        self.loop.call_soon_threadsafe(run)
        # `asyncio.wait`, not `wait_for`: on Python 3.11 `wait_for` returns the result when the
        # awaited future is done by the time a cancellation lands, so an abort arriving just as
        # the code started was lost and the code ran to its end under an `aborted` record.
        try:
            await asyncio.wait({asyncio.wrap_future(started)}, timeout=self.busy_timeout)
        except asyncio.CancelledError:
            with lock:
                gave_up = not started.done()
            if not gave_up:
                _interrupt(held, "aborted while this call ran", only_running=False)
            raise
        with lock:
            gave_up = not started.done()
        if gave_up:
            raise ToolRetry(
                f"The kernel is busy: a cell (or another call) has been running for over "
                f"{self.busy_timeout:g} s, so this call did not run. Try again when the notebook is idle."
            )
        try:
            return await asyncio.shield(asyncio.wrap_future(done))
        except asyncio.CancelledError:
            # Stop / abort: KeyboardInterrupt in the main thread, as the stop button gives a cell.
            _interrupt(held, "aborted while this call ran", only_running=False)
            raise


def _hold(held: Held, fn: Callable[[], Any], done: concurrent.futures.Future[Any]) -> None:
    """Run `fn` holding the main thread: ours is SIGINT while it runs, and only then."""
    global _held
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, _on_sigint) if main else None
    ok, value = False, None
    try:
        try:
            with _lock:
                if held.stopped is not None:
                    raise KeyboardInterrupt  # aborted before it started: it does not run
                _held, held.thread_id, held.running = held, threading.get_ident(), True
            _tell(held)
            value, ok = fn(), True
        finally:
            _release(held)
    except KeyboardInterrupt:
        value = SubmissionAbortedError(held.stopped or INTERRUPTED)
    except BaseException as exc:  # noqa: BLE001 - handed back to the awaiting tool
        value = exc
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)  # runs a pending SIGINT first: ours, now inert
        _tell(held)
    if ok:
        done.set_result(value)
    else:
        done.set_exception(value)


def _release(held: Held) -> None:
    global _held
    while True:
        try:
            held.running = False  # from here on our handler raises nothing
            break
        except KeyboardInterrupt:
            continue  # it landed before the store: the call is being stopped anyway
    with _lock:  # a `stop` deciding right now finishes first
        held.ended = True
        if held.thread_id is not None and held.thread_id != threading.main_thread().ident:
            raise_in_thread(held.thread_id, None)  # never let an async one land after the call
        if _held is held:
            _held = None


def _tell(held: Held) -> None:
    for fn in list(_listeners):
        try:
            fn(held)
        except Exception:  # noqa: BLE001 - a chat that cannot be told must not fail the call
            continue
