"""A loopback OpenAI Responses API for tests: recorded real streams replayed, and made-up ones in
the same event grammar.

`ResponsesServer` listens on 127.0.0.1 (a free port) and answers each `POST .../responses` with
the next queued reply: a `Stream` of Responses events, sent as server-sent events (`event: TYPE`
then `data: JSON`, no `[DONE]`, as OpenAI sends them), or an `ErrorReply`/`RawReply` of
`tests.openai_server`. `recorded(name)` loads a stream recorded from OpenAI's API (or LM Studio's)
by another project's test suite (`tests/data/openai-responses/`, see its README) and sends each
event's JSON byte for byte as it was recorded; `response(...)` builds one from parts (`text`,
`reasoning`, `function_call`), event for event as the recordings have them. Quirks are options
of the stream: slow to start, cut off, stalled, raw bytes before event n. Every other path answers 404 (the
window look-ups of a compatible server find nothing). Requests are kept in `server.requests`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fake_http import FakeHandler, FakeServer, RecordedRequest, split
from tests.openai_server import ErrorReply, RawReply, error

__all__ = [
    "RECORDED",
    "ResponsesServer",
    "Stream",
    "function_call",
    "overflow",
    "reasoning",
    "recorded",
    "response",
    "text",
]

RECORDED = Path(__file__).parent / "data" / "openai-responses"


@dataclass
class Stream:
    """A 200 stream of events: (type, the event's JSON text)."""

    events: list[tuple[str, str]]
    cut_after: int | None = None
    """Break the connection after this many events (no `response.completed`)."""
    stall_after: int | None = None
    """Send this many events, then nothing for `stall_seconds` (a hung stream)."""
    stall_seconds: float = 30.0
    raw_before: dict[int, bytes] = field(default_factory=dict)
    """Raw bytes sent just before event n (malformed SSE, odd escapes)."""
    delay: float = 0.0
    """Seconds to wait before answering at all (a server slow to start)."""

    @property
    def dicts(self) -> list[dict[str, Any]]:
        """The events as JSON objects."""
        return [json.loads(data) for _, data in self.events]


def recorded(name: str, **options: Any) -> Stream:
    """The recorded stream `tests/data/openai-responses/<name>.sse`, replayed as it was recorded."""
    body = (RECORDED / f"{name}.sse").read_text(encoding="utf-8")
    events = []
    for frame in body.split("\n\n"):
        lines = frame.split("\n")
        data = "\n".join(line[6:] for line in lines if line.startswith("data: "))
        if data:
            events.append((str(json.loads(data)["type"]), data))
    return Stream(events, **options)


def text(value: str, *, chunks: int = 2, phase: str | None = None) -> dict[str, Any]:
    """An assistant message whose text arrives in `chunks` deltas."""
    return {"type": "message", "text": value, "chunks": chunks, "phase": phase}


def reasoning(summary: str = "", *, encrypted: str | None = "gAAAAB-test-reasoning", chunks: int = 2) -> dict[str, Any]:
    """A reasoning item: its summary streamed in `chunks` deltas (none when empty), its
    encrypted content in the finished item."""
    return {"type": "reasoning", "summary": summary, "encrypted": encrypted, "chunks": chunks}


def function_call(
    call_id: str, name: str, arguments: dict[str, Any] | None = None, *, raw: str | None = None, deltas: bool = True
) -> dict[str, Any]:
    """A function call whose JSON arguments (or `raw`) stream in pieces of 5 characters (none
    when `deltas` is False, as LM Studio sends them: only in the finished item)."""
    args = raw if raw is not None else json.dumps(arguments or {})
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": args, "deltas": deltas}


def response(
    *parts: dict[str, Any],
    usage: dict[str, int] | None = None,
    model: str = "gpt-test",
    status: str = "completed",
    no_usage: bool = False,
    **options: Any,
) -> Stream:
    """A stream made of `parts`, with the events the recordings have, in their order.

    `usage` keys: `input` (cached ones included, as the API counts), `output`, `cached`,
    `reasoning` (default 10 in, 5 out); `no_usage` sends none. `status="incomplete"` ends it as `max_output_tokens` does.
    """
    out: list[dict[str, Any]] = []
    resp: dict[str, Any] = {
        "id": "resp_test",
        "object": "response",
        "created_at": 1,
        "status": "in_progress",
        "model": model,
        "output": [],
        "store": False,
        "usage": None,
    }
    out.append({"type": "response.created", "response": dict(resp)})
    out.append({"type": "response.in_progress", "response": dict(resp)})
    done: list[dict[str, Any]] = []
    for index, part in enumerate(parts):
        item = _item_events(index, part, out)
        done.append(item)
        out.append({"type": "response.output_item.done", "output_index": index, "item": item})
    final = {**resp, "status": status, "output": done}
    if status == "incomplete":
        final["incomplete_details"] = {"reason": "max_output_tokens"}
    u = {"input": 10, "output": 5, "cached": 0, "reasoning": 0} if usage is None else usage
    final["usage"] = {
        "input_tokens": u.get("input", 0),
        "input_tokens_details": {"cached_tokens": u.get("cached", 0)},
        "output_tokens": u.get("output", 0),
        "output_tokens_details": {"reasoning_tokens": u.get("reasoning", 0)},
        "total_tokens": u.get("input", 0) + u.get("output", 0),
    }
    if no_usage:
        final["usage"] = None
    out.append({"type": f"response.{status}", "response": final})
    for n, event in enumerate(out):
        event["sequence_number"] = n
    return Stream([(e["type"], json.dumps(e)) for e in out], **options)


def _item_events(index: int, part: dict[str, Any], out: list[dict[str, Any]]) -> dict[str, Any]:
    at = {"output_index": index}
    if part["type"] == "message":
        item_id = f"msg_{index}"
        extra = {"phase": part["phase"]} if part["phase"] else {}
        added = {"id": item_id, "type": "message", "status": "in_progress", "content": [], **extra, "role": "assistant"}
        out.append({"type": "response.output_item.added", **at, "item": added})
        ids = {"item_id": item_id, **at, "content_index": 0}
        out.append({"type": "response.content_part.added", **ids, "part": _output_text("")})
        for piece in split(part["text"], part["chunks"]):
            out.append({"type": "response.output_text.delta", **ids, "delta": piece, "logprobs": []})
        out.append({"type": "response.output_text.done", **ids, "text": part["text"], "logprobs": []})
        out.append({"type": "response.content_part.done", **ids, "part": _output_text(part["text"])})
        return {**added, "status": "completed", "content": [_output_text(part["text"])]}
    if part["type"] == "reasoning":
        item_id = f"rs_{index}"
        secret = {"encrypted_content": part["encrypted"]} if part["encrypted"] is not None else {}
        out.append(
            {
                "type": "response.output_item.added",
                **at,
                "item": {"id": item_id, "type": "reasoning", "summary": [], **secret},
            }
        )
        summary = []
        if part["summary"]:
            ids = {"item_id": item_id, **at, "summary_index": 0}
            out.append(
                {"type": "response.reasoning_summary_part.added", **ids, "part": {"type": "summary_text", "text": ""}}
            )
            for piece in split(part["summary"], part["chunks"]):
                out.append({"type": "response.reasoning_summary_text.delta", **ids, "delta": piece})
            out.append({"type": "response.reasoning_summary_text.done", **ids, "text": part["summary"]})
            summary = [{"type": "summary_text", "text": part["summary"]}]
            out.append({"type": "response.reasoning_summary_part.done", **ids, "part": summary[0]})
        return {"id": item_id, "type": "reasoning", "summary": summary, **secret}
    item_id = f"fc_{index}"
    call = {"id": item_id, "type": "function_call", "call_id": part["call_id"], "name": part["name"]}
    out.append({"type": "response.output_item.added", **at, "item": {**call, "status": "in_progress", "arguments": ""}})
    args = part["arguments"]
    if part["deltas"]:
        for start in range(0, len(args), 5):
            out.append(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": item_id,
                    **at,
                    "delta": args[start : start + 5],
                }
            )
    out.append({"type": "response.function_call_arguments.done", "item_id": item_id, **at, "arguments": args})
    return {**call, "status": "completed", "arguments": args}


