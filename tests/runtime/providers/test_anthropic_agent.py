"""A real agent on the real `anthropic` SDK, against the loopback Messages API: tools, retries
after a stream cut off half-way, and overflow compaction with one retry (contract 11.3, 13.5)."""

from __future__ import annotations

import json

import pytest

import flue_nb as flue
from flue_nb import CompactionConfig
from flue_nb.runtime.core.loop import RunSettings
from flue_nb.runtime.providers.anthropic import AnthropicModel
from tests.anthropic_server import error, stream, text, tool_use, usage


class Sleeps:
    def __init__(self):
        self.delays = []

    async def __call__(self, seconds):
        self.delays.append(seconds)


def agent_on(server, tmp_path, *, compaction=True):
    model = AnthropicModel("claude-sonnet-4-6", api_key="test-key", base_url=server.url)

    @flue.agent
    def claude():
        flue.use_model(model, compaction=compaction)
        flue.use_sandbox(flue.local(str(tmp_path)))
        return "You are tested."

    return claude


def bodies(server):
    return [r.body for r in server.requests]


def test_a_tool_call_streamed_by_the_sdk_runs_and_its_result_goes_back(server, tmp_path):
    (tmp_path / "a.txt").write_text("alpha")
    server.enqueue(
        stream(
            text("Reading."),
            tool_use("toolu_1", "read", {"path": "a.txt"}),
            stop_reason="tool_use",
            usage=usage(input=100, output=20),
        ),
        stream(text("It says alpha."), usage=usage(input=150, output=5)),
    )
    s = flue.init(agent_on(server, tmp_path), db=":memory:", settings=RunSettings(sleep=Sleeps()))
    assert s.prompt("what is in a.txt?") == "It says alpha."
    second = bodies(server)[1]
    results = [
        b
        for m in second["messages"]
        for b in (m["content"] if isinstance(m["content"], list) else [])
        if b.get("type") == "tool_result"
    ]
    assert results[0]["tool_use_id"] == "toolu_1" and "alpha" in json.dumps(results[0]["content"])
    assert [t["name"] for t in second["tools"]][:6] == ["read", "write", "edit", "bash", "grep", "glob"]
    assert bodies(server)[0]["system"] == second["system"]  # frozen, byte-identical


def test_a_stream_cut_off_half_way_is_retried_with_backoff(server, tmp_path):
    server.enqueue(
        stream(text("This answer will be cut"), cut_after=4),
        stream(text("Complete answer.")),
    )
    sleeps = Sleeps()
    s = flue.init(agent_on(server, tmp_path), db=":memory:", settings=RunSettings(sleep=sleeps))
    assert s.prompt("hi") == "Complete answer."
    assert len(server.requests) == 2 and len(sleeps.delays) == 1
    assert s.submissions()[0].attempts == 1


def test_overload_then_success_is_one_retry_layer_not_the_sdks(server, tmp_path):
    server.enqueue(error(529, "overloaded_error", "Overloaded", x_should_retry="true"), stream(text("ok")))
    sleeps = Sleeps()
    s = flue.init(agent_on(server, tmp_path), db=":memory:", settings=RunSettings(sleep=sleeps))
    assert s.prompt("hi") == "ok"
    assert len(server.requests) == 2 and len(sleeps.delays) == 1


def test_prompt_too_long_compacts_through_the_provider_and_retries_once(server, tmp_path):
    server.enqueue(
        stream(text("A long first answer. " * 40), usage=usage(input=50, output=300)),
        error(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"),
        stream(text("## Goal\nAnswer questions.\n## Progress\nFirst answer given.")),
        stream(text("Answered after compaction.")),
    )
    events = []
    s = flue.init(
        agent_on(server, tmp_path, compaction=CompactionConfig(keep_recent_tokens=20)),
        db=":memory:",
        settings=RunSettings(sleep=Sleeps()),
    )
    s.observe(events.append)
    s.prompt("first question " * 20)
    assert s.prompt("second question") == "Answered after compaction."
    summarise, retried = bodies(server)[2], bodies(server)[3]
    assert "tools" not in summarise or not summarise["tools"]
    assert "You compact" in summarise["system"][0]["text"]
    first_user = retried["messages"][0]
    content = json.dumps(first_user["content"])
    assert "<summary>" in content and "First answer given." in content
    assert [e.reason for e in events if e.type == "compaction_start"] == ["overflow"]
    done = next(e for e in events if e.type == "compaction")
    assert done.is_error is False
    assert "first question" not in json.dumps(retried["messages"])  # folded into the summary


def test_no_api_key_fails_the_prompt_with_model_not_configured(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)

    @flue.agent
    def keyless():
        flue.use_model("anthropic/claude-sonnet-4-6")

    s = flue.init(keyless, db=":memory:", settings=RunSettings(sleep=Sleeps()))
    with pytest.raises(flue.ModelNotConfiguredError) as exc_info:
        s.prompt("hi")
    assert exc_info.value.type == "model_not_configured" and "ANTHROPIC_API_KEY" in exc_info.value.message
    assert s.submissions()[0].error["type"] == "model_not_configured"
