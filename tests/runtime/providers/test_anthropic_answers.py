"""What the Messages API can answer beyond text, thinking and tool use (issue 20.4): a refusal,
redacted thinking, server tools and their results, citations, MCP-connector blocks, `pause_turn`
— on both transports, a real agent against the loopback Messages API."""

from __future__ import annotations

from typing import Any

import pytest

import flue_nb as flue
from flue_nb.runtime.core.loop import RunSettings
from flue_nb.runtime.errors import ModelRefusedError, ProviderError
from flue_nb.runtime.messages import AssistantMessage, ProviderPart, TextPart, message_from_dict, message_to_dict
from flue_nb.runtime.providers.anthropic import AnthropicModel, to_wire_messages
from tests.anthropic_server import AnthropicServer, raw_block, stream, text, thinking, tool_use

pytestmark = pytest.mark.usefixtures("transport")

REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}
SEARCH = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "flue weather"}}
SEARCH_RESULT = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_1",
    "content": [
        {
            "type": "web_search_result",
            "url": "https://weather.example.test/today",
            "title": "Weather",
            "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1",
            "page_age": "April 30, 2025",
        }
    ],
}
CITATION = {
    "type": "web_search_result_location",
    "url": "https://weather.example.test/today",
    "title": "Weather",
    "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm",
    "cited_text": "It is sunny.",
}
MCP_USE = {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "echo", "server_name": "remote", "input": {"x": 1}}
MCP_RESULT = {
    "type": "mcp_tool_result",
    "tool_use_id": "mcptoolu_1",
    "is_error": False,
    "content": [{"type": "text", "text": "1"}],
}


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def claude_session(server: AnthropicServer, tmp_path: Any) -> Any:
    model = AnthropicModel("claude-sonnet-4-6", api_key="test-key", base_url=server.url)

    @flue.agent
    def claude() -> str:
        flue.use_model(model)
        flue.use_sandbox(flue.local(str(tmp_path)))
        return "You are tested."

    return flue.init(claude, db=":memory:", settings=RunSettings(sleep=Sleeps()))


def assistant_turns(server: AnthropicServer, n: int) -> list[list[dict[str, Any]]]:
    """The content of each assistant message of request `n`."""
    return [m["content"] for m in server.requests[n].body["messages"] if m["role"] == "assistant"]


def server_tool_blocks() -> list[dict[str, Any]]:
    return [
        raw_block(
            {**SEARCH, "input": {}},
            {"type": "input_json_delta", "partial_json": '{"query": '},
            {"type": "input_json_delta", "partial_json": '"flue weather"}'},
        ),
        raw_block(SEARCH_RESULT),
        raw_block(
            {"type": "text", "text": "", "citations": []},
            {"type": "citations_delta", "citation": CITATION},
            {"type": "text_delta", "text": "It is sunny."},
        ),
    ]


def test_a_refusal_settles_failed_with_model_refused_naming_the_category_and_explanation(server, tmp_path):
    details = {"type": "refusal", "category": "cyber", "explanation": "This looks like exploit development."}
    server.enqueue(stream(text("I can"), stop_reason="refusal", stop_details=details))
    s = claude_session(server, tmp_path)
    with pytest.raises(ModelRefusedError) as info:
        s.prompt("write me a worm")
    assert info.value.type == "model_refused"
    assert "cyber" in info.value.message and "exploit development" in info.value.message
    assert info.value.details["category"] == "cyber"
    [sub] = s.submissions()
    assert (sub.outcome, sub.error["type"]) == ("failed", "model_refused")
    assert len(server.requests) == 1  # not retried
    assert not any(isinstance(m, AssistantMessage) for m in s.history())  # the refused turn is not kept


def test_a_refusal_without_details_still_fails_and_says_so(server, tmp_path):
    server.enqueue(stream(text(""), stop_reason="refusal"))
    with pytest.raises(ModelRefusedError, match="refused"):
        claude_session(server, tmp_path).prompt("hm")


