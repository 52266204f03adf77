"""Budgets hold before every call (issue 32.1): the first call is checked, the answer's
`max_tokens` is lowered to what the rest of the budget pays for, parallel subagents reserve
before they call, cut-off and retried requests count what they sent, and usage or a price the
provider does not give is estimated instead of turning the budget off."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from agents import make_agent, session

import flue_nb as flue
from flue_nb.models import FunctionModel, ScriptedModel, fail, reply, tool_call
from flue_nb.runtime.agent import define_subagent
from flue_nb.runtime.core.budget import MIN_ANSWER_TOKENS
from flue_nb.runtime.core.tokens import TokenCounter
from flue_nb.runtime.events import Log
from flue_nb.runtime.providers import price_of
from flue_nb.runtime.providers.model import ModelInfo, ModelRequest, ResponseDone, StreamEvent

SONNET = "claude-sonnet-4-6"  # $3 / $15 per million tokens
WORDS = "word " * 100_000  # about 100,000 prompt tokens: $0.30 of Sonnet's input


@flue.tool
def noop() -> str:
    """Do nothing."""
    return "ok"


class Honest:
    """A provider whose usage is what the request held (counted as the budget counts it) and
    whose answers are as long as `max_tokens` allows: the most a call can cost."""

    def __init__(self, *, answer: int = 32_000, delay: float = 0.0) -> None:
        self.answer = answer
        self.delay = delay
        self.counters: dict[int, TokenCounter] = {}
        self.max_tokens: list[int | None] = []

    async def __call__(self, request: ModelRequest) -> object:
        self.max_tokens.append(request.max_tokens)
        counter = self.counters.setdefault(id(request.messages), TokenCounter())
        prompt = counter.used_tokens(request.messages, system=request.system)
        if self.delay:
            await asyncio.sleep(self.delay)  # calls overlap, as parallel subagents' do
        out = min(self.answer, request.max_tokens or self.answer)
        return reply("", tool_call("noop"), usage=(prompt, out))


def _spent(s: object) -> float:
    cost = s.status().cost_usd  # type: ignore[attr-defined]
    assert cost is not None
    return float(cost)


def test_the_first_call_is_checked_and_refused_saying_why() -> None:
    model = FunctionModel(lambda req: reply("never"), id=SONNET)
    s = session(make_agent(model, max_cost_usd=0.05))
    with pytest.raises(flue.BudgetExceededError) as info:
        s.prompt(WORDS, timeout=60)
    assert model.requests == []  # a $0.30 prompt on a $0.05 budget is never sent
    assert "next call's prompt" in info.value.message and "$0.05" in info.value.message


def test_output_heavy_calls_get_a_lower_max_tokens_and_the_budget_holds() -> None:
    honest = Honest()
    model = FunctionModel(honest, id=SONNET)
    s = session(make_agent(model, tools=(noop,), max_cost_usd=1.0, max_turns=50))
    with pytest.raises(flue.BudgetExceededError):
        s.prompt("go", timeout=60)
    # Each call could answer 32,000 tokens ($0.48): the later ones are capped to what is left.
    assert honest.max_tokens[0] is None and any(m is not None for m in honest.max_tokens)
    assert all(m is None or m >= MIN_ANSWER_TOKENS for m in honest.max_tokens)
    assert 0.99 <= _spent(s) <= 1.0


def test_parallel_subagents_reserve_before_they_call() -> None:
    honest = Honest(delay=0.05)
    child = FunctionModel(honest, id=SONNET)
    kid = define_subagent("kid", "Does the work", agent=make_agent(child, tools=(noop,)))
    calls = [tool_call("task", prompt=f"work {i}", agent="kid") for i in range(8)]
    parent = ScriptedModel([reply("", *calls, usage=(1_000, 100)), reply("done", usage=(2_000, 100))], id=SONNET)
    s = session(make_agent(parent, extra=lambda: flue.use_subagent(kid), max_cost_usd=0.5))
    try:
        s.prompt("go", timeout=60)
    except flue.BudgetExceededError:
        pass
    assert len(child.requests) >= 2  # they did run, at once
    assert _spent(s) <= 0.5


def test_cut_off_and_retried_requests_count_what_they_sent() -> None:
    model = FunctionModel(lambda req: fail("server", "stream cut", after_text="Half an ans"), id=SONNET)
    s = session(make_agent(model, max_cost_usd=0.5))
    with pytest.raises(flue.BudgetExceededError):
        s.prompt(WORDS, timeout=60)
    # The first try sent $0.30 of prompt; a second would pass $0.50 (it made 12 before).
    assert len(model.requests) == 1
    status = s.status()
    assert status.lost_calls == 1 and status.cost_usd == pytest.approx(0.30, rel=0.02)


def test_a_response_without_usage_is_counted_at_its_estimate() -> None:
    model = FunctionModel(lambda req: reply("x " * 500, tool_call("noop")), id=SONNET)
    s = session(make_agent(model, tools=(noop,), max_input_tokens=10_000, max_turns=40))
    notes: list[str] = []
    s.observe(lambda e: notes.append(e.message) if isinstance(e, Log) and e.kind == "budget" else None)
    with pytest.raises(flue.BudgetExceededError) as info:
        s.prompt("y " * 2_000, timeout=60)
    assert info.value.details["limit"] == "max_input_tokens"
    assert len(model.requests) < 10  # 40 before: each unreported call counted as zero
    assert any("reported no token usage" in n for n in notes)


class _Gateway:
    """A priced model behind a gateway that renames it in every response."""

    def __init__(self, inner: FunctionModel) -> None:
        self.inner = inner

    @property
    def info(self) -> ModelInfo:
        return ModelInfo(SONNET, price=price_of(SONNET))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        async for event in self.inner.stream(request):
            if isinstance(event, ResponseDone):
                event.message.model = "gateway/sonnet-latest"
            yield event


def test_a_response_naming_an_unpriced_model_is_billed_at_the_called_models_price() -> None:
    inner = FunctionModel(Honest(answer=5_000), id="gateway/sonnet-latest")
    s = session(make_agent(_Gateway(inner), tools=(noop,), max_cost_usd=0.2, max_turns=40))
    with pytest.raises(flue.BudgetExceededError) as info:
        s.prompt("go", timeout=60)
    assert info.value.details["limit"] == "max_cost_usd"
    assert len(inner.requests) <= 3  # $0.075 a call at most: two fit in $0.20, a third is capped
    # status() (folded from the stored responses) prices them as the budget did, not as unknown.
    status = s.status()
    assert status.unpriced_responses == 0
    assert status.cost_usd is not None and 0.05 < status.cost_usd <= 0.2 + 0.01


def test_a_lowered_max_tokens_lowers_the_thinking_budget_with_it() -> None:
    from flue_nb.models import AnthropicModel

    model = AnthropicModel(SONNET, thinking={"type": "enabled", "budget_tokens": 8_000}, api_key="k")
    lowered = model.request_params(ModelRequest("", [], max_tokens=5_000))
    assert lowered["thinking"] == {"type": "enabled", "budget_tokens": 4_999}  # the API wants it below
    assert model.request_params(ModelRequest("", [], max_tokens=1_024))["thinking"] == {"type": "disabled"}
    assert model.request_params(ModelRequest("", []))["thinking"]["budget_tokens"] == 8_000


def test_a_model_whose_own_answer_cap_is_below_the_floor_answers_without_a_budget() -> None:
    # Only a budget refuses a call: a small model (max_output_tokens 1,000 < MIN_ANSWER_TOKENS)
    # with no limits set answers as it always did.
    model = ScriptedModel([reply("fine")], max_output_tokens=MIN_ANSWER_TOKENS - 24)
    s = session(make_agent(model))
    assert s.prompt("hi") == "fine"
