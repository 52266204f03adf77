"""A hanging provider is bounded overall (issue 20.7): one model call, retries and backoff
included, gets `RunSettings.model_call_timeout` seconds (600 by default); past it the submission
fails with a final `timeout` error that says so, instead of trying again attempt after attempt."""

from __future__ import annotations

import asyncio

import pytest
from agents import Sleeps, make_agent

import flue_nb as flue
from flue_nb.models import FunctionModel, fail, reply
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
