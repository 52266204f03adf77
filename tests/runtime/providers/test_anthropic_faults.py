"""The Anthropic provider against hostile or broken servers (issue 12, points 2, 3, 10, 11), on
the real SDK and on plain httpx2, against the loopback Messages API: malformed SSE, hung servers and silent streams,
huge error bodies, numbers JSON cannot carry, and the key in use kept out of tool results."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import flue_nb as flue
from flue_nb.runtime.core.loop import RunSettings
from flue_nb.runtime.errors import ProviderError
from flue_nb.runtime.messages import UserMessage
from flue_nb.runtime.providers.anthropic import INVALID_INPUT_KEY, AnthropicModel
from flue_nb.runtime.providers.model import ModelRequest, ResponseDone, TextChunk, ToolSpec
from flue_nb.runtime.providers.streaming import IDLE_TIMEOUT
from tests.anthropic_server import AnthropicServer, error, stream, text, tool_use

READ = ToolSpec("read", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


# Every test here runs through the SDK and over plain httpx2 (conftest.transport).
pytestmark = pytest.mark.usefixtures("transport")


def run(model: AnthropicModel, tools: list[ToolSpec] | None = None) -> tuple[list[Any], BaseException | None]:
    events: list[Any] = []

    async def go() -> None:
        request = ModelRequest(system="Be terse.", messages=[UserMessage("hi")], tools=tools or [])
        async for event in model.stream(request):
            events.append(event)

    try:
        asyncio.run(go())
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return events, exc
    return events, None


def model_for(server: AnthropicServer, **kwargs: Any) -> AnthropicModel:
    return AnthropicModel("claude-sonnet-4-6", api_key="test", base_url=server.url, **kwargs)


def agent_on(server: AnthropicServer, tmp_path: Any, *, key: str = "test-key", tools: tuple[Any, ...] = ()) -> Any:
    model = AnthropicModel("claude-sonnet-4-6", api_key=key, base_url=server.url)

    @flue.agent
    def claude() -> str:
        flue.use_model(model)
        flue.use_sandbox(flue.local(str(tmp_path)))
        for t in tools:
            flue.use_tool(t)
        return "You are tested."

    return claude


# --- point 3: malformed streams ---------------------------------------------------------------

BAD_JSON = b"event: content_block_delta\ndata: {not json at all\n\n"
NOT_UTF8 = (
    b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
    b'"delta": {"type": "text_delta", "text": "caf\xe9 \xff"}}\n\n'
)


@pytest.mark.parametrize(("raw", "what"), [(BAD_JSON, "invalid JSON"), (NOT_UTF8, "not UTF-8")])
def test_a_malformed_sse_event_is_a_retryable_provider_error(server, raw, what) -> None:
    server.enqueue(stream(text("hello world"), raw_before={4: raw}))
    events, exc = run(model_for(server))
    assert isinstance(exc, ProviderError), exc
    assert exc.transient and exc.kind == "server"
    assert "malformed" in exc.message and what in exc.message
    assert not any(isinstance(e, ResponseDone) for e in events)


def test_a_body_that_does_not_decompress_is_a_retryable_provider_error(server) -> None:
    server.enqueue(stream(text("hello"), headers={"content-encoding": "gzip"}))
    _, exc = run(model_for(server))
    assert isinstance(exc, ProviderError), exc
    assert exc.transient and "malformed" in exc.message


def test_a_malformed_stream_is_retried_and_the_run_completes(server, tmp_path) -> None:
    server.enqueue(stream(text("broken"), raw_before={3: BAD_JSON}), stream(text("Complete.")))
    sleeps = Sleeps()
    s = flue.init(agent_on(server, tmp_path), db=str(tmp_path / "s.sqlite"), settings=RunSettings(sleep=sleeps))
    assert s.prompt("hi") == "Complete."
    assert len(server.requests) == 2 and len(sleeps.delays) == 1


def test_a_lone_surrogate_spelled_in_stream_json_arrives_escaped(server) -> None:
    raw = (
        b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
        b'"delta": {"type": "text_delta", "text": " odd \\ud800 text"}}\n\n'
    )
    server.enqueue(stream(text("start"), raw_before={4: raw}))
    events, exc = run(model_for(server))
    assert exc is None
    assert " odd \\ud800 text" in events[-1].message.text
    assert all(e.text.encode() for e in events if isinstance(e, TextChunk))


# --- point 10: bounded waits --------------------------------------------------------------------


def test_the_provider_bounds_the_sdks_600_s_wait(transport: str) -> None:
    made, _ = AnthropicModel("claude-sonnet-4-6", api_key="test")._transport()
    client = made.client if transport == "sdk" else made._client  # type: ignore[attr-defined]
    assert client.timeout.read == IDLE_TIMEOUT < 600
    assert client.timeout.connect is not None and client.timeout.connect <= 30


def test_a_server_that_does_not_answer_times_out_as_retryable(server) -> None:
    server.enqueue(stream(text("late"), delay=3.0))
    _, exc = run(model_for(server, request_timeout=0.3))
    assert isinstance(exc, ProviderError) and exc.kind == "timeout" and exc.transient
    assert "0.3 s" in exc.message


def test_a_stream_that_goes_silent_times_out_as_retryable(server) -> None:
    server.enqueue(stream(text("half of it"), stall_after=4, stall_seconds=3.0))
    events, exc = run(model_for(server, idle_timeout=0.3))
    assert isinstance(exc, ProviderError) and exc.kind == "timeout" and exc.transient
    assert any(isinstance(e, TextChunk) for e in events)  # it did stall mid-stream


def test_a_huge_error_body_is_capped_in_the_error_and_in_the_store(server, tmp_path) -> None:
    body = "x" * 2_000_000
    server.enqueue(error(400, "invalid_request_error", body))
    _, exc = run(model_for(server))
    assert isinstance(exc, ProviderError)
    assert len(exc.message) < 3_000 and "more characters" in exc.message
    server.enqueue(*[error(400, "invalid_request_error", body) for _ in range(10)])
    s = flue.init(agent_on(server, tmp_path), db=str(tmp_path / "s.sqlite"), settings=RunSettings(sleep=Sleeps()))
    with pytest.raises(flue.FlueError):
        s.prompt("hi")
    stored = s.submissions()[0].error
    assert stored is not None and len(json.dumps(stored)) < 5_000


# --- point 2: numbers JSON cannot carry -------------------------------------------------------


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_tool_input_with_a_number_json_cannot_carry_is_kept_as_invalid(server, number) -> None:
    raw = f'{{"path": "a.txt", "offset": {number}}}'
    server.enqueue(stream(tool_use("toolu_1", "read", {}, raw_json=raw), stop_reason="tool_use"))
    events, exc = run(model_for(server), tools=[READ])
    assert exc is None
    assert events[-1].message.tool_calls[0].input == {INVALID_INPUT_KEY: raw}


def test_1e999_from_the_model_comes_back_as_a_validation_result(server, tmp_path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    raw = '{"path": "a.txt", "offset": 1e999}'
    server.enqueue(
        stream(tool_use("toolu_1", "read", {}, raw_json=raw), stop_reason="tool_use"),
        stream(text("I will use a finite offset.")),
    )
    s = flue.init(agent_on(server, tmp_path), db=str(tmp_path / "s.sqlite"), settings=RunSettings(sleep=Sleeps()))
    assert s.prompt("read a.txt") == "I will use a finite offset."
    second = server.requests[1].body["messages"]
    result = next(b for m in second for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
    assert result["is_error"] is True and "Invalid input for tool `read`" in json.dumps(result["content"])
    assert "1e999" in json.dumps(result["content"]) and "field `offset`" in json.dumps(result["content"])


# --- point 11: the key in use never reaches a tool result ----------------------------------------


def test_the_key_in_use_is_redacted_from_tool_results(server, tmp_path) -> None:
    key = "sk-ant-test-0123456789abcdefghijklmnop"

    @flue.tool
    def leak() -> str:
        """Return something that holds the key, as `python` printing os.environ would."""
        return f"found it: {key}!"

    server.enqueue(
        stream(tool_use("toolu_1", "leak", {}), stop_reason="tool_use"),
        stream(text("Nothing to see.")),
    )
    db = tmp_path / "s.sqlite"
    s = flue.init(agent_on(server, tmp_path, key=key, tools=(leak,)), db=str(db), settings=RunSettings(sleep=Sleeps()))
    assert s.prompt("leak it") == "Nothing to see."
    sent = json.dumps(server.requests[1].body)
    assert key not in sent and "found it: [redacted:ANTHROPIC_API_KEY]!" in sent
    assert key.encode() not in db.read_bytes()


def test_a_loopback_server_that_refuses_connections_fails_at_once_naming_its_url() -> None:
    # Issue 32.12, as the OpenAI-compatible provider does: a local proxy or gateway that is not
    # running was retried with backoff for minutes before the cell failed.
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    url = f"http://127.0.0.1:{port}"
    model = AnthropicModel("claude-sonnet-4-6", api_key="test", base_url=url)
    _, exc = run(model)
    assert isinstance(exc, ProviderError) and not exc.transient
    assert url in exc.message and "ANTHROPIC_BASE_URL" in exc.message

    @flue.agent()
    def local() -> str:
        flue.use_model(model)
        return "test"

    sleeps = Sleeps()
    s = flue.init(local, db=":memory:", settings=RunSettings(sleep=sleeps))
    with pytest.raises(ProviderError):
        s.prompt("hi", timeout=60)
    assert sleeps.delays == [] and s.submissions()[0].attempts == 1
