"""One provider's loopback server behind the same few verbs, so a contract test runs on each.

The `wire` fixture (conftest) runs a test once on Anthropic's Messages API, once on OpenAI's
chat completions and once on OpenAI's Responses API, each on its real SDK against its loopback
server (`tests/anthropic_server.py`, `tests/openai_server.py`, `tests/openai_responses_server.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

from flue_nb.runtime.messages import UserMessage
from flue_nb.runtime.providers.anthropic import AnthropicModel
from flue_nb.runtime.providers.model import ModelRequest, ToolSpec
from flue_nb.runtime.providers.openai import OpenAIModel
from flue_nb.runtime.providers.openai_responses import OpenAIResponsesModel
from tests import anthropic_server as A
from tests import openai_responses_server as R
from tests import openai_server as O

READ = ToolSpec("read", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})


def collect(model: Any, request: ModelRequest | None = None) -> tuple[list[Any], BaseException | None]:
    """Stream one request (the model learns its window first, if it does): (events, error or None)."""
    events: list[Any] = []
    request = request or ModelRequest(system="Be terse.", messages=[UserMessage("hi")], tools=[READ])

    async def go() -> None:
        prepare = getattr(model, "prepare", None)
        if prepare is not None:
            await prepare()
        async for event in model.stream(request):
            events.append(event)

    try:
        asyncio.run(go())
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return events, exc
    return events, None


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


class Wire:
    """One provider's loopback server, spoken through the same few verbs."""

    name: str

    def model(self, key: str = "test-key", **kwargs: Any) -> Any: ...
    def say(self, text: str, **usage: int) -> Any: ...
    def call(self, call_id: str, name: str, args: dict[str, Any], text: str = "") -> Any: ...
    def cut(self, text: str) -> Any: ...
    def overloaded(self) -> Any: ...
    def overflow(self) -> Any: ...
    def malformed(self, text: str) -> Any: ...
    def raw_call(self, call_id: str, name: str, raw: str) -> Any: ...
    def stall(self, text: str) -> Any: ...
    def bad_request(self, message: str) -> Any: ...
    def surrogate(self, text: str) -> Any: ...
    def bodies(self) -> list[dict[str, Any]]: ...
    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, str]]: ...
    def image_count(self, body: dict[str, Any]) -> int: ...
    def system(self, body: dict[str, Any]) -> str: ...
    def tool_names(self, body: dict[str, Any]) -> list[str]: ...
    def enqueue(self, *replies: Any) -> None: ...


class AnthropicWire(Wire):
    name = "anthropic"

    def __init__(self, server: A.AnthropicServer) -> None:
        self.server = server

    def model(self, key: str = "test-key", **kwargs: Any) -> Any:
        return AnthropicModel("claude-sonnet-4-6", api_key=key, base_url=self.server.url, **kwargs)

    def say(self, text: str, **usage: int) -> Any:
        return A.stream(A.text(text), usage=A.usage(input=usage.get("prompt", 10), output=usage.get("completion", 5)))

    def call(self, call_id: str, name: str, args: dict[str, Any], text: str = "") -> Any:
        blocks = [A.text(text)] if text else []
        return A.stream(*blocks, A.tool_use(call_id, name, args), stop_reason="tool_use")

    def cut(self, text: str) -> Any:
        return A.stream(A.text(text), cut_after=4)

    def overloaded(self) -> Any:
        return A.error(529, "overloaded_error", "Overloaded")

    def overflow(self) -> Any:
        return A.error(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")

    def malformed(self, text: str) -> Any:
        return A.stream(A.text(text), raw_before={3: b"event: content_block_delta\ndata: {not json\n\n"})

    def raw_call(self, call_id: str, name: str, raw: str) -> Any:
        return A.stream(A.tool_use(call_id, name, {}, raw_json=raw), stop_reason="tool_use")

    def stall(self, text: str) -> Any:
        return A.stream(A.text(text), stall_after=4, stall_seconds=3.0)

    def bad_request(self, message: str) -> Any:
        return A.error(400, "invalid_request_error", message)

    def surrogate(self, text: str) -> Any:
        raw = (
            b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
            b'"delta": {"type": "text_delta", "text": " odd \\ud800 text"}}\n\n'
        )
        return A.stream(A.text(text), raw_before={4: raw})

    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.server.requests]

    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        return [
            (b["tool_use_id"], json.dumps(b["content"]))
            for m in body["messages"]
            for b in (m["content"] if isinstance(m["content"], list) else [])
            if b.get("type") == "tool_result"
        ]

    def image_count(self, body: dict[str, Any]) -> int:
        return json.dumps(body).count('"type": "image"')

    def system(self, body: dict[str, Any]) -> str:
        return str(body["system"][0]["text"])

    def tool_names(self, body: dict[str, Any]) -> list[str]:
        return [t["name"] for t in body.get("tools") or []]

    def enqueue(self, *replies: Any) -> None:
        self.server.enqueue(*replies)


