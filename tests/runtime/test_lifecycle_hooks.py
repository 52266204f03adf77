"""Lifecycle hooks (issue 25.4): use_agent_start/finish, use_response_start/finish, once each."""

from __future__ import annotations

import asyncio
import threading

import pytest
from agents import session, wait_for_event

import flue_nb as flue
from flue_nb.models import ScriptedModel, fail, reply, tool_call
from flue_nb.runtime.messages import AssistantMessage


@flue.tool
def ping() -> str:
    """Ping."""
    return "pong"


def hooked(model, calls, *, raise_in=None, tools=(ping,)):
    async def start():
        await asyncio.sleep(0)
        calls.append("agent_start")
        if raise_in == "agent_start":
            raise RuntimeError("start broke")

    def finish(done):
        calls.append(("agent_finish", done.outcome, done.result, done.error.type if done.error else None))
        if raise_in == "agent_finish":
            raise ValueError("finish broke")

    def response_start():
        calls.append("response_start")

    def response_finish(response):
        calls.append(("response_finish", response.text))
        if raise_in == "response_finish":
            raise KeyError("response broke")
        return {"seen": response.text, "n": len(calls)}

    @flue.agent
    def hooks_agent():
        flue.use_model(model)
        for t in tools:
            flue.use_tool(t)
        flue.use_agent_start(start)
        flue.use_agent_finish(finish)
        flue.use_response_start(response_start)
        flue.use_response_finish(response_finish)

    return hooks_agent


def test_hooks_run_once_per_submission_and_per_response_in_order():
    calls: list = []
    s = session(hooked(ScriptedModel([reply("calling", tool_call("ping")), reply("done"), reply("two")]), calls))
    assert s.prompt("go") == "done"
    assert calls == [
        "agent_start",
        "response_start",
        ("response_finish", "calling"),
        "response_start",
        ("response_finish", "done"),
        ("agent_finish", "completed", "done", None),
    ]
    responses = [m for m in s.history() if isinstance(m, AssistantMessage)]
    assert [m.metadata["seen"] for m in responses] == ["calling", "done"]  # stored with the response
    calls.clear()
    assert s.prompt("again") == "two"  # the next submission has its own start and finish
    assert calls == [
        "agent_start",
        "response_start",
        ("response_finish", "two"),
        ("agent_finish", "completed", "two", None),
    ]


def test_agent_finish_sees_a_failed_outcome():
    calls: list = []
    s = session(hooked(ScriptedModel([fail("bad_request", "nope")]), calls))
    with pytest.raises(flue.FlueError):
        s.prompt("go")
    assert calls[-1][:2] == ("agent_finish", "failed") and calls[-1][3]


@pytest.mark.parametrize("moment", ["agent_start", "response_finish", "agent_finish"])
def test_an_exception_in_a_hook_is_the_agents_own_error(moment):
    calls: list = []
    s = session(hooked(ScriptedModel([reply("done")]), calls, raise_in=moment))
    with pytest.raises(flue.AgentError) as info:
        s.prompt("go")
    assert info.value.type == "agent_error" and f"use_{moment}" in info.value.message
    sub = s.submissions()[0]
    assert sub.outcome.value == "failed" and sub.error["type"] == "agent_error"
    assert sum(1 for c in calls if c == "agent_start") == 1  # not retried: the author's error


def test_a_hook_needs_a_function():
    @flue.agent
    def bad():
        flue.use_model(ScriptedModel(["x"]))
        flue.use_agent_start("not callable")

    with pytest.raises(flue.ConfigError, match="use_agent_start"):
        session(bad).prompt("go")


def test_agent_finish_runs_for_a_submission_aborted_before_it_ran():
    """Once per settled submission (25.4), also one that never reached its agent function."""
    calls: list = []
    release = threading.Event()

    @flue.tool
    def wait() -> str:
        """Wait."""
        release.wait(10)
        return "waited"

    s = session(hooked(ScriptedModel([reply("", tool_call("wait")), reply("late")]), calls, tools=(wait,)))
    started = wait_for_event(s, "tool_start")
    live = s.dispatch("run")
    started()
    queued = s.dispatch("and this")
    assert set(s.abort()) == {live.submission_id, queued.submission_id}
    release.set()
    for r in (live, queued):
        with pytest.raises(flue.SubmissionAbortedError):
            s.read(r, timeout=10)
    finishes = [c for c in calls if isinstance(c, tuple) and c[0] == "agent_finish"]
    assert [c[1] for c in finishes] == ["aborted", "aborted"]
    assert calls.count("agent_start") == 1  # the queued one never started: only its finish ran
    assert all(sub.joined_into is None for sub in s.submissions())
