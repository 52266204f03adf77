"""Waiting with a deadline without losing a cancellation.

`asyncio.wait_for` on Python 3.10 and 3.11 returns the awaited result when it is done by the
time a cancellation lands, so an abort arriving just then was lost and the run went on (a model
call that had just answered, a command that had just exited). `within` always re-raises it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["within"]

T = TypeVar("T")
log = logging.getLogger("flue_nb")


async def within(work: Awaitable[T], seconds: float | None, *, grace: float | None = None) -> T:
    """`work`'s result, or `asyncio.TimeoutError` after `seconds` (None: no limit).

    On a timeout or a cancellation `work` is cancelled and waited for: however long it takes
    (as `wait_for` does) when `grace` is None, else at most `grace` seconds, after which it is
    left behind (a tool that catches its cancellation cannot hold its caller past a deadline).
    A cancellation of the caller is always re-raised, even when `work` finished meanwhile.
    """
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        await _stopped(task, grace)
        raise
    if task in done:
        return task.result()
    task.cancel()
    await _stopped(task, grace)
    raise asyncio.TimeoutError


async def _stopped(task: asyncio.Future[T], grace: float | None) -> None:
    if grace is None:
        # Shielded from a second cancellation of the caller, as `wait_for` waits for its task.
        await asyncio.wait({task})
        return
    await asyncio.wait({task}, timeout=grace)
    if not task.done():
        log.warning("flue_nb: work still ran %g s after it was cancelled; going on without it", grace)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