class OpenAIWire(Wire):
    name = "openai"

    def __init__(self, server: O.OpenAIServer) -> None:
        self.server = server

    def model(self, key: str = "test-key", **kwargs: Any) -> Any:
        # gpt-4o's limits and image support, as the table gives them for OpenAI's own API.
        return OpenAIModel(
            "gpt-4o", api_key=key, base_url=self.server.base_url, context_window=128_000, vision=True, **kwargs
        )

    def say(self, text: str, **usage: int) -> Any:
        return O.chat(O.text(text), usage={"prompt": usage.get("prompt", 10), "completion": usage.get("completion", 5)})

    def call(self, call_id: str, name: str, args: dict[str, Any], text: str = "") -> Any:
        parts = [O.text(text)] if text else []
        return O.chat(*parts, O.tool_call(call_id, name, args))

    def cut(self, text: str) -> Any:
        return O.chat(O.text(text, chunks=4), cut_after=3)

    def overloaded(self) -> Any:
        return O.error(503, "The server is overloaded", type="server_error")

    def overflow(self) -> Any:
        return O.overflow("openai")

    def malformed(self, text: str) -> Any:
        return O.chat(O.text(text), raw_before={2: b"data: {not json\n\n"})

    def raw_call(self, call_id: str, name: str, raw: str) -> Any:
        return O.chat(O.tool_call(call_id, name, raw=raw))

    def stall(self, text: str) -> Any:
        return O.chat(O.text(text, chunks=4), stall_after=3, stall_seconds=3.0)

    def bad_request(self, message: str) -> Any:
        return O.error(400, message, type="invalid_request_error")

    def surrogate(self, text: str) -> Any:
        raw = b'data: {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [{"index": 0, "delta": {"content": " odd \\ud800 text"}, "finish_reason": null}]}\n\n'
        return O.chat(O.text(text), raw_before={2: raw})

    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.server.chat_requests]

    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]

    def image_count(self, body: dict[str, Any]) -> int:
        return json.dumps(body).count('"type": "image_url"')

    def system(self, body: dict[str, Any]) -> str:
        return str(body["messages"][0]["content"])

    def tool_names(self, body: dict[str, Any]) -> list[str]:
        return [t["function"]["name"] for t in body.get("tools") or []]

    def enqueue(self, *replies: Any) -> None:
        self.server.enqueue(*replies)


class ResponsesWire(Wire):
    name = "openai-responses"

    def __init__(self, server: R.ResponsesServer) -> None:
        self.server = server

    def model(self, key: str = "test-key", **kwargs: Any) -> Any:
        return OpenAIResponsesModel(
            "gpt-5", api_key=key, base_url=self.server.base_url, context_window=128_000, vision=True, **kwargs
        )

    def say(self, text: str, **usage: int) -> Any:
        return R.response(R.text(text), usage={"input": usage.get("prompt", 10), "output": usage.get("completion", 5)})

    def call(self, call_id: str, name: str, args: dict[str, Any], text: str = "") -> Any:
        parts = [R.text(text)] if text else []
        return R.response(R.reasoning("Deciding."), *parts, R.function_call(call_id, name, args))

    def cut(self, text: str) -> Any:
        return R.response(R.text(text, chunks=4), cut_after=5)

    def overloaded(self) -> Any:
        return O.error(503, "The server is overloaded", type="server_error")

    def overflow(self) -> Any:
        return R.overflow()

    def malformed(self, text: str) -> Any:
        return R.response(R.text(text), raw_before={4: b"event: response.output_text.delta\ndata: {not json\n\n"})

    def raw_call(self, call_id: str, name: str, raw: str) -> Any:
        return R.response(R.function_call(call_id, name, raw=raw))

    def stall(self, text: str) -> Any:
        return R.response(R.text(text, chunks=4), stall_after=5, stall_seconds=3.0)

    def bad_request(self, message: str) -> Any:
        return O.error(400, message, type="invalid_request_error")

    def surrogate(self, text: str) -> Any:
        # The server's JSON spells the lone surrogate as `\\ud800`, in the deltas and the finished item.
        return R.response(R.text(text), R.text(" odd \ud800 text"))

    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.server.response_requests]

    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        return [(i["call_id"], i["output"]) for i in body["input"] if i.get("type") == "function_call_output"]

    def image_count(self, body: dict[str, Any]) -> int:
        return json.dumps(body).count('"type": "input_image"')

    def system(self, body: dict[str, Any]) -> str:
        return str(body["instructions"])

    def tool_names(self, body: dict[str, Any]) -> list[str]:
        return [t["name"] for t in body.get("tools") or []]

    def enqueue(self, *replies: Any) -> None:
        self.server.enqueue(*replies)


@contextlib.contextmanager
def running_wire(name: str) -> Iterator[Wire]:
    """The provider `name` (`anthropic`, `openai` or `openai-responses`) with its loopback server running."""
    if name == "anthropic":
        with A.AnthropicServer() as server:
            yield AnthropicWire(server)
    elif name == "openai-responses":
        with R.ResponsesServer() as server:
            yield ResponsesWire(server)
    else:
        with O.OpenAIServer() as server:
            yield OpenAIWire(server)
