"""Leases fence every write (issue 12.7): a kernel that lost its lease does no more work.

Run on both backends: the fence is the store's, and the runtime obeys it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from agents import make_agent

import flue_nb as flue
from flue_nb.models import ScriptedModel, fail
from flue_nb.runtime.core.loop import RunSettings
from flue_nb.runtime.store import SubmissionState


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "s.sqlite")


def test_a_kernel_that_lost_its_lease_during_a_backoff_starts_no_further_attempt(db: str) -> None:
    holder: dict[str, Any] = {}

    async def sleep(seconds: float) -> None:
        # The 4th sleep is the backoff between attempt 1 and 2 (three in-attempt retries come
        # first): while we "wait", another kernel takes the lease over.
        holder["sleeps"] = holder.get("sleeps", 0) + 1
        if holder["sleeps"] == 4:
            store = holder["session"].store
            owner, _ = store.lease("c")
            store.release_lease("c", owner)
            assert store.acquire_lease("c", "other-kernel", ttl=600)

    model = ScriptedModel([fail("overloaded")] * 4 + ["a duplicate model call"])
    session = flue.init(make_agent(model), conversation="c", db=db, settings=RunSettings(sleep=sleep))
    holder["session"] = session
    events: list[Any] = []
    session.observe(events.append)
    receipt = session.dispatch("hi")
    deadline = time.monotonic() + 30
    while holder.get("sleeps", 0) < 4:
        assert time.monotonic() < deadline, "the run never reached its backoff"
        time.sleep(0.02)
    time.sleep(0.5)  # time for a wrongly started attempt to show itself
    sub = session.store.submission(receipt.submission_id)
    assert len(model.requests) == 4  # no model call after the lease was lost
    assert sub is not None and (sub.state, sub.attempts) == (SubmissionState.RUNNING, 1)
    assert session.store.lease("c")[0] == "other-kernel"
    assert [e.type for e in events].count("submission_running") == 1
