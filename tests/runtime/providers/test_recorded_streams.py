"""Real recorded Messages API streams (recorded/, from pydantic-ai's and vercel/ai's test suites)
replayed through the Anthropic provider on both transports (SDK and cold-start httpx2).

Each stream is also read by a small reference reader written from the API's documented event
semantics (`_reference`); the provider's message must agree with it: the text, tool calls with
their parsed input, thinking with its signature, redacted thinking, server tools and their
results, citations, MCP-connector and other blocks kept verbatim and echoed back, the stop
reason and the usage. A refusal fails as `model_refused`; `pause_turn` is continued.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from flue_nb.runtime.messages import AssistantMessage, ProviderPart, TextPart, ThinkingPart, ToolCall, UserMessage
from flue_nb.runtime.providers.anthropic import AnthropicModel, to_wire_messages
from flue_nb.runtime.providers.model import ModelRequest, ResponseDone
from tests import anthropic_server as A
from tests.anthropic_server import AnthropicServer, RecordedReply

pytestmark = pytest.mark.usefixtures("transport")

RECORDED = Path(__file__).with_name("recorded")
STREAMS = sorted(p.name for p in RECORDED.glob("*.sse"))


def _events(body: str) -> list[dict[str, Any]]:
    """The `data:` JSON of each SSE event, in order (pings included)."""
    out = []
    for frame in body.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(line[5:].lstrip() for line in frame.split("\n") if line.startswith("data:"))
        if data:
            out.append(json.loads(data))
    return out


def _reference(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The final message the stream describes, by the API's rules (independent of flue_nb)."""
    message: dict[str, Any] = {}
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for e in events:
        kind = e["type"]
        if kind == "message_start":
            message = copy.deepcopy(e["message"])
            blocks = dict(enumerate(message.get("content") or []))  # a continued turn starts with blocks
        elif kind == "content_block_start":
            blocks[e["index"]] = copy.deepcopy(e["content_block"])
        elif kind == "content_block_delta":
            block, delta = blocks[e["index"]], e["delta"]
            dtype = delta["type"]
            if dtype == "text_delta":
                block["text"] = block.get("text", "") + delta["text"]
            elif dtype == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta["thinking"]
            elif dtype == "signature_delta":
                block["signature"] = delta["signature"]
            elif dtype == "input_json_delta":
                partial[e["index"]] = partial.get(e["index"], "") + delta.get("partial_json", "")
            elif dtype == "citations_delta":
                block.setdefault("citations", []).append(delta["citation"])
            elif dtype == "compaction_delta":
                block["content"] = (block.get("content") or "") + (delta.get("content") or "")
        elif kind == "content_block_stop":
            if partial.get(e["index"]):
                blocks[e["index"]]["input"] = json.loads(partial[e["index"]])
        elif kind == "message_delta":
            message.update({k: v for k, v in e["delta"].items() if v is not None})
            message["usage"] = {**message.get("usage", {}), **{k: v for k, v in e["usage"].items() if v is not None}}
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


def _replay(name: str) -> tuple[AssistantMessage | None, BaseException | None, AnthropicServer]:
    return _replay_body((RECORDED / name).read_bytes())


def _replay_body(body: bytes) -> tuple[AssistantMessage | None, BaseException | None, AnthropicServer]:
    with AnthropicServer() as server:
        server.enqueue(RecordedReply(body))
        model = AnthropicModel("claude-sonnet-4-6", api_key="test", base_url=server.url)
        request = ModelRequest(system="s", messages=[UserMessage("hi")])

        async def go() -> AssistantMessage:
            done = None
            async for event in model.stream(request):
                if isinstance(event, ResponseDone):
                    done = event.message
            assert done is not None
            return done

        try:
            return asyncio.run(go()), None, server
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            return None, exc, server


def _normal(block: dict[str, Any]) -> dict[str, Any]:
    """A block as it is sent back: without the empty `citations` a text block starts with."""
    out = dict(block)
    if out.get("type") == "text" and not out.get("citations"):
        out.pop("citations", None)
    return out


