"""A hand-written MCP server (no SDK) for the big-result benchmark and the adversarial script.

`python _mcp_raw_server.py` speaks stdio (one JSON-RPC message a line, one at a time; with
`--threaded` each message is handled in a thread of its own, so it answers pings while a call
hangs); `--http PORT` serves streamable HTTP on http://127.0.0.1:PORT/mcp with plain JSON
answers (`/mcp?form=sse`: each answer as an SSE event; `?form=nolength`: JSON with no
Content-Length, so a client must count what it reads). Being hand-written, it costs next to
nothing to produce a 50 MB answer, so what is measured is the client, and it can misbehave in
ways an SDK server never would (`HOSTILE` below). MCP_RAW_LOG=PATH appends each message it
receives to PATH, one JSON line each.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LINE = "0123456789 the quick brown fox jumps over the lazy dog 0123456789 abcdefghij\n"

TOOLS = [
    {"name": "big", "description": "Text of `megabytes` MB.", "inputSchema": {
        "type": "object", "properties": {"megabytes": {"type": "number"}}, "required": ["megabytes"]}},
    {"name": "echo", "description": "Echo `text`.", "inputSchema": {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
    {"name": "pid", "description": "The server's process id.", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "chatter", "description": "`events` log notifications of `megabytes` MB each, then a short answer.",
     "inputSchema": {"type": "object", "properties": {"megabytes": {"type": "number"}, "events": {"type": "integer"}},
                     "required": ["megabytes", "events"]}},
    {"name": "env", "description": "The value of environment variable `name`.", "inputSchema": {
        "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
    {"name": "hostile", "description": "Misbehave as `how` says.", "inputSchema": {
        "type": "object", "properties": {"how": {"type": "string"}}, "required": ["how"]}},
]  # fmt: skip


def _text(megabytes: float) -> str:
    n = max(1, int(megabytes * 1_000_000) // len(LINE))
    return LINE * n


def _result(text: str, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": error}


def answer(message: dict[str, Any], out: Any = None) -> dict[str, Any] | None:
    """The answer to one JSON-RPC message (None for a notification); `out` writes raw lines."""
    method, ident, params = message.get("method"), message.get("id"), message.get("params") or {}
    if ident is None:
        return None
    if method == "initialize":
        result: Any = {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                       "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "1"}}  # fmt: skip
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "ping":
        result = {}
    elif method == "tools/call":
        args = params.get("arguments") or {}
        name = params.get("name")
        if name == "big":
            result = _result(_text(float(args.get("megabytes", 1))))
        elif name == "pid":
            result = _result(str(os.getpid()))
        elif name == "chatter" and out is not None:
            for _ in range(int(args.get("events", 1))):
                text = _text(float(args.get("megabytes", 1)))
                out(json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                                "params": {"level": "info", "data": text}}))  # fmt: skip
            result = _result("chattered")
        elif name == "echo":
            result = _result(str(args.get("text", "")))
        elif name == "env":
            result = _result(os.environ.get(str(args.get("name")), ""))
        elif name == "hostile":
            return _hostile(str(args.get("how")), ident, out)
        else:
            return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32602, "message": f"no tool {name}"}}
    else:
        return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no method {method}"}}
    return {"jsonrpc": "2.0", "id": ident, "result": result}


HOSTILE = {
    "garbage": "a line that is not JSON, then the answer",
    "wrong_id": "an answer to another request id, then the real one",
    "bad_result": "a result that is not a CallToolResult (content is a string)",
    "sampling": "a sampling/createMessage request to the client before answering",
    "exit": "the process exits without answering",
    "hang": "never answers",
    "null_bytes": "text full of NUL and control characters",
    "deep": "content nested 2,000 levels deep",
}


def _hostile(how: str, ident: Any, out: Any) -> dict[str, Any] | None:
    ok = {"jsonrpc": "2.0", "id": ident, "result": _result(f"survived {how}")}
    if how == "garbage" and out is not None:
        out("this is not json {{{")
    elif how == "wrong_id" and out is not None:
        out(json.dumps({"jsonrpc": "2.0", "id": 987654, "result": _result("for nobody")}))
    elif how == "bad_result":
        return {"jsonrpc": "2.0", "id": ident, "result": {"content": "not a list"}}
    elif how == "sampling" and out is not None:
        out(json.dumps({"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage",
                        "params": {"messages": [], "maxTokens": 5}}))  # fmt: skip
    elif how == "exit":
        sys.stdout.flush()
        os._exit(3)
    elif how == "hang":
        time.sleep(3600)
    elif how == "null_bytes":
        return {"jsonrpc": "2.0", "id": ident, "result": _result("a\x00b\x01c\x1b[31mred\u202eevil")}
    elif how == "deep" and out is not None:
        # Written by hand: json.dumps itself cannot nest this deep.
        deep = "[" * 2000 + '"x"' + "]" * 2000
        out(
            f'{{"jsonrpc":"2.0","id":{json.dumps(ident)},"result":{{"content":[{{"type":"text","text":"deep"}}],"x":{deep}}}}}'
        )
        return None
    return ok


def _log(message: Any) -> None:
    if path := os.environ.get("MCP_RAW_LOG"):
        with open(path, "a") as f:
            f.write(json.dumps(message) + "\n")


def stdio(threaded: bool = False) -> None:
    lock = threading.Lock()

    def out(line: str) -> None:
        with lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def handle(message: Any) -> None:
        reply = answer(message, out)
        if reply is not None:
            out(json.dumps(reply))

    for raw in sys.stdin:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        _log(message)
        if threaded:
            threading.Thread(target=handle, args=(message,), daemon=True).start()
        else:
            handle(message)


class _Handler(BaseHTTPRequestHandler):
    session = uuid.uuid4().hex

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        message = json.loads(body)
        _log(message)
        form = self.path.partition("form=")[2]
        sent: list[str] = []
        reply = answer(message, sent.append if form == "sse" else None)
        if reply is None and not sent:
            self.send_response(202)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("mcp-session-id", self.session)
        try:
            if form == "sse":
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for line in [*sent, json.dumps(reply)] if reply is not None else sent:
                    self.wfile.write(b"event: message\ndata: " + line.encode() + b"\n\n")
                return
            data = json.dumps(reply).encode()
            self.send_header("content-type", "application/json")
            if form != "nolength":  # without it, the body ends where the connection does
                self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading (an answer over its limit)

    def do_GET(self) -> None:  # noqa: N802 - no server-to-client stream
        self.send_response(405)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_DELETE(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--http":
        ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), _Handler).serve_forever()
    else:
        stdio(threaded="--threaded" in sys.argv)
