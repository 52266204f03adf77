"""Runaway loops end (issue 12.9): a submission's model calls are capped by its turn limit."""

from __future__ import annotations

import pytest
from agents import make_agent, session

import flue_nb as flue
from flue_nb.models import FunctionModel, ScriptedModel, reply, tool_call


@flue.tool
def noop() -> str:
    """Do nothing."""
    return "ok"


def _looping() -> FunctionModel:
    return FunctionModel(lambda req: reply("", tool_call("noop")))


def _calls(model: FunctionModel) -> int:
    return len(model.requests)


def test_a_model_that_never_stops_fails_with_turn_limit_exceeded_after_100_calls():
    model = _looping()
    s = session(make_agent(model, tools=(noop,)))
    with pytest.raises(flue.TurnLimitExceededError) as info:
        s.prompt("loop", timeout=60)
    assert _calls(model) == 100 and "max_turns=100" in info.value.message
    sub = s.submissions()[0]
    assert sub.error["type"] == "turn_limit_exceeded" and sub.attempts == 1  # final: not retried


def test_agent_max_turns_sets_the_limit():
    model = _looping()
    s = session(make_agent(model, tools=(noop,), max_turns=3))
    with pytest.raises(flue.TurnLimitExceededError):
        s.prompt("loop", timeout=20)
    assert _calls(model) == 3


def test_a_submission_may_set_its_own_limit_and_it_is_stored_with_it():
    model = _looping()
    s = session(make_agent(model, tools=(noop,)))
    receipt = s.dispatch("loop", max_turns=2)
    with pytest.raises(flue.TurnLimitExceededError):
        s.read(receipt, timeout=20)
    assert _calls(model) == 2
    assert s.store.submission(receipt.submission_id).settings["max_turns"] == 2


def test_a_limit_that_is_not_a_positive_int_is_a_config_error():
    with pytest.raises(flue.ConfigError):
        flue.agent(max_turns=0)
    s = session(make_agent(_looping(), tools=(noop,)))
    with pytest.raises(flue.ConfigError):
        s.dispatch("x", max_turns=-1)


def test_a_new_scripted_model_at_every_render_warns_once_and_the_loop_still_ends():
    @flue.agent(max_turns=5)
    def scripted_inside() -> None:
        flue.use_model(ScriptedModel([reply("", tool_call("noop")), reply("done")]))
        flue.use_tool(noop)

    s = session(scripted_inside)
    with pytest.warns(RuntimeWarning, match="starts over") as caught:
        with pytest.raises(flue.TurnLimitExceededError):
            s.prompt("go", timeout=20)
    assert len([w for w in caught if "starts over" in str(w.message)]) == 1


def test_the_same_scripted_model_at_every_render_does_not_warn():
    model = ScriptedModel([reply("", tool_call("noop")), reply("done")])
    s = session(make_agent(model, tools=(noop,)))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert s.prompt("go", timeout=20) == "done"