@pytest.mark.parametrize("name", STREAMS)
def test_a_recorded_stream_is_understood(name: str) -> None:
    expected = _reference(_events((RECORDED / name).read_text(encoding="utf-8")))
    msg, exc, server = _replay(name)
    assert len(server.requests) == 1
    if expected.get("stop_reason") == "refusal":
        from flue_nb.runtime.errors import ModelRefusedError

        assert msg is None or msg.stop_reason == "refusal", exc
        if exc is not None:
            assert isinstance(exc, ModelRefusedError)
        return
    assert exc is None, f"{type(exc).__name__}: {exc}"
    assert msg is not None
    assert msg.stop_reason == expected["stop_reason"]
    content = expected["content"]

    text = "".join(b["text"] for b in content if b["type"] == "text")
    assert msg.text == text
    calls = [(b["id"], b["name"], b.get("input") or {}) for b in content if b["type"] == "tool_use"]
    assert [(p.id, p.name, p.input) for p in msg.parts if isinstance(p, ToolCall)] == calls
    thinking = [(b["thinking"], b.get("signature")) for b in content if b["type"] == "thinking"]
    assert [(p.thinking, p.signature) for p in msg.parts if isinstance(p, ThinkingPart)] == thinking
    kept = [p.block["type"] for p in msg.parts if isinstance(p, ProviderPart)]
    modelled = {"text", "tool_use", "thinking"}
    assert kept == [b["type"] for b in content if b["type"] not in modelled]  # nothing dropped
    cited = [b.get("citations") or None for b in content if b["type"] == "text"]
    assert [p.citations or None for p in msg.parts if isinstance(p, TextPart)] == cited

    # What goes back to the API on the next request is what the API sent, block for block.
    [sent] = to_wire_messages([msg])
    assert [_normal(b) for b in sent["content"]] == [_normal(b) for b in content if _sendable(b)]

    usage = expected["usage"]
    assert msg.usage is not None
    assert msg.usage.output_tokens == usage["output_tokens"]
    assert msg.usage.input_tokens == usage.get("input_tokens", 0)
    assert msg.usage.cache_read_tokens == (usage.get("cache_read_input_tokens") or 0)
    assert msg.usage.cache_write_tokens == (usage.get("cache_creation_input_tokens") or 0)


def _sendable(block: dict[str, Any]) -> bool:
    """Blocks the API takes back (an empty text block is refused by the API, so not sent)."""
    return not (block["type"] == "text" and not block.get("text") and not block.get("citations"))


def test_the_recorded_streams_cover_what_the_api_can_answer() -> None:
    seen_blocks: set[str] = set()
    seen_stops: set[str] = set()
    for name in STREAMS:
        message = _reference(_events((RECORDED / name).read_text(encoding="utf-8")))
        seen_blocks |= {b["type"] for b in message["content"]}
        seen_stops.add(message.get("stop_reason", ""))
    assert len(STREAMS) >= 40
    assert {"text", "tool_use", "thinking", "redacted_thinking", "server_tool_use", "web_search_tool_result",
            "mcp_tool_use", "mcp_tool_result", "compaction"} <= seen_blocks  # fmt: skip
    assert {"end_turn", "tool_use", "pause_turn", "refusal"} <= seen_stops


def test_a_recorded_pause_turn_is_continued_with_the_paused_turn_sent_back(tmp_path: Any) -> None:

    first = (RECORDED / "pydantic-ai-pause_turn_web_search_streaming_vcr-1.sse").read_bytes()
    second = (RECORDED / "pydantic-ai-pause_turn_web_search_streaming_vcr-2.sse").read_bytes()
    with AnthropicServer() as server:
        server.enqueue(RecordedReply(first), RecordedReply(second))
        s = _session(server)
        answer = s.prompt("weather in San Francisco?")
    paused = _reference(_events(first.decode()))
    resumed = _reference(_events(second.decode()))
    assert answer == "".join(b["text"] for b in resumed["content"] if b["type"] == "text")
    assert len(server.requests) == 2
    last = server.requests[1].body["messages"][-1]
    assert last["role"] == "assistant"
    assert [b["type"] for b in last["content"]] == [b["type"] for b in paused["content"] if _sendable(b)]


