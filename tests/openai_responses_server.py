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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fake_http import split
from tests.openai_server import ErrorReply, OpenAIFake, OpenAIHandler, RawReply, StreamFaults, error

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
class Stream(StreamFaults):
    """A 200 stream of events: (type, the event's JSON text)."""

    events: list[tuple[str, str]]

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


class ResponsesServer(OpenAIFake[Stream | ErrorReply | RawReply]):
    """A threaded loopback Responses API serving queued replies and recording requests."""

    endpoint = "/responses"
    response_requests = OpenAIFake.endpoint_requests


class _Handler(OpenAIHandler):
    fake: ResponsesServer

    def do_GET(self) -> None:  # the stdlib dispatches on this name
        self.record("GET")
        self.not_found()

    def do_POST(self) -> None:  # the stdlib dispatches on this name
        self.record("POST")
        if not self.path.split("?")[0].endswith(self.fake.endpoint):
            self.not_found()
            return
        self.answer(self.fake.next_reply(), self._stream)

    def _stream(self, reply: Stream) -> None:
        events = [f"event: {kind}\ndata: {data}\n\n".encode() for kind, data in reply.events]
        # A cut stream ends in a chunk announced longer than sent.
        cut = b'400\r\nevent: response.output_text.delta\ndata: {"type"'
        self.send_events(reply, events, content_type="text/event-stream; charset=utf-8", cut=cut)


ResponsesServer.handler = _Handler
