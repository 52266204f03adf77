"""A loopback OpenAI-compatible chat-completions server for tests, with the quirks real servers have.

`OpenAIServer` listens on 127.0.0.1 (a free port) and answers each `POST .../chat/completions`
(OpenAI's `/v1/...` and Azure's `/openai/deployments/NAME/...`) with the next scripted reply: a
stream of `chat.completion.chunk` events built from simple parts (`text`, `reasoning`,
`tool_call`), or an HTTP error with an OpenAI-style error body. Quirks are options of the reply:
tool-call arguments split at any position, usage in a last chunk with empty `choices` (only when
`stream_options.include_usage` asks, as OpenAI does) or never (`usage=None`) or on the finish
chunk whatever was asked (`usage_mode="with_finish"`, llama.cpp), tool calls without ids,
ids and names repeated in every fragment (llama.cpp), an error object mid-stream, a stream cut
off, or a raw body (`RawReply`: HTML, one JSON completion). `GET /v1/models` lists `server.models` (vLLM adds `max_model_len`); `POST /api/show` and
`GET /api/ps` answer from `server.ollama` like Ollama's native API, `GET /api/v0/models/<id>`
from `server.lmstudio` like LM Studio's, `GET /props` from `server.props` like llama.cpp's. Requests are kept in
`server.requests`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar, cast

from tests.fake_http import FakeHandler, FakeServer, RecordedRequest, split

__all__ = [
    "ChatReply",
    "ErrorReply",
    "OpenAIFake",
    "OpenAIHandler",
    "OpenAIServer",
    "RawReply",
    "RecordedRequest",
    "StreamFaults",
    "chat",
    "error",
    "overflow",
    "reasoning",
    "text",
    "tool_call",
]

R = TypeVar("R")


def text(value: str, *, chunks: int = 2) -> dict[str, Any]:
    """Answer text arriving in `chunks` content deltas."""
    return {"type": "text", "text": value, "chunks": chunks}


def reasoning(value: str, *, field: str = "reasoning_content", chunks: int = 2) -> dict[str, Any]:
    """Reasoning text in `delta.reasoning_content` (vLLM, DeepSeek) or `delta.reasoning` (Ollama)."""
    return {"type": "reasoning", "text": value, "field": field, "chunks": chunks}


def tool_call(
    call_id: str,
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    raw: str | None = None,
    cuts: tuple[int, ...] = (),
) -> dict[str, Any]:
    """A tool call; its JSON arguments (or `raw`) are cut at the character positions `cuts`
    (default: every 5 characters), so fragments may end inside a key, a string or an escape."""
    args = raw if raw is not None else json.dumps(arguments or {})
    points = list(cuts) or list(range(5, len(args), 5))
    pieces = [args[a:b] for a, b in zip([0, *points], [*points, len(args)]) if args[a:b]]
    return {"type": "tool_call", "id": call_id, "name": name, "pieces": pieces or [""]}


@dataclass(kw_only=True)
class StreamFaults:
    """What can go wrong in a 200 event stream, by event number (both OpenAI fakes' streams)."""

    delay: float = 0.0
    """Seconds to wait before answering at all (a server slow to start)."""
    raw_before: dict[int, bytes] = field(default_factory=dict)
    """Raw bytes sent just before event n (malformed SSE: bad JSON, bytes that are not UTF-8)."""
    stall_after: int | None = None
    """Send this many events, then nothing for `stall_seconds` (a hung stream)."""
    stall_seconds: float = 30.0
    cut_after: int | None = None
    """Break the connection after this many events (no finish, no end of stream)."""


@dataclass
class ChatReply(StreamFaults):
    """A 200 stream of chunks."""

    parts: list[dict[str, Any]]
    finish_reason: str | None = None
    """Default: `tool_calls` when there are tool calls, else `stop`."""
    usage: dict[str, Any] | None = field(default_factory=lambda: {"prompt": 10, "completion": 5, "cached": 0})
    usage_mode: Literal["last", "with_finish"] = "last"
    ids: bool = True
    """False: tool calls carry no id (some local servers)."""
    repeat_ids: bool = False
    """True: every fragment repeats the call's id and name (llama.cpp)."""
    model: str = "gpt-test"
    error_after: int | None = None
    """Send `data: {"error": ...}` after this many chunks (then end the stream)."""
    error_body: dict[str, Any] = field(default_factory=lambda: {"message": "engine failed", "type": "server_error"})
    done: bool = True
    """Send `data: [DONE]` at the end."""
    finish: bool = True
    """False: no chunk says why the stream stopped (it just ends)."""

    def chunks(self, include_usage: bool) -> list[dict[str, Any]]:
        """The chunk objects, in order."""
        out: list[dict[str, Any]] = [self._chunk({"role": "assistant", "content": ""})]
        calls = 0
        for part in self.parts:
            if part["type"] == "text":
                out += [self._chunk({"content": c}) for c in split(part["text"], part["chunks"])]
            elif part["type"] == "reasoning":
                out += [self._chunk({part["field"]: c}) for c in split(part["text"], part["chunks"])]
            else:
                out += self._call_chunks(calls, part)
                calls += 1
        reason = self.finish_reason or ("tool_calls" if calls else "stop")
        last = self._chunk({}, finish_reason=reason)
        usage = self._usage()
        if usage is not None and self.usage_mode == "with_finish":
            last["usage"] = usage
        if self.finish:
            out.append(last)
        if usage is not None and self.usage_mode == "last" and include_usage:
            out.append({**self._chunk({}), "choices": [], "usage": usage})
        return out

    def _call_chunks(self, index: int, part: dict[str, Any]) -> list[dict[str, Any]]:
        chunks = []
        for n, piece in enumerate(part["pieces"]):
            frag: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
            if n == 0 or self.repeat_ids:
                frag["function"]["name"] = part["name"]
                frag["type"] = "function"
                if self.ids:
                    frag["id"] = part["id"]
            chunks.append(self._chunk({"tool_calls": [frag]}))
        return chunks

    def _usage(self) -> dict[str, Any] | None:
        if self.usage is None:
            return None
        u = self.usage
        return {
            "prompt_tokens": u["prompt"],
            "completion_tokens": u["completion"],
            "total_tokens": u["prompt"] + u["completion"],
            "prompt_tokens_details": {"cached_tokens": u.get("cached", 0)},
        }

    def _chunk(self, delta: dict[str, Any], *, finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
        }


@dataclass
class ErrorReply:
    """An HTTP error status with an error body (`{"error": {...}}` unless `raw`)."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class RawReply:
    """A body sent as it is, whatever was asked: a proxy's HTML page or a server that ignores
    `stream: true` and answers with one JSON completion."""

    body: bytes
    content_type: str
    status: int = 200


def chat(*parts: dict[str, Any], **kwargs: Any) -> ChatReply:
    """A streamed reply made of `parts` (see `text`, `reasoning`, `tool_call`)."""
    return ChatReply(list(parts), **kwargs)


def error(status: int, message: str = "error", *, type: str = "", code: Any = None, **headers: str) -> ErrorReply:
    """An OpenAI-style error; keyword arguments become headers (`retry_after=` → `retry-after`)."""
    body = {"error": {"message": message, "type": type or None, "param": None, "code": code}}
    return ErrorReply(status, body, {k.replace("_", "-"): v for k, v in headers.items()})


def overflow(server: Literal["openai", "vllm", "vllm-new", "llama.cpp"]) -> ErrorReply:
    """The 400 each server sends for a prompt that does not fit, in its own words."""
    if server == "openai":
        return error(
            400,
            "This model's maximum context length is 128000 tokens. However, your messages resulted in "
            "130017 tokens. Please reduce the length of the messages.",
            type="invalid_request_error",
            code="context_length_exceeded",
        )
    if server == "vllm":
        # vLLM answers with a flat body: {"object": "error", "message": ..., "type": ..., "code": 400}.
        return ErrorReply(
            400,
            {
                "object": "error",
                "message": "This model's maximum context length is 8192 tokens. However, you requested "
                "9210 tokens (7162 in the messages, 2048 in the completion). Please reduce the length of "
                "the messages or completion.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
        )
    if server == "vllm-new":
        return error(
            400,
            "The input (9210 tokens) is longer than the model's context length (8192 tokens).",
            type="BadRequestError",
            code=400,
        )
    return error(
        400, "the request exceeds the available context size, try increasing it", type="exceed_context_size_error"
    )


class OpenAIFake(FakeServer[R]):
    """What both OpenAI fakes are alike: a `/v1` API with one endpoint of its own, whose script
    running out is a 500."""

    endpoint: ClassVar[str]
    """What the paths of the API's own requests end in (the others are window look-ups)."""

    @property
    def base_url(self) -> str:
        """The `/v1` base URL to give the SDK."""
        return f"{self.url}/v1"

    @property
    def endpoint_requests(self) -> list[RecordedRequest]:
        """Only the requests to `endpoint` (not the window look-ups)."""
        return [r for r in self.requests if r.path.split("?")[0].endswith(self.endpoint)]

    def no_reply_left(self) -> R:
        # Every reply type of an OpenAI fake includes `ErrorReply`.
        said = f"{type(self).__module__.rpartition('.')[2]}: no scripted reply left"
        return cast(R, error(500, said, type="server_error"))


class OpenAIServer(OpenAIFake[ChatReply | ErrorReply | RawReply]):
    """A threaded loopback chat-completions API serving queued replies and recording requests."""

    endpoint = "/chat/completions"

    def __init__(self) -> None:
        super().__init__()
        self.models: list[dict[str, Any]] | None = None
        """What `GET /v1/models` lists (None: 404, as a server without the endpoint)."""
        self.ollama: dict[str, dict[str, Any]] = {}
        """Model name -> `/api/show` body (`parameters`, `model_info`, `capabilities`; an extra
        `loaded_context` puts it in `/api/ps` with that `context_length`)."""
        self.lmstudio: dict[str, dict[str, Any]] = {}
        """Model id -> LM Studio's `GET /api/v0/models/<id>` body."""
        self.props: dict[str, Any] | None = None
        """llama.cpp's `GET /props` body (None: 404)."""

    chat_requests = OpenAIFake.endpoint_requests


class OpenAIHandler(FakeHandler):
    """What both OpenAI fakes answer alike: 404s, error and raw replies, and a faulty event stream."""

    request_id_header = "x-request-id"

    def not_found(self) -> None:
        """The 404 of a path the fake does not serve."""
        self.send_json(404, {"error": {"message": "not found"}})

    def answer(self, reply: Any, stream: Callable[[Any], None]) -> None:
        """Send `reply`: an `ErrorReply` or `RawReply` as it is, anything else through `stream`."""
        try:
            if isinstance(reply, ErrorReply):
                self.send_json(reply.status, reply.body, reply.headers)
            elif isinstance(reply, RawReply):
                self.send_response(reply.status)
                self.send_header("content-type", reply.content_type)
                self.send_header("content-length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
            else:
                stream(reply)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def send_events(
        self, faults: StreamFaults, events: list[bytes], *, content_type: str, cut: bytes, tail: bytes = b""
    ) -> None:
        """A chunked 200 of `events` with the `faults` asked for, then `tail` (not an event: no
        fault is counted at it); `cut` is the chunk a cut-off stream ends in."""
        if faults.delay:
            time.sleep(faults.delay)
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for n, event in enumerate(events):
            if n in faults.raw_before:
                self.write_chunk(faults.raw_before[n])
            if faults.stall_after is not None and n == faults.stall_after:
                time.sleep(faults.stall_seconds)
            if faults.cut_after is not None and n == faults.cut_after:
                self.wfile.write(cut)
                self.wfile.flush()
                self.close_connection = True
                return
            self.write_chunk(event)
        if tail:
            self.write_chunk(tail)
        self.end_chunks()


class _Handler(OpenAIHandler):
    """Answers each request from the fake server's state and replies."""

    fake: OpenAIServer

    def do_GET(self) -> None:  # the stdlib dispatches on this name
        self.record("GET")
        path = self.path.split("?")[0]
        if path.endswith("/models") and self.fake.models is not None:
            self.send_json(200, {"object": "list", "data": self.fake.models})
        elif path.startswith("/api/v0/models/") and path[len("/api/v0/models/") :] in self.fake.lmstudio:
            self.send_json(200, self.fake.lmstudio[path[len("/api/v0/models/") :]])
        elif path == "/props" and self.fake.props is not None:
            self.send_json(200, self.fake.props)
        elif path == "/api/ps":
            loaded = [
                {"name": k, "model": k, "context_length": v["loaded_context"]}
                for k, v in self.fake.ollama.items()
                if "loaded_context" in v
            ]
            self.send_json(200, {"models": loaded})
        else:
            self.not_found()

    def do_POST(self) -> None:  # the stdlib dispatches on this name
        body = self.record("POST")
        path = self.path.split("?")[0]
        if path == "/api/show":
            found = self.fake.ollama.get(body.get("model", ""))
            if found is None:
                self.send_json(404, {"error": f"model '{body.get('model')}' not found"})
            else:
                self.send_json(200, {k: v for k, v in found.items() if k != "loaded_context"})
            return
        if not path.endswith(self.fake.endpoint):
            self.not_found()
            return
        include = bool((body.get("stream_options") or {}).get("include_usage"))
        self.answer(self.fake.next_reply(), lambda reply: self._stream(reply, include))

    def _stream(self, reply: ChatReply, include_usage: bool) -> None:
        events = [f"data: {json.dumps(chunk)}\n\n".encode() for chunk in reply.chunks(include_usage)]
        tail = b"data: [DONE]\n\n" if reply.done else b""
        if reply.error_after is not None and reply.error_after < len(events):
            # The error object stands in for chunk n and ends the stream (no [DONE]).
            events = [*events[: reply.error_after], f"data: {json.dumps({'error': reply.error_body})}\n\n".encode()]
            tail = b""
        # A cut stream ends in a chunk announced longer than sent.
        self.send_events(reply, events, content_type="text/event-stream", cut=b'400\r\ndata: {"id"', tail=tail)


OpenAIServer.handler = _Handler