def test_a_recorded_refusal_settles_failed_with_model_refused(tmp_path: Any) -> None:
    from flue_nb.runtime.errors import ModelRefusedError

    with AnthropicServer() as server:
        server.enqueue(RecordedReply((RECORDED / "vercel-refusal.sse").read_bytes()))
        s = _session(server)
        with pytest.raises(ModelRefusedError) as info:
            s.prompt("hm")
    assert "cyber" in info.value.message
    [sub] = s.submissions()
    assert (sub.outcome, sub.error["type"]) == ("failed", "model_refused")


def test_a_tool_use_caller_is_kept_and_echoed_back() -> None:
    msg, exc, _ = _replay("vercel-programmatic-tool-calling.1-2.sse")
    assert exc is None and msg is not None
    [sent] = to_wire_messages([msg])
    assert sent["content"][0]["caller"]["type"] == "code_execution_20250825"
    from flue_nb.runtime.messages import message_from_dict, message_to_dict

    assert to_wire_messages([message_from_dict(message_to_dict(msg))]) == [sent]  # stored and loaded


def _session(server: Any, model_id: str = "claude-sonnet-4-6") -> Any:
    """A session whose agent talks to `server` through the real provider, never sleeping on a retry."""
    import flue_nb as flue
    from flue_nb.runtime.core.loop import RunSettings

    model = AnthropicModel(model_id, api_key="test", base_url=server.url)

    @flue.agent
    def claude() -> str:
        flue.use_model(model)
        return "You are tested."

    async def no_sleep(seconds: float) -> None:
        pass

    return flue.init(claude, db=":memory:", settings=RunSettings(sleep=no_sleep))


def test_a_paused_search_turn_is_continued_at_once_without_compacting_the_prompt() -> None:
    # Issue 32.11: the paused turn's usage says 404,500 input tokens, summed over its 10 server-side
    # searches; the continuation request really held 80,251. On a 200k window the sum was taken for
    # the context size and a compaction replaced the user's prompt before the continuation.
    import flue_nb as flue

    first = (RECORDED / "pydantic-ai-pause_turn_web_search_streaming_vcr-1.sse").read_bytes()
    second = (RECORDED / "pydantic-ai-pause_turn_web_search_streaming_vcr-2.sse").read_bytes()
    paused = _reference(_events(first.decode()))
    assert paused["usage"]["input_tokens"] == 404_500 and paused["stop_reason"] == "pause_turn"
    with AnthropicServer() as server:
        server.enqueue(RecordedReply(first), RecordedReply(second), A.stream(A.text("You are welcome.")))
        s = _session(server, "claude-sonnet-4-5")  # a 200k window
        compactions: list[Any] = []
        s.observe(lambda e: compactions.append(e) if isinstance(e, flue.CompactionStart) else None)
        s.prompt("weather in San Francisco?")
        s.prompt("thanks")
    # Compared without the cache breakpoints, which move to the newest message each request.
    bodies = [_uncached(r.body) for r in server.requests]
    assert len(bodies) == 3 and compactions == []  # no summary request before or after
    # The continuation is the first request plus the paused turn, sent back as the last message.
    assert bodies[1]["messages"][:-1] == bodies[0]["messages"]
    last = bodies[1]["messages"][-1]
    assert last["role"] == "assistant"
    assert [_normal(b) for b in last["content"]] == [_normal(b) for b in paused["content"] if _sendable(b)]
    # The next prompt still holds the user's first one.
    assert bodies[2]["messages"][0] == bodies[0]["messages"][0]


def _uncached(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _uncached(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_uncached(v) for v in value]
    return value


def test_a_server_tool_turns_summed_usage_is_not_the_context_size() -> None:
    from flue_nb.runtime.core.tokens import TokenCounter

    first = (RECORDED / "pydantic-ai-pause_turn_web_search_streaming_vcr-1.sse").read_bytes()
    paused, exc, _ = _replay_body(first)
    assert exc is None and paused is not None and paused.usage is not None
    assert paused.usage.input_tokens == 404_500
    used = TokenCounter().used_tokens([UserMessage("weather in San Francisco?"), paused], system="s")
    # Measured from what the next request holds, not the sum: the API counted 80,251 tokens
    # for it (2,479 of them its first request's tools and prompt, not replayed here).
    assert 70_000 < used < 90_000
