"""The same agent contract on every provider (issue 23, point 4; contract 11.3, 13.5): a real agent on the real SDK of
each provider (Anthropic's Messages API, OpenAI's chat completions and Responses API), against its loopback server:
tools, retries after a cut-off, overload and a malformed stream, overflow compaction with one
retry, the turn limit, a subagent, images, record/replay, the key kept out of tool results."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

import flue_nb as flue
from flue_nb import CompactionConfig
from flue_nb.models import RecordingModel, ReplayModel
from flue_nb.runtime.agent import define_subagent
from flue_nb.runtime.core.loop import RunSettings
from tests.provider_wires import Sleeps, Wire


def agent_on(model: Any, tmp_path: Any, *, compaction: Any = True, extra: Any = None) -> Any:
    @flue.agent
    def tested() -> str:
        flue.use_model(model, compaction=compaction)
        flue.use_sandbox(flue.local(str(tmp_path)))
        if extra is not None:
            extra()
        return "You are tested."

    return tested


def session_on(agent: Any, sleeps: Sleeps | None = None, **kwargs: Any) -> Any:
    return flue.init(agent, db=":memory:", settings=RunSettings(sleep=sleeps or Sleeps()), **kwargs)


def test_a_tool_call_runs_and_its_result_goes_back(wire: Wire, tmp_path) -> None:
    (tmp_path / "a.txt").write_text("alpha")
    wire.enqueue(wire.call("call_1", "read", {"path": "a.txt"}, text="Reading."), wire.say("It says alpha."))
    s = session_on(agent_on(wire.model(), tmp_path))
    assert s.prompt("what is in a.txt?") == "It says alpha."
    first, second = wire.bodies()
    (result,) = wire.tool_results(second)
    assert result[0] == "call_1" and "alpha" in result[1]
    assert wire.tool_names(second)[:6] == ["read", "write", "edit", "bash", "grep", "glob"]
    assert wire.system(first) == wire.system(second)  # frozen, byte-identical


def test_a_stream_cut_off_half_way_is_retried_with_backoff(wire: Wire, tmp_path) -> None:
    wire.enqueue(wire.cut("This answer will be cut"), wire.say("Complete answer."))
    sleeps = Sleeps()
    s = session_on(agent_on(wire.model(), tmp_path), sleeps)
    assert s.prompt("hi") == "Complete answer."
    assert len(wire.bodies()) == 2 and len(sleeps.delays) == 1


def test_overload_then_success_is_one_retry_layer_not_the_sdks(wire: Wire, tmp_path) -> None:
    wire.enqueue(wire.overloaded(), wire.say("ok"))
    sleeps = Sleeps()
    s = session_on(agent_on(wire.model(), tmp_path), sleeps)
    assert s.prompt("hi") == "ok"
    assert len(wire.bodies()) == 2 and len(sleeps.delays) == 1


def test_a_broken_stream_is_retried_and_the_run_completes(wire: Wire, tmp_path) -> None:
    wire.enqueue(wire.malformed("broken"), wire.say("Complete."))
    sleeps = Sleeps()
    s = session_on(agent_on(wire.model(), tmp_path), sleeps)
    assert s.prompt("hi") == "Complete."
    assert len(wire.bodies()) == 2 and len(sleeps.delays) == 1


def test_prompt_too_long_compacts_through_the_provider_and_retries_once(wire: Wire, tmp_path) -> None:
    wire.enqueue(
        wire.say("A long first answer. " * 40, prompt=50, completion=300),
        wire.overflow(),
        wire.say("## Goal\nAnswer questions.\n## Progress\nFirst answer given."),
        wire.say("Answered after compaction."),
    )
    events: list[Any] = []
    s = session_on(agent_on(wire.model(), tmp_path, compaction=CompactionConfig(keep_recent_tokens=20)))
    s.observe(events.append)
    s.prompt("first question " * 20)
    assert s.prompt("second question") == "Answered after compaction."
    summarise, retried = wire.bodies()[2], wire.bodies()[3]
    assert "You compact" in wire.system(summarise) and not wire.tool_names(summarise)
    assert "<summary>" in json.dumps(retried) and "First answer given." in json.dumps(retried)
    assert "first question" not in json.dumps(retried)
    assert [e.reason for e in events if e.type == "compaction_start"] == ["overflow"]


def test_the_turn_limit_ends_a_looping_model(wire: Wire, tmp_path) -> None:
    (tmp_path / "a.txt").write_text("alpha")
    wire.enqueue(*[wire.call(f"call_{i}", "read", {"path": "a.txt"}) for i in range(3)])
    s = session_on(agent_on(wire.model(), tmp_path))
    with pytest.raises(flue.TurnLimitExceededError):
        s.prompt("loop", max_turns=2)
    assert len(wire.bodies()) == 2


def test_a_subagent_runs_on_the_same_provider(wire: Wire, tmp_path) -> None:
    @flue.agent
    def kid() -> str:
        return "You are the child."

    sub = define_subagent("kid", "Answers small questions", agent=kid)
    wire.enqueue(
        wire.call("call_t", "task", {"prompt": "say hi", "agent": "kid"}),
        wire.say("hi from the child"),
        wire.say("The child said hi."),
    )
    s = session_on(agent_on(wire.model(), tmp_path, extra=lambda: flue.use_subagent(sub)))
    assert s.prompt("delegate") == "The child said hi."
    parent, child, back = wire.bodies()
    assert "You are the child." in wire.system(child)
    assert "hi from the child" in wire.tool_results(back)[0][1]


def test_an_attached_image_reaches_the_model_as_an_image(wire: Wire, tmp_path) -> None:
    from PIL import Image

    Image.new("RGB", (4, 3), "red").save(tmp_path / "red.png")
    wire.enqueue(wire.say("A red rectangle."))
    s = session_on(agent_on(wire.model(), tmp_path))
    assert s.prompt("what is this?", images=[str(tmp_path / "red.png")]) == "A red rectangle."
    assert wire.image_count(wire.bodies()[0]) == 1


def test_a_recorded_session_replays_offline(wire: Wire, tmp_path) -> None:
    cassette = tmp_path / f"{wire.name}.cassette.json"
    (tmp_path / "a.txt").write_text("alpha")
    wire.enqueue(wire.call("call_1", "read", {"path": "a.txt"}), wire.say("It says alpha."))
    recording = RecordingModel(wire.model(), cassette)
    assert session_on(agent_on(recording, tmp_path)).prompt("read a.txt") == "It says alpha."
    replay = ReplayModel(cassette)
    assert session_on(agent_on(replay, tmp_path)).prompt("read a.txt") == "It says alpha."
    replay.assert_complete()
    assert len(wire.bodies()) == 2  # the replay sent nothing


def test_the_key_in_use_is_redacted_from_tool_results(wire: Wire, tmp_path) -> None:
    key = "sk-test-0123456789abcdefghijklmnopqrs"

    @flue.tool
    def leak() -> str:
        """Return something that holds the key, as `python` printing os.environ would."""
        return f"found it: {key}!"

    wire.enqueue(wire.call("call_1", "leak", {}), wire.say("Nothing to see."))
    s = session_on(agent_on(wire.model(key), tmp_path, extra=lambda: flue.use_tool(leak)))
    assert s.prompt("leak it") == "Nothing to see."
    sent = json.dumps(wire.bodies()[1])
    assert key not in sent and "found it: [redacted:" in sent


def test_the_response_names_its_provider(wire: Wire, tmp_path) -> None:
    wire.enqueue(wire.say("ok", prompt=1000, completion=100))
    events: list[Any] = []
    s = session_on(agent_on(wire.model(), tmp_path))
    s.observe(events.append)
    s.prompt("hi")
    (turn,) = [e for e in events if e.type == "turn"]
    # Anthropic's responses keep their bare Claude id; others carry who answered (here the
    # loopback host: only `openai/...`, OpenAI's own API, is priced at OpenAI's list prices).
    assert turn.model == ("claude-test" if wire.name == "anthropic" else "127.0.0.1/gpt-test")


def test_a_cells_provenance_names_who_answered(wire: Wire, tmp_path) -> None:
    from flue_nb.notebook.views.transcript import CellView

    wire.enqueue(wire.say("ok"))
    s = session_on(agent_on(wire.model(), tmp_path))
    events: list[Any] = []
    s.observe(events.append)
    receipt = s.dispatch("hi")
    s.read(receipt)
    view = CellView("hi", s.conversation_id, submission_id=receipt.submission_id)
    for event in events:
        view.apply(event)
    expected = "claude-test" if wire.name == "anthropic" else "127.0.0.1/gpt-test"
    assert view.metadata()["response_models"] == [expected]


@pytest.mark.parametrize(
    ("spec", "variable"),
    [
        ("anthropic/claude-sonnet-4-6", "ANTHROPIC_API_KEY"),
        ("openai/gpt-4o", "OPENAI_API_KEY"),
        ("openai-responses/gpt-5", "OPENAI_API_KEY"),
    ],
)
def test_no_api_key_fails_the_prompt_with_model_not_configured(spec: str, variable: str) -> None:
    @flue.agent
    def keyless() -> None:
        flue.use_model(spec)

    s = session_on(keyless)
    with pytest.raises(flue.ModelNotConfiguredError) as exc_info:
        s.prompt("hi")
    assert exc_info.value.type == "model_not_configured" and variable in exc_info.value.message
    assert s.submissions()[0].error["type"] == "model_not_configured"


def test_an_abort_mid_stream_settles_aborted_and_keeps_what_arrived(wire: Wire, tmp_path) -> None:
    import threading

    wire.enqueue(wire.stall("The first words, then the server hangs"), wire.say("Next answer."))
    s = session_on(agent_on(wire.model(), tmp_path))
    streamed = threading.Event()
    s.observe(lambda e: streamed.set() if e.type == "text_delta" else None)
    receipt = s.dispatch("hi")
    assert streamed.wait(10)
    started = time.monotonic()
    s.abort()
    with pytest.raises(flue.SubmissionAbortedError):
        s.read(receipt, timeout=10)
    assert time.monotonic() - started < 8  # cancelled, not waited out (the stall never ends; idle timeout 120 s)
    assert s.prompt("again") == "Next answer."  # the conversation is ready for the next one
