"""A loopback Anthropic Messages API for tests: scripted replies in, recorded requests out.

`AnthropicServer` listens on 127.0.0.1 (a free port) and answers each `POST /v1/messages` with
the next scripted reply: an SSE stream built from simple block descriptions (`text`, `thinking`,
`tool_use`), an HTTP error with a JSON error body, a stream that sends `event: error` part-way,
or a stream cut off half-way. Every request's body and headers are kept in `server.requests`.

    with AnthropicServer() as server:
        server.enqueue(stream(text("Hello"), usage=usage(input=10, output=2)))
        AnthropicModel("claude-sonnet-4-6", api_key="test", base_url=server.url)
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from tests.fake_http import FakeHandler, FakeServer, RecordedRequest, split

__all__ = [
    "AnthropicServer",
    "ErrorReply",
    "RecordedReply",
    "RecordedRequest",
    "StreamReply",
    "error",
    "raw_block",
    "stream",
    "text",
    "thinking",
    "tool_use",
    "usage",
]


def text(value: str, *, chunks: int = 2) -> dict[str, Any]:
    """A text block whose text arrives in `chunks` text_delta events."""
    return {"type": "text", "text": value, "chunks": chunks}


def thinking(value: str, *, signature: str | None = "sig-1", chunks: int = 2) -> dict[str, Any]:
    """A thinking block, then (unless None) its signature in a signature_delta."""
    return {"type": "thinking", "thinking": value, "signature": signature, "chunks": chunks}


def tool_use(
    call_id: str, name: str, input: dict[str, Any], *, chunks: int = 3, raw_json: str | None = None
) -> dict[str, Any]:
    """A tool_use block; its JSON input (or `raw_json` verbatim) comes in `chunks` deltas."""
    raw = json.dumps(input) if raw_json is None else raw_json
    return {"type": "tool_use", "id": call_id, "name": name, "raw": raw, "chunks": chunks}


def raw_block(start: dict[str, Any], *deltas: dict[str, Any]) -> dict[str, Any]:
    """Any content block, verbatim: its `content_block_start` body, then these deltas (for what
    the other helpers do not build: redacted thinking, server tools, citations, MCP blocks)."""
    return {"type": "raw", "start": start, "deltas": list(deltas), "chunks": 1}


def usage(*, input: int = 0, output: int = 0, cache_read: int = 0, cache_write: int = 0) -> dict[str, int]:
    """Token counts; message_start reports them with output 1, message_delta the final output."""
    return {
        "input_tokens": input,
        "output_tokens": output,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_write,
    }


_DEFAULT_USAGE = usage(input=10, output=5)


@dataclass
class StreamReply:
    """A 200 SSE response built from block descriptions."""

    blocks: list[dict[str, Any]]
    usage: dict[str, int]
    stop_reason: str = "end_turn"
    stop_details: dict[str, Any] | None = None
    """Sent in `message_delta` next to the stop reason (the API's refusal category and explanation)."""
    model: str = "claude-test"
    error_after: int | None = None
    """Send `event: error` after this many events (then end the stream)."""
    error_type: str = "overloaded_error"
    cut_after: int | None = None
    """Close the connection after this many events, without `message_stop`."""
    cut_mode: Literal["eof", "chunk"] = "eof"
    """`eof`: a clean close of a close-delimited body; `chunk`: a chunked body broken mid-chunk."""
    delay: float = 0.0
    """Seconds to wait before answering (for client timeouts)."""
    raw_before: dict[int, bytes] = field(default_factory=dict)
    """Raw bytes sent just before event n (malformed SSE: bad JSON, bytes that are not UTF-8)."""
    stall_after: int | None = None
    """Send this many events, then send nothing for `stall_seconds` (a hung stream)."""
    stall_seconds: float = 30.0
    headers: dict[str, str] = field(default_factory=dict)
    """Extra response headers (e.g. a `content-encoding` the body does not have)."""

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        """The SSE events, in order, as (event name, data)."""
        first = {**self.usage, "output_tokens": 1}
        out: list[tuple[str, dict[str, Any]]] = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_test",
                        "type": "message",
                        "role": "assistant",
                        "model": self.model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": first,
                    },
                },
            ),
            ("ping", {"type": "ping"}),
        ]
        for i, block in enumerate(self.blocks):
            out.extend(_block_events(i, block))
        out.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": self.stop_reason,
                        "stop_sequence": None,
                        **({"stop_details": self.stop_details} if self.stop_details is not None else {}),
                    },
                    "usage": {"output_tokens": self.usage["output_tokens"]},
                },
            )
        )
        out.append(("message_stop", {"type": "message_stop"}))
        return out


