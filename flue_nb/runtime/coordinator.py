"""The runtime's own event loop on a background thread (the kernel's loop is already running).

Callers block on a future with `wait`, which also runs work that must happen on the waiting
thread (the kernel's main thread, for the `python` tool) while it waits. With nobody waiting (a
background cell, `dispatch()`), that work runs on a thread of its own, never on the runtime's:
user code can neither stall the loop (heartbeats, abort) nor kill it. Nothing here calls
`asyncio.run` on a loop someone else owns.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import logging
import queue
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

__all__ = ["Coordinator", "coordinator", "raise_in_thread"]

T = TypeVar("T")

log = logging.getLogger("flue_nb")


def raise_in_thread(thread_id: int, exc: type[BaseException] | None) -> None:
    """Raise `exc` in another thread at its next bytecode (None takes back a pending one)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None)


class _Call:
    """One call of user code (the `python` tool's cell): where it runs, so an abort can stop it.

    `interrupt()` raises `KeyboardInterrupt` in the thread running it, as the kernel's stop button
    does for a cell, and only while the call runs (a lock orders the two). Code blocked in a C call
    (`time.sleep`, a socket read) sees it when it returns to Python. An interrupted call raises
    `SubmissionAbortedError`.
    """

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self._lock = threading.Lock()
        self._thread_id: int | None = None
        self._running = False
        self.interrupted = False

    def __call__(self) -> Any:
        try:
            return self._run()
        except KeyboardInterrupt:
            if not self.interrupted:
                raise
            from flue_nb.runtime.errors import SubmissionAbortedError

            raise SubmissionAbortedError("interrupted: the submission was aborted while this code ran") from None

    def _run(self) -> Any:
        with self._lock:
            self._thread_id, self._running = threading.get_ident(), True
        try:
            return self.fn()
        finally:
            with self._lock:
                self._running = False
                if self.interrupted and self._thread_id is not None:
                    raise_in_thread(self._thread_id, None)  # never let it land after the call

    def interrupt(self) -> bool:
        """Interrupt the call if it is running; True if it was."""
        with self._lock:
            if not self._running or self.interrupted or self._thread_id is None:
                return False
            self.interrupted = True
            raise_in_thread(self._thread_id, KeyboardInterrupt)
            return True


class Coordinator:
    """An event loop running forever on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._waiters = 0
        self._waiters_lock = threading.Lock()
        self._user_calls: queue.SimpleQueue[tuple[_Call, concurrent.futures.Future[Any]]] = queue.SimpleQueue()
        self._user_thread: threading.Thread | None = None
        self.thread = threading.Thread(target=self._run, name="flue-coordinator", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        while True:
            try:
                self.loop.run_forever()
                return  # stopped on purpose
            except BaseException as exc:  # noqa: BLE001 - the runtime thread must outlive any code
                # A task let `KeyboardInterrupt`/`SystemExit` out (asyncio re-raises those out of
                # `run_forever`); the task itself holds the exception, so whoever awaits it still
                # settles. Keep serving every other conversation.
                log.error("flue_nb: %s escaped the runtime loop; it keeps running", type(exc).__name__, exc_info=exc)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule a coroutine on the runtime loop."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, fn: Callable[..., T], *args: Any) -> None:
        """Run a plain function on the runtime loop soon (fire and forget)."""
        self.loop.call_soon_threadsafe(fn, *args)

    def wait(self, fut: concurrent.futures.Future[T], timeout: float | None = None) -> T:
        """Block until `fut` is done, running posted calls on this thread meanwhile."""
        if threading.current_thread() is self.thread:
            raise RuntimeError("Coordinator.wait() called on the coordinator thread: it would deadlock")
        with self.waiting():
            deadline = None if timeout is None else self.loop.time() + timeout
            # Wake at once when the result arrives instead of at the next poll; a wake-up eaten
            # by another waiting thread only costs this one a poll interval.
            fut.add_done_callback(lambda _: self._calls.put(None))
            while not fut.done():
                if deadline is not None and self.loop.time() >= deadline:
                    raise TimeoutError(f"no result within {timeout} s")
                try:
                    item = self._calls.get(timeout=0.02)
                except queue.Empty:
                    continue
                if item is None:
                    continue
                fn, result = item
                if result.set_running_or_notify_cancel():
                    try:
                        result.set_result(fn())
                    except KeyboardInterrupt:
                        # Ctrl-C hit the posted call (user code run for the `python` tool): the
                        # interrupt is the waiter's. Handed to the runtime loop as is, it would
                        # escape `run_forever` and kill the coordinator thread.
                        # The run must stop, not carry on with an error result: the tool gets
                        # an abort, which the runtime settles as `aborted` (contract 11.5).
                        from flue_nb.runtime.errors import SubmissionAbortedError

                        result.set_exception(SubmissionAbortedError("interrupted by the user while a tool ran"))
                        raise
                    except BaseException as exc:  # noqa: BLE001 - handed back to the awaiting tool
                        result.set_exception(exc)
            return fut.result()

    @property
    def has_waiter(self) -> bool:
        """True while a thread (a blocking `%%flue` cell) is waiting for a run."""
        return self._waiters > 0

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Count this thread as a waiter from now on: calls posted meanwhile queue for its `wait`.

        Enter it before dispatching work you will `wait` for, so a tool that runs before the
        `wait` starts (a fast model) still gets this thread, not the coordinator's.
        """
        with self._waiters_lock:
            self._waiters += 1
        try:
            yield
        finally:
            with self._waiters_lock:
                self._waiters -= 1
                last = self._waiters == 0
            while last:  # nobody is left to run queued calls: fail them rather than strand them
                try:
                    item = self._calls.get_nowait()
                except queue.Empty:
                    break
                if item is not None and item[1].set_running_or_notify_cancel():
                    item[1].set_exception(RuntimeError("no thread is waiting to run this call"))

    async def run_on_waiter(self, fn: Callable[[], T]) -> T:
        """Run `fn` on a thread blocked in `wait` (the kernel's main thread), else on the
        user-code thread; cancelling the caller (an abort) interrupts `fn` where it runs."""
        call = _Call(fn)
        result: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._waiters_lock:  # queued under the lock: a waiter leaving drains it or we see 0
            waiting = self._waiters > 0
            if waiting:
                self._calls.put((call, result))
        if not waiting:
            self._user_queue().put((call, result))
        try:
            return await asyncio.wrap_future(result)
        except asyncio.CancelledError:
            call.interrupt()
            raise

    def _user_queue(self) -> queue.SimpleQueue[tuple[_Call, concurrent.futures.Future[Any]]]:
        with self._waiters_lock:
            if self._user_thread is None:
                self._user_thread = threading.Thread(target=self._run_user_calls, name="flue-user-code", daemon=True)
                self._user_thread.start()
        return self._user_calls

    def _run_user_calls(self) -> None:
        """One thread for user code with nobody waiting: the same thread each time, as a cell's
        objects (an sqlite connection, a GUI handle) may be bound to the thread that made them."""
        while True:
            call, result = self._user_calls.get()
            if not result.set_running_or_notify_cancel():
                continue
            try:
                result.set_result(call())
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting tool; never ends this thread
                result.set_exception(exc)


_lock = threading.Lock()
_instance: Coordinator | None = None


def coordinator() -> Coordinator:
    """The process-wide coordinator, started on first use."""
    global _instance
    with _lock:
        if _instance is None or not _instance.thread.is_alive():
            _instance = Coordinator()
        return _instance
