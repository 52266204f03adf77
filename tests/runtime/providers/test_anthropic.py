"""The Anthropic provider, driven through the real SDK and over plain httpx2 (its cold-start
transport) against a loopback Messages API: every test runs on both."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from flue_nb.runtime.errors import (
    ConfigError,
    ContextOverflowError,
    ModelNotConfiguredError,
    ProviderError,
    ProviderHTTPError,
)
from flue_nb.runtime.messages import (
    AssistantMessage,
    Message,
    SignalMessage,
    SummaryMessage,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from flue_nb.runtime.providers import ALLOW_MODEL_REQUESTS_ENV, check_model_request, resolve_model
from flue_nb.runtime.providers._anthropic_http import API_VERSION
from flue_nb.runtime.providers._catalog import model_info
from flue_nb.runtime.providers.anthropic import INVALID_INPUT_KEY, AnthropicModel, to_wire_messages
from flue_nb.runtime.providers.model import (
    Model,
    ModelRequest,
    ResponseDone,
    StreamEvent,
    TextChunk,
    ThinkingChunk,
    ToolCallDelta,
    ToolSpec,
)
from tests.anthropic_server import (
    AnthropicServer,
    error,
    stream,
    text,
    thinking,
    tool_use,
    usage,
)

READ = ToolSpec("read", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})
BASH = ToolSpec("bash", "Run a command.", {"type": "object", "properties": {"command": {"type": "string"}}})


# Every test here runs through the SDK and over plain httpx2 (conftest.transport).
pytestmark = pytest.mark.usefixtures("transport")


def model_for(server: AnthropicServer, model_id: str = "claude-sonnet-4-6", **kwargs: Any) -> AnthropicModel:
    return AnthropicModel(model_id, api_key="test", base_url=server.url, **kwargs)


def ask(text_: str = "hi", **kwargs: Any) -> ModelRequest:
    return ModelRequest(system="You are terse.", messages=[UserMessage(text_)], **kwargs)


def run(model: Model, request: ModelRequest) -> tuple[list[StreamEvent], BaseException | None]:
    """All events the stream yielded, and the exception it ended with (if any)."""
    events: list[StreamEvent] = []

    async def go() -> None:
        async for event in model.stream(request):
            events.append(event)

    try:
        asyncio.run(go())
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return events, exc
    return events, None


def done(events: list[StreamEvent]) -> AssistantMessage:
    assert isinstance(events[-1], ResponseDone)
    assert sum(isinstance(e, ResponseDone) for e in events) == 1
    return events[-1].message


# --- streaming ---------------------------------------------------------------------------------


def test_streams_text_deltas_then_one_done(server: AnthropicServer) -> None:
    server.enqueue(stream(text("Hello there, world", chunks=3), model="claude-sonnet-4-6-20250929"))
    events, exc = run(model_for(server), ask())
    assert exc is None
    deltas = [e.text for e in events if isinstance(e, TextChunk)]
    assert len(deltas) == 3 and "".join(deltas) == "Hello there, world"
    msg = done(events)
    assert msg.text == "Hello there, world"
    assert msg.stop_reason == "end_turn"
    assert msg.model == "claude-sonnet-4-6-20250929"


def test_tool_input_is_assembled_from_json_deltas(server: AnthropicServer) -> None:
    args = {"command": "ls -la /tmp", "nested": {"n": [1, 2, 3]}, "unicode": "é ✓"}
    server.enqueue(
        stream(
            text("Let me look."),
            tool_use("toolu_1", "bash", args, chunks=5),
            stop_reason="tool_use",
        )
    )
    events, exc = run(model_for(server), ask(tools=[BASH]))
    assert exc is None
    assert [e for e in events if isinstance(e, ToolCallDelta)] == [ToolCallDelta("toolu_1", "bash")]
    msg = done(events)
    assert msg.stop_reason == "tool_use"
    assert msg.tool_calls == [ToolCall("toolu_1", "bash", args)]
    assert isinstance(msg.parts[0], TextPart)


def test_tool_call_without_input_gets_empty_dict(server: AnthropicServer) -> None:
    server.enqueue(stream(tool_use("toolu_1", "read", {}, chunks=1), stop_reason="tool_use"))
    events, exc = run(model_for(server), ask(tools=[READ]))
    assert exc is None
    assert done(events).tool_calls == [ToolCall("toolu_1", "read", {})]


def test_unparsable_tool_input_is_kept_raw_for_validation(
    server: AnthropicServer,
) -> None:
    server.enqueue(stream(tool_use("toolu_1", "bash", {}, raw_json='{"command": "ls'), stop_reason="max_tokens"))
    events, exc = run(model_for(server), ask(tools=[BASH]))
    assert exc is None
    assert done(events).tool_calls[0].input == {INVALID_INPUT_KEY: '{"command": "ls'}


def test_consumer_stopping_early_closes_the_stream(server: AnthropicServer) -> None:
    server.enqueue(stream(text("a long answer", chunks=5)), stream(text("next")))
    model = model_for(server)

    async def first_delta() -> StreamEvent:
        agen = model.stream(ask())
        assert isinstance(agen, AsyncGenerator)
        try:
            return await agen.__anext__()
        finally:
            await agen.aclose()

    assert isinstance(asyncio.run(first_delta()), TextChunk)
    _, exc = run(model, ask())  # the same model still works afterwards
    assert exc is None


def test_thinking_and_signature_round_trip(server: AnthropicServer) -> None:
    server.enqueue(
        stream(
            thinking("I should read it.", signature="sig-abc"),
            tool_use("toolu_1", "read", {"path": "a"}),
        ),
        stream(text("done")),
    )
    model = model_for(server, thinking={"type": "enabled", "budget_tokens": 2000})
    events, exc = run(model, ask(tools=[READ]))
    assert exc is None
    assert "".join(e.thinking for e in events if isinstance(e, ThinkingChunk)) == "I should read it."
    first = done(events)
    assert first.parts[0] == ThinkingPart("I should read it.", "sig-abc")

    history: list[Message] = [UserMessage("hi"), first, ToolResultMessage("toolu_1", "read", "x")]
    _, exc = run(model, ModelRequest(system="s", messages=history, tools=[READ]))
    assert exc is None
    first_body, second_body = (r.body for r in server.requests)
    assert first_body["thinking"] == {"type": "enabled", "budget_tokens": 2000}
    sent = second_body["messages"][1]
    assert sent["role"] == "assistant"
    assert sent["content"][0] == {
        "type": "thinking",
        "thinking": "I should read it.",
        "signature": "sig-abc",
    }
    assert sent["content"][1] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "read",
        "input": {"path": "a"},
    }


def test_usage_includes_cache_read_and_write(server: AnthropicServer) -> None:
    server.enqueue(stream(text("ok"), usage=usage(input=12, output=34, cache_read=500, cache_write=70)))
    events, _ = run(model_for(server), ask())
    # message_start says output 1; message_delta's cumulative count must win.
    assert done(events).usage == Usage(12, 34, 500, 70)


# --- the request on the wire ---------------------------------------------------------------------


def test_request_carries_cache_control_on_system_and_last_tool(
    server: AnthropicServer,
) -> None:
    server.enqueue(stream(text("ok")))
    run(model_for(server), ask(tools=[READ, BASH]))
    (req,) = server.requests
    assert req.path == "/v1/messages"
    assert req.headers["authorization"] == "Bearer test"
    body = req.body
    assert body["stream"] is True
    assert body["model"] == "claude-sonnet-4-6"
    assert body["max_tokens"] == model_info("claude-sonnet-4-6").max_output_tokens
    assert body["system"] == [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][1] == {
        "name": "bash",
        "description": "Run a command.",
        "input_schema": BASH.input_schema,
        "cache_control": {"type": "ephemeral"},
    }


def test_max_tokens_prefers_request_then_constructor(server: AnthropicServer) -> None:
    server.enqueue(stream(text("a")), stream(text("b")))
    model = model_for(server, max_tokens=1234)
    run(model, ask())
    run(model, ask(max_tokens=99))
    assert [r.body["max_tokens"] for r in server.requests] == [1234, 99]


def test_user_items_merge_with_tool_results_first() -> None:
    call = ToolCall("toolu_1", "read", {"path": "x"})
    wire = to_wire_messages(
        [
            UserMessage("start"),
            AssistantMessage([ThinkingPart("unsigned"), TextPart(""), call]),
            SignalMessage("resources", "tool `grep` mounted"),
            ToolResultMessage("toolu_1", "read", "boom", is_error=True),
            AssistantMessage([ThinkingPart("cut off"), TextPart("")], aborted=True),  # nothing to send
            SummaryMessage("earlier work"),
            UserMessage("   "),
        ]
    )
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    assert wire[1]["content"] == [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "x"}}]
    merged = wire[2]["content"]
    assert merged[0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "boom",
        "is_error": True,
    }
    assert merged[1] == {
        "type": "text",
        "text": '<signal type="resources">\ntool `grep` mounted\n</signal>',
    }
    assert merged[2]["text"] == SummaryMessage("earlier work").render()
    assert len(merged) == 3
    # The newest block is the rolling cache breakpoint.
    assert merged[2]["cache_control"] == {"type": "ephemeral"}


def test_mapped_messages_reach_the_server(server: AnthropicServer) -> None:
    server.enqueue(stream(text("ok")))
    history: list[Message] = [
        UserMessage("read x"),
        AssistantMessage([ToolCall("toolu_1", "read", {"path": "x"})]),
        SignalMessage("info", "note"),
        ToolResultMessage("toolu_1", "read", "data"),
    ]
    _, exc = run(model_for(server), ModelRequest(system="s", messages=history))
    assert exc is None
    last = server.requests[0].body["messages"][-1]
    assert [b["type"] for b in last["content"]] == ["tool_result", "text"]
    assert last["content"][0]["is_error"] is False


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_type", "kind"),
    [
        (429, "rate_limit_error", "rate_limit"),
        (529, "overloaded_error", "overloaded"),
        (500, "api_error", "server"),
        (503, "api_error", "server"),
    ],
)
def test_transient_http_errors_are_classified_and_not_retried_by_the_sdk(
    server: AnthropicServer, status: int, error_type: str, kind: str
) -> None:
    # `x-should-retry: true` makes the SDK retry whenever it is allowed to; it must not be.
    server.enqueue(error(status, error_type, "busy", retry_after="0", x_should_retry="true"))
    server.enqueue(stream(text("should never be served")))
    events, exc = run(model_for(server), ask())
    assert events == []
    assert isinstance(exc, ProviderHTTPError)
    assert (exc.kind, exc.status, exc.transient) == (kind, status, True)
    assert exc.details["error_type"] == error_type
    assert exc.details["retry_after"] == 0.0
    assert exc.__cause__ is not None
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("error_type", "kind"),
    [
        ("overloaded_error", "overloaded"),
        ("rate_limit_error", "rate_limit"),
        ("api_error", "server"),
    ],
)
def test_error_event_mid_stream_is_classified_by_body_type(server: AnthropicServer, error_type: str, kind: str) -> None:
    server.enqueue(stream(text("partial answer"), error_after=4, error_type=error_type))
    events, exc = run(model_for(server), ask())
    assert isinstance(exc, ProviderError)
    assert (exc.kind, exc.transient) == (kind, True)
    assert exc.details["error_type"] == error_type
    assert not any(isinstance(e, ResponseDone) for e in events)
    assert any(isinstance(e, TextChunk) for e in events)  # it did fail part-way


@pytest.mark.parametrize("cut_mode", ["eof", "chunk"])
def test_stream_cut_off_half_way_is_a_connection_error(server: AnthropicServer, cut_mode: str) -> None:
    server.enqueue(
        stream(
            text("half of it"),
            tool_use("toolu_1", "bash", {"command": "rm -rf build"}),
            cut_after=8,
            cut_mode=cut_mode,
        )
    )
    events, exc = run(model_for(server), ask())
    assert isinstance(exc, ProviderError)
    assert exc.kind == "connection" and exc.transient
    assert not any(isinstance(e, ResponseDone) for e in events)
    assert any(isinstance(e, TextChunk) for e in events)  # it was cut, not refused
    # A broken chunk is a transport error; a clean early close shows as a missing message_stop.
    assert (exc.__cause__ is not None) == (cut_mode == "chunk")


def test_prompt_too_long_is_context_overflow(server: AnthropicServer) -> None:
    server.enqueue(error(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"))
    _, exc = run(model_for(server), ask())
    assert isinstance(exc, ContextOverflowError)
    assert exc.kind == "context_overflow" and not exc.transient
    assert "210000" in exc.message


def test_other_400_is_a_bad_request(server: AnthropicServer) -> None:
    server.enqueue(error(400, "invalid_request_error", "tools.0.name: String should match pattern"))
    _, exc = run(model_for(server), ask())
    assert isinstance(exc, ProviderHTTPError) and not isinstance(exc, ContextOverflowError)
    assert (exc.kind, exc.status, exc.transient) == ("bad_request", 400, False)


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failures_say_which_key_to_check(server: AnthropicServer, status: int) -> None:
    server.enqueue(error(status, "authentication_error", "invalid x-api-key"))
    _, exc = run(model_for(server), ask())
    assert isinstance(exc, ProviderHTTPError)
    assert (exc.kind, exc.status, exc.transient) == ("auth", status, False)
    assert "ANTHROPIC_API_KEY" in exc.message
    assert len(server.requests) == 1


def test_refused_connection_is_a_connection_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = AnthropicModel("claude-sonnet-4-6", api_key="test", base_url=f"http://127.0.0.1:{port}")
    _, exc = run(model, ask())
    assert isinstance(exc, ProviderError) and not isinstance(exc, ProviderHTTPError)
    assert exc.kind == "connection"


def test_slow_server_is_a_timeout(server: AnthropicServer) -> None:
    import anthropic

    server.enqueue(stream(text("late"), delay=1.0))
    client = anthropic.AsyncAnthropic(api_key="test", base_url=server.url, timeout=0.2, max_retries=0)
    _, exc = run(AnthropicModel("claude-sonnet-4-6", client=client), ask())
    assert isinstance(exc, ProviderError)
    assert exc.kind == "timeout"


def test_cancellation_propagates_and_is_not_a_provider_error(server: AnthropicServer) -> None:
    server.enqueue(stream(text("late"), delay=1.0))
    model = model_for(server)

    async def cancel_mid_request() -> None:
        task = asyncio.ensure_future(run_async(model))
        await asyncio.sleep(0.2)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancel_mid_request())


async def run_async(model: Model) -> None:
    async for _ in model.stream(ask()):
        pass


# --- configuration -------------------------------------------------------------------------------


def test_no_key_raises_model_not_configured_on_first_stream(
    server: AnthropicServer,
) -> None:
    model = AnthropicModel("claude-sonnet-4-6", base_url=server.url)  # building it is fine
    _, exc = run(model, ask())
    assert isinstance(exc, ModelNotConfiguredError)
    assert exc.type == "model_not_configured"
    assert "ANTHROPIC_API_KEY" in exc.message and "ScriptedModel" in exc.message
    assert server.requests == []


def test_environment_supplies_key_and_base_url(server: AnthropicServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    server.enqueue(stream(text("ok")), stream(text("ok")))
    _, exc = run(AnthropicModel("claude-haiku-4-5"), ask())
    assert exc is None
    _, exc = run(AnthropicModel("claude-haiku-4-5", api_key="explicit"), ask())
    assert exc is None
    assert [r.headers["authorization"] for r in server.requests] == [
        "Bearer from-env",
        "Bearer explicit",
    ]


def test_explicit_base_url_wins_over_environment(server: AnthropicServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")  # discard port: would fail
    server.enqueue(stream(text("ok")))
    _, exc = run(model_for(server), ask())
    assert exc is None and len(server.requests) == 1


def test_both_transports_send_the_request_the_sdk_sends(server: AnthropicServer, transport: str) -> None:
    import anthropic._constants

    server.enqueue(stream(text("ok")))
    model = AnthropicModel("claude-sonnet-4-6", api_key="k-1", base_url=server.url + "/proxy/")
    request = ask(tools=[BASH])
    _, exc = run(model, request)
    assert exc is None
    sent = server.requests[0]
    assert (sent.method, sent.path) == ("POST", "/proxy/v1/messages")
    assert sent.body == {**model.request_params(request), "stream": True}
    assert sent.headers["authorization"] == "Bearer k-1"
    assert sent.headers["anthropic-version"] == API_VERSION == anthropic._constants.ANTHROPIC_API_VERSION
    assert sent.headers["content-type"] == "application/json"
    agent = sent.headers["user-agent"]
    assert "Anthropic/Python" in agent if transport == "sdk" else agent.startswith("flue-nb")


def test_an_auth_token_is_sent_as_a_bearer_token(server: AnthropicServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "tok-1")
    server.enqueue(stream(text("ok")))
    _, exc = run(AnthropicModel("claude-sonnet-4-6", base_url=server.url), ask())
    assert exc is None and server.requests[0].headers["authorization"] == "Bearer tok-1"


@pytest.mark.parametrize("base_url", [None, "https://models.example.invalid", "http://gateway.invalid:8080"])
def test_requests_off_refuses_non_loopback_hosts_before_sending(base_url: str | None) -> None:
    model = AnthropicModel("claude-haiku-4-5", api_key="k", base_url=base_url)
    _, exc = run(model, ask())
    assert isinstance(exc, ConfigError) and not isinstance(exc, ProviderError)
    assert ALLOW_MODEL_REQUESTS_ENV in exc.message


def test_requests_off_also_guards_an_injected_client() -> None:
    import anthropic

    client = anthropic.AsyncAnthropic(api_key="k", base_url="https://models.example.invalid")
    _, exc = run(AnthropicModel("claude-haiku-4-5", client=client), ask())
    assert isinstance(exc, ConfigError)


def test_loopback_hosts_are_always_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    for host in ("127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"):
        check_model_request(host, provider="Anthropic")
    monkeypatch.delenv(ALLOW_MODEL_REQUESTS_ENV)
    check_model_request("models.example.invalid", provider="Anthropic")  # on by default


def test_model_info_matches_families_and_dated_ids() -> None:
    assert model_for_info("claude-opus-4-1-20250805") == (200_000, 32_000)
    assert model_for_info("claude-sonnet-4-5-20250929") == (200_000, 64_000)
    assert model_for_info("claude-3-5-haiku-latest") == (200_000, 8_192)
    assert model_for_info("claude-3-opus-20240229") == (200_000, 4_096)
    assert model_for_info("claude-opus-4-10") == model_for_info("claude-opus-4")  # not "4-1"
    assert model_for_info("some-future-model") == (200_000, 32_000)
    for current in ("claude-sonnet-5-5", "claude-sonnet-5", "claude-opus-5-5", "claude-haiku-5-5", "claude-fable-5-1"):
        assert model_for_info(current) == (1_000_000, 128_000), current
    assert model_for_info("claude-opus-4-8") == (1_000_000, 128_000)
    assert model_for_info("claude-haiku-4-5") == (200_000, 64_000)  # not claimed by "claude-haiku-5"
    assert AnthropicModel("claude-haiku-4-5-20251001").info.id == "claude-haiku-4-5-20251001"


def model_for_info(model_id: str) -> tuple[int, int]:
    info = model_info(model_id)
    return info.context_window, info.max_output_tokens


def test_resolve_model_accepts_anthropic_specs_and_models() -> None:
    model = resolve_model("anthropic/claude-sonnet-4-6", api_key="k", max_tokens=10)
    assert isinstance(model, AnthropicModel) and model.model_id == "claude-sonnet-4-6"
    assert isinstance(model, Model)
    assert resolve_model(model) is model


@pytest.mark.parametrize("spec", ["claude-sonnet-4-6", "mistral/large", "anthropic/", "openai:", "", 42])
def test_resolve_model_rejects_other_specs_naming_the_accepted_forms(spec: Any) -> None:
    with pytest.raises(ConfigError, match="anthropic/<model-id>"):
        resolve_model(spec)


def test_resolve_model_rejects_options_for_a_ready_model() -> None:
    with pytest.raises(ConfigError, match="api_key"):
        resolve_model(AnthropicModel("claude-sonnet-4-6"), api_key="k")


def test_importing_providers_does_not_import_anthropic() -> None:
    code = (
        "import sys, json, flue_nb.runtime.providers\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('anthropic', 'httpx2')]\n"
        "print(json.dumps(sorted(heavy)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
