"""The runtime's own event loop on a background thread (the kernel's loop is already running).

Callers block on a future with `wait`, which also runs work that must happen on the waiting
thread (the kernel's main thread, for the `python` tool) while it waits. Nothing here calls
`asyncio.run` on a loop someone else owns.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

__all__ = ["Coordinator", "coordinator"]

T = TypeVar("T")


class Coordinator:
    """An event loop running forever on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None] = queue.SimpleQueue()
        self._waiters = 0
        self._waiters_lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="flue-coordinator", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

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

                        result.set_exception(
                            SubmissionAbortedError("interrupted by the user while a tool ran")
                        )
                        raise
                    except BaseException as exc:  # noqa: BLE001 - handed back to the awaiting tool
                        result.set_exception(exc)
            return fut.result()

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
        """Run `fn` on a thread blocked in `wait` (the kernel's main thread), else right here."""
        result: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._waiters_lock:  # queued under the lock: a waiter leaving drains it or we see 0
            waiting = self._waiters > 0
            if waiting:
                self._calls.put((fn, result))
        if not waiting:
            return fn()
        return await asyncio.wrap_future(result)


_lock = threading.Lock()
_instance: Coordinator | None = None


def coordinator() -> Coordinator:
    """The process-wide coordinator, started on first use."""
    global _instance
    with _lock:
        if _instance is None or not _instance.thread.is_alive():
            _instance = Coordinator()
        return _instance
