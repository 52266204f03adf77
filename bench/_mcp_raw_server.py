"""A hand-written MCP server (no SDK) for the big-result benchmark and the adversarial script.

`python _mcp_raw_server.py` speaks stdio (one JSON-RPC message a line); `--http PORT` serves
streamable HTTP on http://127.0.0.1:PORT/mcp with plain JSON answers. Being hand-written, it
costs next to nothing to produce a 50 MB answer, so what is measured is the client, and it can
misbehave in ways an SDK server never would (`HOSTILE` below).
"""

from __future__ import annotations

import json
import sys
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
        elif name == "echo":
            result = _result(str(args.get("text", "")))
        elif name == "env":
            import os

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
        import os

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


def stdio() -> None:
    def out(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    for raw in sys.stdin:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        reply = answer(message, out)
        if reply is not None:
            out(json.dumps(reply))


class _Handler(BaseHTTPRequestHandler):
    session = uuid.uuid4().hex

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        message = json.loads(body)
        reply = answer(message)
        if reply is None:
            self.send_response(202)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("mcp-session-id", self.session)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

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
        stdio()
