"""`Session.status()`: what it says, and that it reads only what was appended since it last looked."""

from __future__ import annotations

import pytest
from agents import make_agent, session

import flue_nb as flue
from flue_nb.models import ScriptedModel, fail, reply
from flue_nb.runtime.core.tally import KINDS
from flue_nb.runtime.messages import Usage
from flue_nb.runtime.session import open_conversation


def test_status_sums_usage_names_the_last_model_and_counts_outcomes(tmp_path) -> None:
    model = ScriptedModel(
        [reply("one", usage=(100, 10)), reply("two", usage=(250, 20)), fail("auth", "bad key", status=401)]
    )
    s = session(make_agent(model), db=str(tmp_path / "s.sqlite"))
    s.prompt("a")
    first = s.status()
    assert first.usage == Usage(100, 10)
    s.prompt("b")
    with pytest.raises(flue.FlueError):
        s.prompt("c")
    st = s.status()
    assert st.usage == Usage(350, 30)
    # The live run counts the last response's input + output (270) plus what came after it.
    assert st.used_tokens is not None and 270 < st.used_tokens < 300
    assert st.model == model.info.id
    assert st.agent == "test_agent"
    assert st.outcomes == {"completed": 2, "failed": 1}
    assert st.running == () and st.queued == ()
    assert s.usage() == Usage(350, 30)
    # Read from the store alone, by a reader that never saw the run: the last response's count.
    cold = open_conversation(s.conversation_id, db=str(tmp_path / "s.sqlite")).status()
    assert (cold.usage, cold.used_tokens, cold.outcomes, cold.agent) == (st.usage, 270, st.outcomes, "test_agent")
    # Outcomes come from settlement records; what has not settled is counted by its state.
    reader = open_conversation(s.conversation_id, db=str(tmp_path / "s.sqlite"))
    reader.status()
    reader.store.admit(s.conversation_id, "later", submission_id="waiting", now=1.0)
    later = reader.status()
    assert later.outcomes == {"completed": 2, "failed": 1, "queued": 1} and later.queued == ("waiting",)


def test_status_reads_only_the_records_appended_since_it_last_looked(tmp_path) -> None:
    s = session(make_agent(ScriptedModel([reply(f"r{i}", usage=(10, 1)) for i in range(3)])))
    asked: list[int] = []
    records = s.store.records

    def spy(conversation_id, **kw):
        if kw.get("kinds") == KINDS:  # the tally's reads (status also asks whether the window is behind)
            asked.append(kw.get("after_seq", 0))
        return records(conversation_id, **kw)

    s.store.records = spy
    s.prompt("a")
    s.status()
    s.status()
    assert asked[-2] == 0 and asked[-1] > 0  # the second look starts where the first ended
    seen = asked[-1]
    s.prompt("b")
    s.prompt("c")
    assert s.status().usage == Usage(30, 3)
    assert asked[-1] == seen  # and the third where the second ended


def test_status_estimates_the_cost_of_priced_responses_and_counts_the_rest(tmp_path) -> None:
    priced = ScriptedModel([reply("one", usage=(100, 10)), reply("two", usage=(250, 20))], id="claude-sonnet-4-6")
    s = session(make_agent(priced), db=str(tmp_path / "s.sqlite"))
    s.prompt("a")
    s.prompt("b")
    assert s.status().cost_usd == pytest.approx((350 * 3 + 30 * 15) / 1_000_000)
    assert s.status().unpriced_responses == 0
    offline = session(make_agent(ScriptedModel([reply("x", usage=(5, 5))])), db=str(tmp_path / "o.sqlite"))
    offline.prompt("a")
    assert (offline.status().cost_usd, offline.status().unpriced_responses) == (None, 1)


def test_status_cost_counts_a_subagents_responses_too(tmp_path) -> None:
    from flue_nb.models import tool_call
    from flue_nb.runtime.agent import define_subagent

    child_model = ScriptedModel([reply("from the child", usage=(1000, 100))], id="claude-haiku-4-5")

    @flue.agent
    def child():
        flue.use_model(child_model)
        return "child"

    parent = ScriptedModel(
        [reply("", tool_call("task", prompt="hi", agent="kid"), usage=(100, 10)), reply("done", usage=(200, 20))],
        id="claude-sonnet-4-6",
    )
    sub = define_subagent("kid", "kid", agent=child)
    s = session(make_agent(parent, extra=lambda: flue.use_subagent(sub)), db=str(tmp_path / "s.sqlite"))
    assert s.prompt("go") == "done"
    own = (300 * 3 + 30 * 15) / 1_000_000
    kid = (1000 * 1 + 100 * 5) / 1_000_000
    st = s.status()
    assert st.cost_usd == pytest.approx(own + kid)
    assert st.usage == Usage(300, 30)  # the conversation's own responses: the window's tokens