@dataclass
class ErrorReply:
    """An HTTP error status with Anthropic's JSON error body."""

    status: int
    error_type: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class RecordedReply:
    """A recorded SSE body (a real Messages API stream), sent as it is in chunks of `chunk` bytes."""

    body: bytes
    chunk: int = 997
    """An odd size, so chunk boundaries fall inside events, lines and UTF-8 characters."""


def stream(*blocks: dict[str, Any], usage: dict[str, int] | None = None, **kwargs: Any) -> StreamReply:
    """A streamed reply made of `blocks` (see `text`, `thinking`, `tool_use`)."""
    return StreamReply(list(blocks), usage or _DEFAULT_USAGE, **kwargs)


def error(status: int, error_type: str, message: str = "error", **headers: str) -> ErrorReply:
    """An HTTP error reply; keyword arguments become headers (`retry_after=` → `retry-after`)."""
    return ErrorReply(status, error_type, message, {k.replace("_", "-"): v for k, v in headers.items()})


def _block_events(i: int, block: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    kind, n = block["type"], block["chunks"]
    if kind == "raw":
        start: dict[str, Any] = block["start"]
        deltas = block["deltas"]
    elif kind == "text":
        start = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": c} for c in split(block["text"], n)]
    elif kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": c} for c in split(block["thinking"], n)]
        if block["signature"] is not None:
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": c} for c in split(block["raw"], n)]
    yield "content_block_start", {"type": "content_block_start", "index": i, "content_block": start}
    for d in deltas:
        yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}
    yield "content_block_stop", {"type": "content_block_stop", "index": i}


class AnthropicServer(FakeServer[StreamReply | ErrorReply | RecordedReply]):
    """A threaded loopback Messages API serving queued replies and recording requests.

    `url` is the base URL to give the SDK.
    """

    def no_reply_left(self) -> StreamReply | ErrorReply | RecordedReply:
        return ErrorReply(500, "api_error", "anthropic_server: no scripted reply left")


class _Handler(FakeHandler):
    """Answers each POST with the fake server's next reply."""

    fake: AnthropicServer

    def do_POST(self) -> None:  # the stdlib dispatches on this name
        self.record("POST")
        reply = self.fake.next_reply()
        try:
            if isinstance(reply, ErrorReply):
                body = {"type": "error", "error": {"type": reply.error_type, "message": reply.message}}
                self.send_json(reply.status, body, reply.headers)
            elif isinstance(reply, RecordedReply):
                self._send_recorded(reply)
            else:
                self._send_stream(reply)
        except (BrokenPipeError, ConnectionResetError):
            # The client hung up (a test stopped reading or cancelled): not a server failure.
            self.close_connection = True

    def _send_stream(self, reply: StreamReply) -> None:
        events = reply.events()
        if reply.delay:
            time.sleep(reply.delay)
        chunked = self._stream_headers(reply)
        for n, (name, data) in enumerate(events):
            if n in reply.raw_before:
                self._write(reply.raw_before[n], chunked)
            if reply.stall_after is not None and n == reply.stall_after:
                time.sleep(reply.stall_seconds)
            if reply.error_after is not None and n == reply.error_after:
                err = {
                    "type": "error",
                    "error": {"type": reply.error_type, "message": "mid-stream failure"},
                }
                self._write(f"event: error\ndata: {json.dumps(err)}\n\n".encode(), chunked)
                break
            if reply.cut_after is not None and n == reply.cut_after:
                self._hang_up(chunked)
                return
            self._write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode(), chunked)
        if chunked:
            self.end_chunks()

    def _send_recorded(self, reply: RecordedReply) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for at in range(0, len(reply.body), reply.chunk):
            self.write_chunk(reply.body[at : at + reply.chunk])
        self.end_chunks()

    def _stream_headers(self, reply: StreamReply) -> bool:
        """Send the status and headers of an event stream; True when its body is chunked."""
        chunked = reply.cut_after is None or reply.cut_mode == "chunk"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        for k, v in reply.headers.items():
            self.send_header(k, v)
        if chunked:
            self.send_header("transfer-encoding", "chunked")
        else:
            # No length, no chunking: the body ends when the connection closes.
            self.send_header("connection", "close")
            self.close_connection = True
        self.end_headers()
        return chunked

    def _hang_up(self, chunked: bool) -> None:
        if chunked:
            # Announce a chunk longer than what follows, then hang up.
            self.wfile.write(b"400\r\nevent: content_block_delta\n")
            self.wfile.flush()
        self.close_connection = True

    def _write(self, data: bytes, chunked: bool) -> None:
        if chunked:
            self.write_chunk(data)
        else:
            self.wfile.write(data)
            self.wfile.flush()


AnthropicServer.handler = _Handler
