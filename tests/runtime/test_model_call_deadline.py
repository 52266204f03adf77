"""A hanging provider is bounded overall (issue 20.7): one model call, retries and backoff
included, gets `RunSettings.model_call_timeout` seconds (600 by default); past it the submission
fails with a final `timeout` error that says so, instead of trying again attempt after attempt."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from agents import Sleeps, make_agent

import flue_nb as flue
from flue_nb.models import FunctionModel, ScriptedModel, fail, reply, tool_call
from flue_nb.runtime.core.conversation import SETTLE_GRACE
from flue_nb.runtime.core.loop import RunSettings
from flue_nb.runtime.errors import ProviderError


def test_a_provider_that_never_answers_fails_the_submission_at_the_overall_deadline() -> None:
    calls: list[int] = []

    async def hang(request):
        calls.append(1)
        await asyncio.sleep(3600)  # a provider that accepted the request and went silent
        return reply("never")

    agent = make_agent(FunctionModel(hang))
    s = flue.init(agent, db=":memory:", settings=RunSettings(sleep=Sleeps(), model_call_timeout=0.5))
    with pytest.raises(ProviderError) as caught:
        s.prompt("hello?")
    err = caught.value
    assert err.kind == "timeout" and not err.transient
    assert "no complete response within 0.5 s" in err.message and "model_call_timeout" in err.message
    assert len(calls) == 1  # not retried by the next attempt, nor the one after
    [sub] = s.submissions()
    assert sub.outcome.value == "failed" and sub.error["type"] == "provider_error"


def test_transient_errors_still_retry_within_the_deadline() -> None:
    answers = iter([fail("overloaded"), fail("overloaded"), reply("here")])
    sleeps = Sleeps()
    agent = make_agent(FunctionModel(lambda request: next(answers)))
    s = flue.init(agent, db=":memory:", settings=RunSettings(sleep=sleeps, model_call_timeout=60.0))
    assert s.prompt("hello?") == "here"
    assert len(sleeps.delays) == 2


class FakeTime:
    """A clock that the injected sleep moves forward: backoff 'takes' the time it asks for."""

    def __init__(self) -> None:
        self.start = time.time()
        self.delays: list[float] = []

    def clock(self) -> float:
        return self.start + sum(self.delays)

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)


def test_the_model_call_bound_covers_every_attempt_not_each() -> None:
    # A provider silent before its headers: each try ends with the provider's own timeout
    # (here 0.1 s), four tries fit in the call's bound (0.5 s), and the submission's next
    # attempt used to start a fresh bound (12 tries; 680 s with the default 600).
    calls: list[int] = []

    async def silent(request):
        calls.append(1)
        await asyncio.sleep(0.1)
        return fail("timeout", "did not start answering within 0.1 s")

    agent = make_agent(FunctionModel(silent), max_attempts=3)
    s = flue.init(agent, db=":memory:", settings=RunSettings(sleep=Sleeps(), model_call_timeout=0.5))
    with pytest.raises(ProviderError) as caught:
        s.prompt("hello?")
    assert caught.value.kind == "timeout" and not caught.value.transient
    assert "0.5 s" in caught.value.message and "model_call_timeout" in caught.value.message
    assert len(calls) <= 5  # 0.5 s of 0.1 s tries, whichever attempt makes them


def test_backoff_never_sleeps_past_the_submissions_timeout() -> None:
    # Every try fails at once with a retryable error; the retries' and the attempts' backoff
    # used to ignore the time left (timeout=150 settled at 208 s).
    fake = FakeTime()
    agent = make_agent(FunctionModel(lambda request: fail("overloaded")), max_attempts=20, timeout=150)
    s = flue.init(agent, db=":memory:", settings=RunSettings(sleep=fake.sleep, clock=fake.clock))
    with pytest.raises(flue.SubmissionTimeoutError):
        s.prompt("hello?")
    assert sum(fake.delays) == pytest.approx(150) or sum(fake.delays) < 150


def test_the_default_bounds_are_what_the_readme_says() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    assert RunSettings().model_call_timeout == 600.0
    assert "A model call gets 600 s in all" in readme
    assert flue.agent()(lambda: "x").timeout == 3600.0 and "3600 s" in readme
    assert f"plus {SETTLE_GRACE:g} s" in readme


def test_a_tool_that_ignores_cancellation_does_not_hold_the_submission_past_its_grace() -> None:
    release = asyncio.Event()

    @flue.tool
    async def stubborn() -> str:
        """Wait, and keep waiting when cancelled."""
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await release.wait()  # swallows the cancellation
        return "late"

    model = ScriptedModel([reply("", tool_call("stubborn")), reply("done")])
    agent = make_agent(model, tools=(stubborn,), timeout=0.5)
    s = flue.init(agent, db=":memory:", settings=RunSettings(sleep=Sleeps(), settle_grace=0.2))
    try:
        # Settles at 0.5 s + 0.2 s; before, it waited for the tool (here: the 30 s wait ran out).
        with pytest.raises(flue.SubmissionTimeoutError):
            s.prompt("go", timeout=30)
    finally:
        s._co.call(release.set)
