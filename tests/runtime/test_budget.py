"""Budgets in dollars (issue 26.3): a submission stops before the model call that would pass its budget."""

from __future__ import annotations

import pytest
from agents import make_agent, session
from test_recovery import CID, crashed_store

import flue_nb as flue
from flue_nb.models import FunctionModel, ScriptedModel, reply, tool_call
from flue_nb.runtime.agent import define_subagent
from flue_nb.runtime.events import Log
from flue_nb.runtime.messages import AssistantMessage, ToolCall, ToolResultMessage, Usage, UserMessage

SONNET = "claude-sonnet-4-6"  # $3 / $15 per million: a call of 100,000 in and 1,000 out is $0.315
BIG = (100_000, 1_000)


@flue.tool
def noop() -> str:
    """Do nothing."""
    return "ok"


def _looping(model_id: str = SONNET) -> FunctionModel:
    return FunctionModel(lambda req: reply("", tool_call("noop"), usage=BIG), id=model_id)


def test_a_dollar_budget_stops_before_the_call_that_would_pass_it():
    model = _looping()
    s = session(make_agent(model, tools=(noop,), max_cost_usd=1.0))
    with pytest.raises(flue.BudgetExceededError) as info:
        s.prompt("loop", timeout=30)
    # $0.315 a call: after three ($0.945) a fourth like the last would pass $1.00.
    assert len(model.requests) == 3
    assert "budget_exceeded" in info.value.message and "$0.9450 of its $1.00" in info.value.message
    sub = s.submissions()[0]
    assert sub.error["type"] == "budget_exceeded" and sub.attempts == 1  # final: not retried
    assert sub.error["details"]["spent_usd"] == pytest.approx(0.945)


def test_a_submission_may_bring_its_own_budget_and_it_is_stored_with_it():
    model = _looping()
    s = session(make_agent(model, tools=(noop,)))
    receipt = s.dispatch("loop", max_cost_usd=0.5)
    with pytest.raises(flue.BudgetExceededError):
        s.read(receipt, timeout=30)
    assert len(model.requests) == 1  # $0.315 spent, another $0.315 would pass $0.50
    assert s.store.submission(receipt.submission_id).settings["max_cost_usd"] == 0.5


def test_80_percent_spent_is_said_once_in_dollars():
    model = _looping()
    s = session(make_agent(model, tools=(noop,), max_cost_usd=1.0))
    seen: list[Log] = []
    s.observe(lambda e: seen.append(e) if isinstance(e, Log) and e.kind == "budget" else None)
    with pytest.raises(flue.BudgetExceededError):
        s.prompt("loop", timeout=30)
    assert [e.message for e in seen] == ["≈ $0.9450 of its $1.00 budget spent"]


def test_a_model_without_a_price_says_so_and_its_token_budget_applies():
    model = _looping("offline-model")
    s = session(make_agent(model, tools=(noop,), max_cost_usd=1.0, max_input_tokens=250_000))
    seen: list[str] = []
    s.observe(lambda e: seen.append(e.message) if isinstance(e, Log) and e.kind == "budget" else None)
    with pytest.raises(flue.BudgetExceededError) as info:
        s.prompt("loop", timeout=30)
    assert len(model.requests) == 2  # 200,000 prompt tokens sent; 100,000 more would pass 250,000
    assert "max_input_tokens" in info.value.message
    assert any("no known price" in m and "token limits apply" in m for m in seen)


def test_subagents_count_against_their_parents_budget():
    child = ScriptedModel([reply("", tool_call("noop"), usage=BIG)] * 10 + [reply("done")], id=SONNET)
    kid = define_subagent("kid", "Does the work", agent=make_agent(child, tools=(noop,)))
    parent = ScriptedModel(
        [reply("", tool_call("task", prompt="work", agent="kid"), usage=BIG), reply("all done", usage=BIG)], id=SONNET
    )
    s = session(make_agent(parent, extra=lambda: flue.use_subagent(kid), max_cost_usd=1.0))
    with pytest.raises(flue.BudgetExceededError) as info:
        s.prompt("go", timeout=30)
    # The parent's first call ($0.315) and the child's two ($0.63) leave no room for a third: the
    # child stops, and so does the parent before its next call (the spend is theirs together).
    assert len(parent.requests) == 1 and len(child.requests) == 2
    assert "$0.9450 of its $1.00" in info.value.message


def test_a_recovered_submission_keeps_what_its_crashed_attempt_spent(tmp_path):
    path = tmp_path / "s.sqlite"
    spent = AssistantMessage([ToolCall("c1", "noop", {})], Usage(*BIG), "tool_use", SONNET)
    crashed_store(path, messages=[UserMessage("do it"), spent, ToolResultMessage("c1", "noop", "ok")])
    model = _looping()
    s = session(make_agent(model, tools=(noop,), max_cost_usd=0.7), db=str(path), conversation=CID)
    with pytest.raises(flue.BudgetExceededError):
        s.read("sub_crashed", timeout=30)
    # $0.315 was spent before the crash: one more call ($0.63) and the next would pass $0.70.
    # Starting from zero it would have made two.
    assert len(model.requests) == 1


def test_a_budget_that_is_not_positive_is_a_config_error():
    with pytest.raises(flue.ConfigError):
        flue.agent(max_cost_usd=0)
    with pytest.raises(flue.ConfigError):
        flue.agent(max_output_tokens=-3)
    s = session(make_agent(_looping(), tools=(noop,)))
    with pytest.raises(flue.ConfigError):
        s.dispatch("x", max_cost_usd=float("nan"))
