"""`within`: a deadline that never loses a cancellation (Python 3.10/3.11's `wait_for` did when the
awaited work finished as the cancellation landed: an abort of a model call that had just answered
was lost and the run went on)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from flue_nb.runtime.waits import within


async def _cancel_caller_then_finish(caller: asyncio.Task[object]) -> str:
    caller.cancel()  # lands while the work is finishing: both are done in the same loop step
    return "answered"


def test_a_cancellation_that_lands_as_the_work_finishes_is_raised() -> None:
    async def caller(wait) -> object:
        me = asyncio.current_task()
        assert me is not None
        return await wait(_cancel_caller_then_finish(me), 5)

    async def main(wait) -> str:
        task = asyncio.ensure_future(caller(wait))
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        return "returned"

    assert asyncio.run(main(within)) == "cancelled"
    if sys.version_info < (3, 12):  # the race this guards against, shown on the Pythons that have it
        assert asyncio.run(main(asyncio.wait_for)) == "returned"


def test_the_result_the_timeout_and_an_exception_pass_through() -> None:
    async def value() -> int:
        return 7

    async def boom() -> None:
        raise ValueError("boom")

    async def main() -> None:
        assert await within(value(), 1) == 7
        assert await within(value(), None) == 7
        with pytest.raises(asyncio.TimeoutError):
            await within(asyncio.sleep(30), 0.05)
        with pytest.raises(ValueError, match="boom"):
            await within(boom(), 1)

    asyncio.run(main())


def test_with_a_grace_work_that_ignores_its_cancellation_is_left_behind() -> None:
    stopped: list[str] = []

    async def stubborn() -> None:
        # Catches its first cancellation and goes on (a tool that swallows it); the second, from
        # asyncio.run's shutdown, ends it.
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.append("swallowed")
        await asyncio.sleep(30)

    async def main() -> bool:
        with pytest.raises(asyncio.TimeoutError):
            await within(stubborn(), 0.05, grace=0.1)
        # Returned although the work has not stopped: cancelled once, then left behind.
        return any(not t.done() for t in asyncio.all_tasks() if t is not asyncio.current_task())

    assert asyncio.run(main()) is True
    assert stopped == ["swallowed"]
