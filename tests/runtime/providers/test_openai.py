"""The OpenAI-compatible provider on the real `openai` SDK against a loopback chat-completions
server speaking the real chunk format, with the quirks real servers have (issue 23, points 1, 5)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from typing import Any

import pytest

from flue_nb.runtime.errors import ContextOverflowError, ModelNotConfiguredError, ProviderError, ProviderHTTPError
from flue_nb.runtime.messages import (
    AssistantMessage,
    ImagePart,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from flue_nb.runtime.providers.model import (
    ModelRequest,
    ResponseDone,
    TextChunk,
    ThinkingChunk,
    ToolCallDelta,
)
from flue_nb.runtime.providers.openai import OpenAIModel
from flue_nb.runtime.text import INVALID_INPUT_KEY
from tests.openai_server import OpenAIServer, chat, error, overflow, reasoning, text, tool_call
from tests.provider_wires import READ
from tests.provider_wires import collect as run


def model_for(server: OpenAIServer, name: str = "gpt-4o", **kwargs: Any) -> OpenAIModel:
    return OpenAIModel(name, base_url=server.base_url, api_key="test-key", **kwargs)


def done(events: list[Any]) -> AssistantMessage:
    assert isinstance(events[-1], ResponseDone), events
    return events[-1].message


# --- point 1: streaming ------------------------------------------------------------------------


def test_text_streams_as_deltas_then_one_done_with_usage_from_the_last_chunk(openai_server) -> None:
    openai_server.enqueue(chat(text("Hello there", chunks=3), usage={"prompt": 120, "completion": 7, "cached": 100}))
    events, exc = run(model_for(openai_server))
    assert exc is None
    assert "".join(e.text for e in events if isinstance(e, TextChunk)) == "Hello there"
    message = done(events)
    assert message.text == "Hello there" and message.stop_reason == "end_turn"
    # Cached prompt tokens are counted apart, as Anthropic's are: 20 uncached + 100 cached.
    assert (message.usage.input_tokens, message.usage.cache_read_tokens, message.usage.output_tokens) == (20, 100, 7)
    assert message.usage.total == 127
    body = openai_server.chat_requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_the_request_has_the_system_message_tools_and_the_output_cap(openai_server) -> None:
    openai_server.enqueue(chat(text("ok")))
    run(model_for(openai_server, max_output_tokens=1234))
    body = openai_server.chat_requests[0].body
    assert body["messages"][0] == {"role": "system", "content": "Be terse."}
    assert body["messages"][1] == {"role": "user", "content": "hi"}
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "read", "description": "Read a file.", "parameters": READ.input_schema},
        }
    ]
    assert body["max_tokens"] == 1234  # a compatible server's name for it
    assert openai_server.chat_requests[0].headers["authorization"] == "Bearer test-key"


@pytest.mark.parametrize(
    "cuts", [(), (1,), (2, 3, 4), (9, 10, 11, 12, 13)], ids=["every-5", "after-brace", "inside-key", "inside-value"]
)
def test_tool_call_arguments_split_anywhere_are_parsed_once_at_the_end(openai_server, cuts) -> None:
    openai_server.enqueue(chat(tool_call("call_1", "read", {"path": "a b/ü.txt"}, cuts=cuts)))
    events, exc = run(model_for(openai_server))
    assert exc is None
    assert [e for e in events if isinstance(e, ToolCallDelta)] == [ToolCallDelta("call_1", "read")]
    message = done(events)
    assert message.tool_calls == [ToolCall("call_1", "read", {"path": "a b/ü.txt"})]
    assert message.stop_reason == "tool_use"


def test_parallel_tool_calls_are_assembled_by_index(openai_server) -> None:
    openai_server.enqueue(
        chat(text("Two reads."), tool_call("call_a", "read", {"path": "a"}), tool_call("call_b", "read", {"path": "b"}))
    )
    message = done(run(model_for(openai_server))[0])
    assert message.text == "Two reads."
    assert [(c.id, c.input) for c in message.tool_calls] == [("call_a", {"path": "a"}), ("call_b", {"path": "b"})]


def test_tool_calls_without_ids_get_unique_ones(openai_server) -> None:
    openai_server.enqueue(
        chat(tool_call("", "read", {"path": "a"}), tool_call("", "read", {"path": "b"}), ids=False),
        chat(tool_call("", "read", {"path": "c"}), ids=False),
    )
    first = done(run(model_for(openai_server))[0]).tool_calls
    second = done(run(model_for(openai_server))[0]).tool_calls
    ids = [c.id for c in first + second]
    assert all(ids) and len(set(ids)) == 3
    assert [c.input["path"] for c in first + second] == ["a", "b", "c"]


def test_ids_and_names_repeated_in_every_fragment_are_one_call(openai_server) -> None:
    openai_server.enqueue(chat(tool_call("call_9", "read", {"path": "long/path/name.txt"}), repeat_ids=True))
    events, _ = run(model_for(openai_server))
    assert [e.name for e in events if isinstance(e, ToolCallDelta)] == ["read"]
    assert done(events).tool_calls == [ToolCall("call_9", "read", {"path": "long/path/name.txt"})]


def test_broken_argument_json_is_kept_raw_for_validation_and_sent_back_as_it_was(openai_server) -> None:
    openai_server.enqueue(chat(tool_call("call_1", "read", raw='{"path": "a.txt"')), chat(text("ok")))
    message = done(run(model_for(openai_server))[0])
    assert message.tool_calls[0].input == {INVALID_INPUT_KEY: '{"path": "a.txt"'}
    result = ToolResultMessage("call_1", "read", "Invalid input", is_error=True)
    run(model_for(openai_server), ModelRequest("s", [UserMessage("hi"), message, result]))
    sent = openai_server.chat_requests[1].body["messages"]
    assert sent[2]["tool_calls"][0]["function"]["arguments"] == '{"path": "a.txt"'
    assert sent[3] == {"role": "tool", "tool_call_id": "call_1", "content": "Invalid input"}


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_streams_as_thinking_not_as_the_answer(openai_server, field) -> None:
    openai_server.enqueue(chat(reasoning("Let me think.", field=field), text("42")))
    events, exc = run(model_for(openai_server))
    assert exc is None
    assert "".join(e.thinking for e in events if isinstance(e, ThinkingChunk)) == "Let me think."
    message = done(events)
    assert message.text == "42"
    assert message.parts == [ThinkingPart("Let me think."), TextPart("42")]


@pytest.mark.parametrize(
    ("finish", "stop"),
    [("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "refusal"), ("tool_calls", "tool_use")],
)
def test_finish_reason_maps_to_our_stop_reasons(openai_server, finish, stop) -> None:
    openai_server.enqueue(chat(text("x"), finish_reason=finish))
    assert done(run(model_for(openai_server))[0]).stop_reason == stop


def test_a_server_that_sends_no_usage_leaves_usage_unreported(openai_server) -> None:
    openai_server.enqueue(chat(text("hi"), usage=None))
    message = done(run(model_for(openai_server))[0])
    assert message.usage is None  # not "0 in, 0 out": the runtime counts the window itself (contract 13.3)


def test_a_server_that_ignores_include_usage_and_reports_on_the_finish_chunk(openai_server) -> None:
    openai_server.enqueue(chat(text("hi"), usage_mode="with_finish", usage={"prompt": 50, "completion": 3}))
    message = done(run(model_for(openai_server))[0])
    assert (message.usage.input_tokens, message.usage.output_tokens) == (50, 3)


def test_a_stream_without_done_marker_still_completes(openai_server) -> None:
    openai_server.enqueue(chat(text("hi"), done=False))
    assert done(run(model_for(openai_server))[0]).text == "hi"


def test_the_response_model_names_the_provider(openai_server) -> None:
    openai_server.enqueue(chat(text("hi"), model="llama3.1:8b"))
    message = done(run(model_for(openai_server, "llama3.1:8b", context_window=8_000))[0])
    assert message.model == "127.0.0.1/llama3.1:8b"


# --- messages out ------------------------------------------------------------------------------


PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def _figure() -> ImagePart:
    return ImagePart("image/png", "ab" * 32, 1, 1, "figure 1", data=PNG)


def test_history_maps_to_user_assistant_tool_messages_with_images_after_the_results(openai_server) -> None:
    history = [
        UserMessage("plot it"),
        AssistantMessage([TextPart("Plotting."), ToolCall("call_1", "python", {"code": "plot()"})]),
        ToolResultMessage("call_1", "python", "drew a figure", images=[_figure()]),
        UserMessage("and?"),
    ]
    openai_server.enqueue(chat(text("ok")))
    run(model_for(openai_server, "gpt-4o"), ModelRequest("sys", history))
    sent = openai_server.chat_requests[0].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "user"]
    assert sent[2]["content"] == "Plotting." and sent[2]["tool_calls"][0]["function"] == {
        "name": "python",
        "arguments": '{"code": "plot()"}',
    }
    assert sent[3] == {"role": "tool", "tool_call_id": "call_1", "content": "drew a figure"}
    parts = sent[4]["content"]
    assert parts[0]["text"].startswith("Images from the `python` call call_1")
    assert parts[1]["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert parts[2] == {"type": "text", "text": "and?"}


def test_a_model_without_vision_gets_a_note_instead_of_the_image(openai_server) -> None:
    openai_server.enqueue(chat(text("ok")), chat(text("ok")))
    request = ModelRequest("sys", [UserMessage("look", images=[_figure()])])
    run(model_for(openai_server, "my-local-model", context_window=32_000), request)
    run(model_for(openai_server, "my-local-model", context_window=32_000, vision=True), request)
    noted, sent = (r.body["messages"][1]["content"] for r in openai_server.chat_requests)
    assert "image_url" not in json.dumps(noted) and "does not take images" in json.dumps(noted)
    assert sent[1]["type"] == "image_url"


# --- point 5: errors on the wire ------------------------------------------------------------------


def test_429_with_retry_after_is_a_retryable_rate_limit(openai_server) -> None:
    openai_server.enqueue(
        error(429, "Rate limit reached", type="requests", code="rate_limit_exceeded", retry_after="7")
    )
    _, exc = run(model_for(openai_server))
    assert isinstance(exc, ProviderHTTPError) and exc.kind == "rate_limit" and exc.transient
    assert exc.details["retry_after"] == 7.0 and len(openai_server.chat_requests) == 1  # no SDK retry


def test_insufficient_quota_is_not_retried(openai_server) -> None:
    openai_server.enqueue(
        error(429, "You exceeded your current quota", type="insufficient_quota", code="insufficient_quota")
    )
    _, exc = run(model_for(openai_server))
    assert isinstance(exc, ProviderError) and not exc.transient and "billing" in exc.message


@pytest.mark.parametrize("server", ["openai", "vllm", "vllm-new", "llama.cpp"])
def test_context_length_400_in_each_servers_words_is_context_overflow(openai_server, server) -> None:
    openai_server.enqueue(overflow(server))
    _, exc = run(model_for(openai_server))
    assert isinstance(exc, ContextOverflowError), exc
    assert exc.kind == "context_overflow" and not exc.transient


@pytest.mark.parametrize(("status", "kind"), [(500, "server"), (502, "server"), (503, "overloaded")])
def test_server_errors_are_transient(openai_server, status, kind) -> None:
    openai_server.enqueue(error(status, "boom"))
    _, exc = run(model_for(openai_server))
    assert isinstance(exc, ProviderHTTPError) and exc.kind == kind and exc.transient


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failures_say_which_key_to_check(openai_server, status) -> None:
    openai_server.enqueue(error(status, "Incorrect API key provided", type="invalid_request_error"))
    _, exc = run(model_for(openai_server))
    assert isinstance(exc, ProviderHTTPError) and exc.kind == "auth" and "OPENAI_API_KEY" in exc.message


def test_other_400_is_a_bad_request_and_404_names_the_model(openai_server) -> None:
    openai_server.enqueue(error(400, "Invalid schema", type="invalid_request_error"), error(404, "no such model"))
    _, bad = run(model_for(openai_server))
    _, missing = run(model_for(openai_server))
    assert isinstance(bad, ProviderHTTPError) and bad.kind == "bad_request" and not bad.transient
    assert isinstance(missing, ProviderHTTPError) and "`gpt-4o`" in missing.message and "model name" in missing.message


def test_an_error_object_mid_stream_is_a_transient_server_error(openai_server) -> None:
    openai_server.enqueue(chat(text("half an answer", chunks=4), error_after=3))
    events, exc = run(model_for(openai_server))
    assert any(isinstance(e, TextChunk) for e in events) and not any(isinstance(e, ResponseDone) for e in events)
    assert isinstance(exc, ProviderError) and exc.kind == "server" and exc.transient
    assert exc.details["mid_stream"] is True and "engine failed" in exc.message


def test_a_stream_cut_off_before_finish_is_a_connection_error(openai_server) -> None:
    openai_server.enqueue(chat(tool_call("call_1", "read", {"path": "a.txt"}), cut_after=3))
    events, exc = run(model_for(openai_server))
    assert isinstance(exc, ProviderError) and exc.kind == "connection" and exc.transient
    assert not any(isinstance(e, ResponseDone) for e in events)


def test_a_slow_server_is_a_timeout(openai_server) -> None:
    openai_server.enqueue(chat(text("late"), delay=2.0))
    _, exc = run(model_for(openai_server, request_timeout=0.3))
    assert isinstance(exc, ProviderError) and exc.kind == "timeout" and exc.transient


def test_a_refused_connection_is_a_connection_error() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _, exc = run(OpenAIModel("gpt-4o", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", context_window=8000))
    assert isinstance(exc, ProviderError) and exc.kind == "connection"


# --- keys, settings, imports ---------------------------------------------------------------------


def test_no_key_for_openai_itself_is_model_not_configured(monkeypatch) -> None:
    monkeypatch.setenv("FLUE_ALLOW_MODEL_REQUESTS", "1")  # the key check comes before any request
    _, exc = run(OpenAIModel("gpt-4o"))
    assert isinstance(exc, ModelNotConfiguredError) and "OPENAI_API_KEY" in exc.message


def test_a_keyless_local_server_works_and_the_environment_names_it(openai_server, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    openai_server.enqueue(chat(text("local")))
    events, exc = run(OpenAIModel("llama3.1:8b", context_window=8_000))
    assert exc is None and done(events).text == "local"
    assert openai_server.chat_requests[0].headers["authorization"] == "Bearer none"


def test_the_environment_key_is_sent_and_redacted(openai_server, monkeypatch) -> None:
    from flue_nb.runtime.redact import redact

    key = "sk-proj-test-0123456789abcdefghijkl"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    openai_server.enqueue(chat(text("ok")))
    run(OpenAIModel("gpt-4o", base_url=openai_server.base_url))
    assert openai_server.chat_requests[0].headers["authorization"] == f"Bearer {key}"
    assert key not in redact(f"printed {key}")


def test_requests_off_refuses_openai_itself_before_sending(monkeypatch) -> None:
    monkeypatch.setenv("FLUE_ALLOW_MODEL_REQUESTS", "0")
    _, exc = run(OpenAIModel("gpt-4o", api_key="k"))
    from urllib.parse import urlsplit

    from flue_nb.runtime.providers.openai import OPENAI_BASE_URL

    assert exc is not None and str(urlsplit(OPENAI_BASE_URL).hostname) in str(exc)


def test_importing_the_provider_does_not_import_the_sdk() -> None:
    code = (
        "import sys, json, flue_nb\n"
        "from flue_nb.models import OpenAIModel\n"
        "from flue_nb.runtime.providers import resolve_model\n"
        "resolve_model('openai/gpt-4o')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'openai')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_without_the_sdk_the_error_names_the_extra(monkeypatch) -> None:
    import builtins

    real = builtins.__import__

    def no_openai(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "openai" or name.startswith("openai."):
            raise ImportError("No module named 'openai'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_openai)
    _, exc = run(OpenAIModel("m", base_url="http://127.0.0.1:9/v1", context_window=8000))
    assert isinstance(exc, ModelNotConfiguredError) and "flue_nb[openai]" in exc.message


def test_the_warm_up_loads_the_openai_sdk_for_an_openai_setting_only() -> None:
    code = (
        "import sys\n"
        "from flue_nb.runtime.warm import warm\n"
        "warm(anthropic=False, openai=True)\n"
        "print('openai' in sys.modules, 'anthropic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]
