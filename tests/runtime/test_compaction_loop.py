"""Compaction in a running conversation (contract 13): when, what is kept, events, opting out."""

from __future__ import annotations

import threading

import pytest
from agents import session

import flue_nb as flue
from flue_nb import CompactionConfig
from flue_nb.models import ScriptedModel, fail, reply, tool_call
from flue_nb.runtime.messages import SummaryMessage, ToolResultMessage, UserMessage
from flue_nb.runtime.providers.offline import Reply

# window 10,000, max output 2,000 → reserve 2,000 → threshold 8,000 (13.1)
WINDOW = dict(context_window=10_000, max_output_tokens=2_000)
SUMMARY = "## Goal\nTest compaction.\n## Progress\nSome."


def compaction_requests(model):
    return [r for r in model.requests if r.purpose == "compaction"]


def turn_requests(model):
    return [r for r in model.requests if r.purpose == "turn"]


SMALL_KEEP = CompactionConfig(keep_recent_tokens=40)


def agent_with(model, compaction=SMALL_KEEP, **kw):
    @flue.agent
    def compacting():
        flue.use_model(model, compaction=compaction)
        if kw.get("sandbox") is not None:
            flue.use_sandbox(kw["sandbox"])
        return "You compact."

    return compacting


def test_compaction_13_3_threshold_is_checked_before_a_model_call_would_exceed_it():
    long_text = "word " * 60
    model = ScriptedModel(
        [
            reply(long_text, tool_call("task", prompt="x", agent="none"), usage=(8_500, 100)),
            reply("after compaction"),
        ],
        summary=SUMMARY,
        **WINDOW,
    )
    events = []
    s = session(agent_with(model))
    s.observe(events.append)
    assert s.prompt("start " * 50) == "after compaction"
    assert len(compaction_requests(model)) == 1
    after = turn_requests(model)[1]
    assert isinstance(after.messages[0], SummaryMessage) and SUMMARY in after.messages[0].text
    # The tool result stays with its call (13.2): the kept tail starts at the assistant message.
    kinds = [m.kind for m in after.messages]
    assert kinds == ["summary", "assistant", "tool_result"]
    start = next(e for e in events if e.type == "compaction_start")
    done = next(e for e in events if e.type == "compaction")
    assert start.reason == "threshold" and start.estimated_tokens > 8_000
    assert done.messages_before == 3 and done.messages_after == 3
    assert done.is_error is False and done.duration_ms >= 0


def test_compaction_13_3_threshold_is_checked_when_the_loop_goes_idle():
    model = ScriptedModel(
        [reply("small answer " * 20), reply("big answer", usage=(8_900, 50)), reply("next")], summary=SUMMARY, **WINDOW
    )
    s = session(agent_with(model))
    s.prompt("first " * 80)
    idle = threading.Event()
    s.observe(lambda e: idle.set() if e.type == "idle" else None)
    s.prompt("second")
    assert idle.wait(10)
    assert len(compaction_requests(model)) == 1
    s.prompt("third")
    assert isinstance(turn_requests(model)[2].messages[0], SummaryMessage)


def test_compaction_13_2_the_most_recent_tokens_are_kept_verbatim():
    model = ScriptedModel(
        [reply("a " * 30), reply("b " * 30, usage=(9_000, 10)), reply("c")], summary=SUMMARY, **WINDOW
    )
    s = session(agent_with(model, compaction=CompactionConfig(keep_recent_tokens=60)))
    s.prompt("one")
    s.prompt("two")
    s.prompt("three")
    kept = turn_requests(model)[2].messages
    assert isinstance(kept[0], SummaryMessage)
    assert kept[-1] == UserMessage("three", kept[-1].submission_id)
    assert any(getattr(m, "text", "") == "b " * 30 for m in kept)
    assert not any(getattr(m, "text", "") == "one" for m in kept)


def test_compaction_13_4_compaction_false_opts_out_of_threshold_only():
    # Default keep_recent_tokens (8,000): enough history that the first exchange can fold.
    model = ScriptedModel(
        [reply("over " * 6_000, usage=(9_500, 10)), reply("still no compaction " * 3_000)], summary=SUMMARY, **WINDOW
    )
    s = session(agent_with(model, compaction=False))
    s.prompt("one")
    s.prompt("two")
    assert compaction_requests(model) == []
    s.compact()  # explicit compaction still works (13.5)
    assert len(compaction_requests(model)) == 1


def test_compaction_13_4_config_is_validated():
    with pytest.raises(flue.ConfigError):
        CompactionConfig(keep_recent_tokens=0)
    with pytest.raises(flue.ConfigError):
        CompactionConfig(reserve_tokens=-5)
    with pytest.raises(TypeError):
        CompactionConfig(keep_recent=5)  # type: ignore[call-arg]
    with pytest.raises(flue.ConfigError, match="compaction"):

        @flue.agent
        def bad():
            flue.use_model(ScriptedModel(["x"]), compaction="yes")

        session(bad).prompt("hi")