def test_redacted_thinking_is_kept_in_order_and_sent_back_verbatim(server, tmp_path):
    (tmp_path / "a.txt").write_text("alpha")
    server.enqueue(
        stream(
            thinking("Let me look.", signature="sig-1"),
            raw_block(REDACTED),
            tool_use("toolu_1", "read", {"path": "a.txt"}),
            stop_reason="tool_use",
        ),
        stream(text("It says alpha.")),
    )
    s = claude_session(server, tmp_path)
    assert s.prompt("read a.txt") == "It says alpha."
    [sent] = assistant_turns(server, 1)
    assert [b["type"] for b in sent] == ["thinking", "redacted_thinking", "tool_use"]
    assert sent[1] == REDACTED
    stored = next(m for m in s.history() if isinstance(m, AssistantMessage))
    assert [p.kind for p in stored.parts] == ["thinking", "provider", "tool_call"]


def test_server_tool_use_its_result_and_citations_are_kept_verbatim_and_echoed_back(server, tmp_path):
    server.enqueue(stream(*server_tool_blocks()), stream(text("Still sunny.")))
    s = claude_session(server, tmp_path)
    assert s.prompt("weather?") == "It is sunny."
    assert s.prompt("and now?") == "Still sunny."
    [sent] = assistant_turns(server, 1)
    assert sent[0] == SEARCH and sent[1] == SEARCH_RESULT
    assert sent[2]["type"] == "text" and sent[2]["text"] == "It is sunny." and sent[2]["citations"] == [CITATION]
    reloaded = message_from_dict(message_to_dict(next(m for m in s.history() if isinstance(m, AssistantMessage))))
    assert to_wire_messages([reloaded])[0]["content"] == sent


def test_server_tool_input_that_streams_after_a_start_without_input_is_kept(server, tmp_path):
    start = {k: v for k, v in SEARCH.items() if k != "input"}
    delta = {"type": "input_json_delta", "partial_json": '{"query": "flue weather"}'}
    server.enqueue(stream(raw_block(start, delta), raw_block(SEARCH_RESULT), text("Sunny.")), stream(text("ok")))
    s = claude_session(server, tmp_path)
    assert s.prompt("weather?") == "Sunny."
    s.prompt("thanks")
    assert assistant_turns(server, 1)[0][0] == SEARCH


def test_mcp_connector_blocks_are_kept_verbatim_and_echoed_back(server, tmp_path):
    server.enqueue(stream(raw_block(MCP_USE), raw_block(MCP_RESULT), text("It echoed 1.")), stream(text("ok")))
    s = claude_session(server, tmp_path)
    assert s.prompt("echo 1") == "It echoed 1."
    s.prompt("thanks")
    [sent] = assistant_turns(server, 1)
    assert sent[:2] == [MCP_USE, MCP_RESULT]


def test_a_delta_for_a_block_we_cannot_keep_fails_the_request_naming_the_block(server, tmp_path):
    server.enqueue(stream(raw_block({"type": "future_block", "id": "x"}, {"type": "future_delta", "bits": "..."})))
    with pytest.raises(ProviderError) as info:
        claude_session(server, tmp_path).prompt("hi")
    assert "`future_block`" in info.value.message and "`future_delta`" in info.value.message
    assert len(server.requests) == 1  # a fault of flue_nb's, not worth a retry


def test_pause_turn_is_continued_by_sending_the_paused_turn_back(server, tmp_path):
    server.enqueue(
        stream(raw_block(SEARCH), stop_reason="pause_turn"),
        stream(raw_block(SEARCH_RESULT), text("Found it.")),
    )
    s = claude_session(server, tmp_path)
    assert s.prompt("search") == "Found it."
    assert len(server.requests) == 2
    second = server.requests[1].body["messages"]
    assert second[-1] == {"role": "assistant", "content": [SEARCH]}  # the API continues this turn
    s_history = [m for m in s.history() if isinstance(m, AssistantMessage)]
    assert [m.stop_reason for m in s_history] == ["pause_turn", "end_turn"]


def test_a_pause_turn_followed_by_another_turn_sends_one_assistant_turn():
    paused = AssistantMessage([ProviderPart("anthropic", SEARCH)], stop_reason="pause_turn")
    done = AssistantMessage([ProviderPart("anthropic", SEARCH_RESULT), TextPart("Found it.")])
    wire = to_wire_messages([paused, done])
    assert wire == [{"role": "assistant", "content": [SEARCH, SEARCH_RESULT, {"type": "text", "text": "Found it."}]}]


def test_another_providers_blocks_are_not_sent_to_anthropic():
    m = AssistantMessage([ProviderPart("other", {"type": "x"}), TextPart("hi")])
    assert to_wire_messages([m]) == [{"role": "assistant", "content": [{"type": "text", "text": "hi"}]}]
