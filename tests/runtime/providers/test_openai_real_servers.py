"""OpenAI-compatible servers as they really are (issue 32.12, measured against llama.cpp's
server): no `"content": null` beside tool calls, `tool_choice` sent with tools, schemas without
limits a grammar builder expands, usage a server omits said as not reported, an answer cut at
`max_tokens` said so, and a loopback server that refuses connections failing at once."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

import flue_nb as flue
from flue_nb.models import ScriptedModel
from flue_nb.notebook.views.history import tokens_line
from flue_nb.runtime.core.loop import RunSettings
from flue_nb.runtime.errors import ProviderError
from flue_nb.runtime.events import Log
from flue_nb.runtime.messages import AssistantMessage, TextPart, ToolCall, ToolResultMessage, Usage, UserMessage
from flue_nb.runtime.providers.model import ModelRequest, ResponseDone
from flue_nb.runtime.providers.offline import Reply
from flue_nb.runtime.providers.openai import OpenAIModel
from flue_nb.runtime.sandbox.local import LocalSandbox
from flue_nb.runtime.tools import tools_of
from tests.openai_server import OpenAIServer, chat, text
from tests.provider_wires import collect as run


def model_for(server: OpenAIServer, **kwargs: Any) -> OpenAIModel:
    return OpenAIModel("qwen", base_url=server.base_url, context_window=8_192, **kwargs)


def _done(events: list[Any]) -> AssistantMessage:
    assert isinstance(events[-1], ResponseDone), events
    return events[-1].message


def test_an_assistant_turn_with_tool_calls_carries_no_null_content(openai_server) -> None:
    openai_server.enqueue(chat(text("ok")))
    history = [
        UserMessage("read it"),
        AssistantMessage([ToolCall("c1", "read", {"path": "a.txt"})], Usage(1, 1), "tool_use", "qwen"),
        ToolResultMessage("c1", "read", "hello"),
        AssistantMessage([TextPart("It says hello."), ToolCall("c2", "read", {"path": "b"})], None, "tool_use"),
        ToolResultMessage("c2", "read", "bye"),
    ]
    run(model_for(openai_server), ModelRequest("Be terse.", history))
    sent = openai_server.chat_requests[0].body["messages"]
    assistants = [m for m in sent if m["role"] == "assistant"]
    assert "content" not in assistants[0]  # llama.cpp's server answers `null` with HTTP 500
    assert assistants[1]["content"] == "It says hello."


def test_tools_go_with_tool_choice_auto_and_without_grammar_limits(openai_server, tmp_path) -> None:
    openai_server.enqueue(chat(text("ok")))
    specs = [t.spec() for t in tools_of(LocalSandbox(str(tmp_path)))]
    assert "maxLength" in json.dumps([s.input_schema for s in specs])  # the tools do check lengths
    run(model_for(openai_server), ModelRequest("", [UserMessage("hi")], specs))
    body = openai_server.chat_requests[0].body
    assert body["tool_choice"] == "auto"
    wire = json.dumps(body["tools"])
    assert "maxLength" not in wire and "minLength" not in wire
    grep = next(t for t in body["tools"] if t["function"]["name"] == "grep")
    assert "pattern" in grep["function"]["parameters"]["properties"]  # an argument's name stays


def test_no_tools_no_tool_choice(openai_server) -> None:
    openai_server.enqueue(chat(text("ok")))
    run(model_for(openai_server), ModelRequest("", [UserMessage("hi")], []))
    assert "tool_choice" not in openai_server.chat_requests[0].body


def test_a_stream_without_usage_is_not_reported_rather_than_zero(openai_server) -> None:
    openai_server.enqueue(chat(text("ok"), usage=None))
    message = _done(run(model_for(openai_server))[0])
    assert message.usage is None
    assert tokens_line(Usage(), 1) == "tokens: not reported by the model server"
    assert "0 in" not in tokens_line(Usage(), 1)


def test_finish_reason_length_is_a_max_tokens_stop_and_the_run_says_the_answer_was_cut(openai_server) -> None:
    openai_server.enqueue(chat(text("The answer is that the"), finish_reason="length"))
    assert _done(run(model_for(openai_server))[0]).stop_reason == "max_tokens"
    model = ScriptedModel([Reply("The answer is that the", stop_reason="max_tokens")])

    @flue.agent()
    def cut() -> str:
        flue.use_model(model)
        return "test"

    s = flue.init(cut, db=":memory:")
    notes: list[str] = []
    s.observe(lambda e: notes.append(e.message) if isinstance(e, Log) and e.kind == "answer_cut" else None)
    assert s.prompt("go", timeout=30) == "The answer is that the"
    assert len(notes) == 1 and "cut off" in notes[0] and "max_tokens" in notes[0]


def test_a_loopback_server_that_refuses_connections_fails_at_once_naming_its_url() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    model = OpenAIModel("qwen", base_url=f"http://127.0.0.1:{port}/v1", context_window=8_192)
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    @flue.agent()
    def local() -> str:
        flue.use_model(model)
        return "test"

    s = flue.init(local, db=":memory:", settings=RunSettings(sleep=sleep))
    with pytest.raises(ProviderError) as caught:
        s.prompt("hi", timeout=60)
    assert f"http://127.0.0.1:{port}/v1" in caught.value.message and "Check" in caught.value.message
    assert not caught.value.transient
    assert delays == [] and s.submissions()[0].attempts == 1  # ~40 tries over 8.5 minutes before
