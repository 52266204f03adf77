"""The OpenAI-compatible provider says what happened (issue 32.9): a 200 answer that is not a
stream (a proxy's HTML page, a server that ignores `stream: true`) is a final error naming what
came back; two tool calls sharing one id in a response get ids of their own; and the error texts
read as sentences (no "The the server")."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import flue_nb as flue
from flue_nb.runtime.core.loop import RunSettings
from flue_nb.runtime.errors import ProviderError
from flue_nb.runtime.messages import ToolCall, UserMessage
from flue_nb.runtime.providers.model import ModelRequest, ResponseDone
from flue_nb.runtime.providers.openai import OpenAIModel
from tests.openai_server import OpenAIServer, RawReply, chat, error, overflow, text, tool_call
from tests.provider_wires import READ, Sleeps
from tests.provider_wires import collect as run

HTML = b"<!DOCTYPE html><html><head><title>Sign in - Corporate Proxy</title></head><body>Please sign in.</body></html>"
COMPLETION = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "qwen",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."}, "finish_reason": "stop"}],
    }
).encode()


def model_for(server: OpenAIServer, **kwargs: Any) -> OpenAIModel:
    return OpenAIModel("qwen", base_url=server.base_url, context_window=8_192, **kwargs)


@pytest.mark.parametrize(
    ("body", "content_type", "shown"),
    [(HTML, "text/html; charset=utf-8", "Corporate Proxy"), (COMPLETION, "application/json", "chat.completion")],
    ids=["html", "json"],
)
def test_a_200_answer_that_is_not_a_stream_is_a_final_error_naming_what_came_back(
    openai_server, body: bytes, content_type: str, shown: str
) -> None:
    openai_server.enqueue(RawReply(body, content_type))
    events, err = run(model_for(openai_server))
    assert events == [] and isinstance(err, ProviderError)
    assert content_type.split(";")[0] in err.message and shown in err.message
    assert openai_server.base_url in err.message
    assert "ended before" not in err.message
    assert not err.transient


def test_a_proxy_page_fails_the_submission_at_once(openai_server) -> None:
    # Before: "stream ended before a finish_reason", retried 8 times over ~36 s.
    for _ in range(9):
        openai_server.enqueue(RawReply(HTML, "text/html"))
    model = model_for(openai_server)
    sleeps = Sleeps()

    @flue.agent()
    def local() -> str:
        flue.use_model(model)
        return "test"

    s = flue.init(local, db=":memory:", settings=RunSettings(sleep=sleeps))
    with pytest.raises(ProviderError) as caught:
        s.prompt("hi", timeout=60)
    assert "text/html" in caught.value.message
    assert sleeps.delays == [] and s.submissions()[0].attempts == 1
    assert len(openai_server.chat_requests) == 1


def test_a_stream_with_a_wrong_content_type_still_streams(openai_server) -> None:
    # Only what came back decides: an SSE body under another content-type is read as a stream.
    body = (
        b'data: {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "qwen", "choices": '
        b'[{"index": 0, "delta": {"content": "Hi."}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
    )
    openai_server.enqueue(RawReply(body, "application/json"))
    events, err = run(model_for(openai_server))
    assert err is None and isinstance(events[-1], ResponseDone)
    assert events[-1].message.text == "Hi."


def test_two_tool_calls_sharing_an_id_get_ids_of_their_own(openai_server) -> None:
    openai_server.enqueue(
        chat(tool_call("call_0", "read", {"path": "a"}), tool_call("call_0", "read", {"path": "b"})),
        chat(text("Both read.")),
    )
    events, err = run(model_for(openai_server))
    assert err is None
    calls = [p for p in events[-1].message.parts if isinstance(p, ToolCall)]
    assert [c.input for c in calls] == [{"path": "a"}, {"path": "b"}]
    assert calls[0].id == "call_0" and calls[1].id != "call_0"


def test_a_run_never_sends_two_results_under_one_id(openai_server, tmp_path) -> None:
    (tmp_path / "a").write_text("alpha")
    (tmp_path / "b").write_text("beta")
    openai_server.enqueue(
        chat(tool_call("call_0", "read", {"path": "a"}), tool_call("call_0", "read", {"path": "b"})),
        chat(text("Both read.")),
    )
    model = model_for(openai_server)

    @flue.agent()
    def dup() -> str:
        flue.use_model(model)
        flue.use_sandbox(flue.local(str(tmp_path)))
        return "test"

    s = flue.init(dup, db=":memory:")
    assert s.prompt("go", timeout=60) == "Both read."
    second = openai_server.chat_requests[1].body["messages"]
    sent_calls = [c["id"] for m in second if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    results = [(m["tool_call_id"], m["content"]) for m in second if m["role"] == "tool"]
    assert len(set(sent_calls)) == 2 and [r[0] for r in results] == sent_calls
    assert "alpha" in results[0][1] and "beta" in results[1][1]


# --- error texts read as sentences ---------------------------------------------------------------

_DOUBLED = re.compile(r"\b(\w+)\s+\1\b", re.IGNORECASE)

_FAULTS = {
    "html": RawReply(HTML, "text/html"),
    "json": RawReply(COMPLETION, "application/json"),
    "401": error(401, "Incorrect API key provided", type="invalid_request_error", code="invalid_api_key"),
    "404": error(404, "The model `qwen` does not exist", type="invalid_request_error"),
    "quota": error(429, "You exceeded your current quota", type="insufficient_quota", code="insufficient_quota"),
    "429": error(429, "Rate limit reached", type="requests", code="rate_limit_exceeded"),
    "500": error(500, "boom", type="server_error"),
    "overflow": overflow("llama.cpp"),
    "mid-stream": chat(text("Hello there", chunks=4), error_after=2),
    "malformed": chat(text("Hello"), raw_before={2: b"data: {not json\n\n"}),
    "cut": chat(text("Hello there", chunks=4), cut_after=3),
    "no finish": chat(text("Hello"), finish=False, done=False, usage=None),
}


@pytest.mark.parametrize("who", ["server", "azure"])
@pytest.mark.parametrize("fault", list(_FAULTS))
def test_error_texts_have_no_doubled_words_and_start_with_a_capital(openai_server, who: str, fault: str) -> None:
    openai_server.enqueue(_FAULTS[fault])
    if who == "azure":
        model = OpenAIModel("qwen", azure_endpoint=openai_server.url, api_key="k", context_window=8_192)
    else:
        model = model_for(openai_server)
    _, err = run(model, ModelRequest("Be terse.", [UserMessage("hi")], [READ]))
    assert isinstance(err, ProviderError), err
    message = err.message
    assert not _DOUBLED.search(message), message
    assert message[0].isupper(), message