def _output_text(value: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": value}


def overflow() -> ErrorReply:
    """The 400 OpenAI's Responses API sends for an input over the model's window."""
    return error(
        400,
        "Your input exceeds the context window of this model. Please adjust your input and try again.",
        type="invalid_request_error",
        code="context_length_exceeded",
    )


class ResponsesServer(FakeServer[Stream | ErrorReply | RawReply]):
    """A threaded loopback Responses API serving queued replies and recording requests."""

    @property
    def base_url(self) -> str:
        """The `/v1` base URL to give the SDK."""
        return f"{self.url}/v1"

    @property
    def response_requests(self) -> list[RecordedRequest]:
        """Only the `responses` requests (not the window look-ups)."""
        return [r for r in self.requests if r.path.split("?")[0].endswith("/responses")]

    def no_reply_left(self) -> Stream | ErrorReply | RawReply:
        return error(500, "openai_responses_server: no scripted reply left", type="server_error")


class _Handler(FakeHandler):
    fake: ResponsesServer
    request_id_header = "x-request-id"

    def do_GET(self) -> None:  # the stdlib dispatches on this name
        self.record("GET")
        self.send_json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:  # the stdlib dispatches on this name
        self.record("POST")
        if not self.path.split("?")[0].endswith("/responses"):
            self.send_json(404, {"error": {"message": "not found"}})
            return
        reply = self.fake.next_reply()
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
                self._stream(reply)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _stream(self, reply: Stream) -> None:
        if reply.delay:
            time.sleep(reply.delay)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for n, (kind, data) in enumerate(reply.events):
            if n in reply.raw_before:
                self.write_chunk(reply.raw_before[n])
            if reply.stall_after is not None and n == reply.stall_after:
                time.sleep(reply.stall_seconds)
            if reply.cut_after is not None and n == reply.cut_after:
                self.wfile.write(
                    b'400\r\nevent: response.output_text.delta\ndata: {"type"'
                )  # announced longer than sent
                self.wfile.flush()
                self.close_connection = True
                return
            self.write_chunk(f"event: {kind}\ndata: {data}\n\n".encode())
        self.end_chunks()


ResponsesServer.handler = _Handler