def test_compaction_13_5_overflow_compacts_and_retries_the_turn_once():
    model = ScriptedModel(
        ["first " * 9_000, fail("context_overflow", "prompt is too long"), "fits now"], summary=SUMMARY, **WINDOW
    )
    events = []
    s = session(agent_with(model, compaction=False))
    s.observe(events.append)
    s.prompt("one " * 20)
    assert s.prompt("two") == "fits now"
    assert [e.reason for e in events if e.type == "compaction_start"] == ["overflow"]
    retried = turn_requests(model)[-1]
    assert isinstance(retried.messages[0], SummaryMessage)


def test_compaction_13_5_a_second_overflow_fails_the_submission():
    model = ScriptedModel(
        ["first " * 20, fail("context_overflow"), fail("context_overflow")], summary=SUMMARY, **WINDOW
    )
    s = session(agent_with(model))
    s.prompt("one " * 20)
    with pytest.raises(flue.ContextOverflowError):
        s.prompt("two")
    assert s.submissions()[-1].outcome.value == "failed"


def test_compaction_13_5_manual_compact_is_busy_while_a_run_is_going():
    gate = threading.Event()

    @flue.tool
    def hold() -> str:
        """Hold."""
        gate.wait(10)
        return "released"

    model = ScriptedModel([reply("", tool_call("hold")), reply("done")], summary=SUMMARY, **WINDOW)

    @flue.agent
    def holder():
        flue.use_model(model)
        flue.use_tool(hold)

    s = session(holder)
    started = threading.Event()
    s.observe(lambda e: started.set() if e.type == "tool_start" else None)
    r = s.dispatch("go")
    assert started.wait(10)
    with pytest.raises(flue.SessionBusyError) as exc_info:
        s.compact()
    assert exc_info.value.type == "session_busy"
    gate.set()
    assert s.read(r) == "done"


def test_compaction_13_6_summary_keeps_file_lists_and_the_system_prompt_is_rebaselined(tmp_path):
    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    box = flue.local(str(tmp_path))
    model = ScriptedModel(
        [
            reply("", tool_call("read", path="data.csv")),
            reply("", tool_call("write", path="out.txt", content="result")),
            reply("wrote it"),
            reply("after"),
        ],
        summary="## Goal\nAnalyse data.",
        **WINDOW,
    )
    s = session(agent_with(model, sandbox=box))
    s.prompt("analyse")
    before = turn_requests(model)[0].system
    assert "out.txt" not in before
    s.compact()
    s.prompt("next")
    after = turn_requests(model)[-1]
    summary = after.messages[0]
    assert isinstance(summary, SummaryMessage)
    # The folded part read data.csv; the write to out.txt is recent enough to be kept verbatim.
    assert "<read-files>\ndata.csv\n</read-files>" in summary.text
    assert any(getattr(m, "name", "") == "write" for m in after.messages)
    assert "out.txt" in after.system  # recomposed against the current environment
    (req,) = compaction_requests(model)
    assert "read" in req.messages[0].text and not req.tools


def test_compaction_survives_a_reopen_of_the_store(tmp_path):
    db = str(tmp_path / "c.sqlite")
    model = ScriptedModel(["one " * 30, "two " * 30, "three"], summary=SUMMARY, **WINDOW)
    agent = agent_with(model)
    s = session(agent, db=db, conversation="c")
    s.prompt("a")
    s.prompt("b")
    s.compact()
    session(agent, db=db, conversation="c").prompt("c")
    last = turn_requests(model)[-1]
    assert isinstance(last.messages[0], SummaryMessage) and last.messages[-1].text == "c"
    assert not any(isinstance(m, ToolResultMessage) for m in last.messages)


def test_compaction_13_4_config_model_does_the_summarising():
    summarizer = ScriptedModel(["## Goal\nSummarised by the small model."], **WINDOW)
    main = ScriptedModel(["one " * 40, "two " * 40, "three"], **WINDOW)

    @flue.agent
    def two_models():
        flue.use_model(main, compaction=CompactionConfig(keep_recent_tokens=40, model=summarizer))

    s = session(two_models)
    s.prompt("a")
    s.prompt("b")
    s.compact()
    s.prompt("c")
    assert compaction_requests(main) == [] and len(summarizer.requests) == 1
    assert "Summarised by the small model." in turn_requests(main)[-1].messages[0].text


def test_a_paused_turn_goes_back_at_once_even_over_the_threshold():
    # Issue 32.11: the API continues a paused server-tool turn only when it is the last message;
    # a fold before the continuation replaced the prompt it was working on.
    paused_text = "word " * 9_000  # over the 8,000-token threshold on its own
    model = ScriptedModel(
        [Reply(paused_text, stop_reason="pause_turn"), reply("found it", usage=(900, 10))],
        summary=SUMMARY,
        **WINDOW,
    )
    s = session(agent_with(model))
    assert s.prompt("search the web") == "found it"
    first, continued = turn_requests(model)[:2]
    assert compaction_requests(model) == []
    assert continued.messages[:-1] == first.messages
    assert continued.messages[-1].stop_reason == "pause_turn" and continued.messages[-1].text == paused_text
