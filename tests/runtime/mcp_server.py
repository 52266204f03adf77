"""A small MCP server for the tests, written with the official SDK.

`python mcp_server.py` speaks stdio; `python mcp_server.py --http PORT` serves streamable HTTP on
127.0.0.1:PORT/mcp (answers as SSE events; add `--json` for plain-JSON answers). Environment switches reproduce what real servers do:
MCP_TEST_FAIL_AT_START=1 exits before it answers; MCP_TEST_HANG_AT_START=1 never answers;
MCP_TEST_CHATTY=N writes N lines that are not JSON-RPC to stdout first; MCP_TEST_COLLIDE=1 adds
tools whose names collide once sanitised (`a.b`, `a_b`); MCP_TEST_STATE=PATH is the file the
`remember`/`recall` tools keep their notes in (read-modify-write, like the reference memory server);
MCP_TEST_PIDFILE=PATH gets the server's process id.
"""

from __future__ import annotations

import os

if os.environ.get("MCP_TEST_PIDFILE"):  # first, before the SDK's slow imports
    with open(os.environ["MCP_TEST_PIDFILE"], "w") as f:
        f.write(str(os.getpid()))

import base64
import json
import struct
import sys
import time
import zlib
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import ToolAnnotations, ToolExecution

PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def _bad_iccp_png() -> bytes:
    """PNG_1X1 with an iCCP chunk whose CRC is wrong (as the reference server's tiny PNG has)."""
    body = b"sRGB\x00\x00" + zlib.compress(b"\x00" * 16)
    chunk = struct.pack(">I", len(body)) + b"iCCP" + body + struct.pack(">I", zlib.crc32(b"iCCP" + body) ^ 1)
    return PNG_1X1[:33] + chunk + PNG_1X1[33:]


class _Server(MCPServer):
    async def list_tools(self) -> Any:
        """The SDK's listing, with `background` marked as requiring task-augmented execution."""
        tools = await super().list_tools()
        required = ToolExecution(task_support="required")
        return [t.model_copy(update={"execution": required}) if t.name == "background" else t for t in tools]


app = _Server("calc")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def text(megabytes: float) -> str:
    """`megabytes` MB of text."""
    return "0123456789 abcdefghij\n" * int(megabytes * 1_000_000 / 22)


@app.tool()
def pid() -> str:
    """The server's process id (tells a restarted server from the first one)."""
    return str(os.getpid())


@app.tool()
def dot() -> Image:
    """A one-pixel PNG."""
    return Image(data=PNG_1X1, format="png")


@app.tool()
def fail(why: str) -> str:
    """Raise an error with the given reason."""
    raise ValueError(why)


@app.tool()
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await anyio.sleep(seconds)
    return "slept"


@app.tool()
def crash() -> str:
    """Exit the server process in the middle of the call."""
    sys.stderr.write("calc: crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


@app.tool()
async def grow(ctx: Context) -> str:
    """Add a tool named `extra` and tell the client that the tool list changed."""

    def extra() -> str:
        """A tool that exists only after `grow`."""
        return "extra!"

    app.add_tool(extra)
    await ctx.session.send_tool_list_changed()
    return "grown"


@app.tool()
def exit_soon() -> str:
    """Answer, then exit the server a moment later (it dies between two calls)."""

    def later() -> None:
        time.sleep(0.2)
        os._exit(0)

    import threading

    threading.Thread(target=later, daemon=True).start()
    return "exiting"


@app.tool()
async def steps(n: int, ctx: Context) -> str:
    """Report progress `n` times, then answer."""
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i} of {n}")
        await anyio.sleep(0.01)
    return f"{n} steps"


@app.tool()
def iccp() -> Image:
    """A one-pixel PNG with a bad iCCP checksum (Pillow refuses it; the pixels are fine)."""
    return Image(data=_bad_iccp_png(), format="png")


@app.tool()
async def remember(note: str) -> str:
    """Append a note: read the file, wait a moment, write it back (loses notes if run concurrently)."""
    path = os.environ["MCP_TEST_STATE"]
    notes = json.loads(open(path).read()) if os.path.exists(path) else []
    await anyio.sleep(0.01)
    notes.append(note)
    with open(path, "w") as f:
        f.write(json.dumps(notes))
    return f"{len(notes)} notes"


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
async def recall() -> str:
    """The notes, as JSON (read-only: safe to run beside other calls)."""
    path = os.environ["MCP_TEST_STATE"]
    text = open(path).read() if os.path.exists(path) else "[]"
    await anyio.sleep(0.2)  # read first: a read run beside a write misses it
    return text


@app.tool()
def background() -> str:
    """A tool the listing marks as requiring task-augmented execution."""
    return "ran without a task"


if os.environ.get("MCP_TEST_COLLIDE"):

    @app.tool(name="a.b")
    def a_dot_b() -> str:
        """`a.b`: sanitised, it is `a_b` too."""
        return "a.b"

    @app.tool(name="a_b")
    def a_underscore_b() -> str:
        """`a_b`."""
        return "a_b"


def _serve_400(port: int) -> None:
    """Serve HTTP, answering an unknown session id with 400 "No valid session ID" (as the
    TypeScript SDK's servers do) instead of the Python SDK's 404."""
    import uvicorn

    inner = app.streamable_http_app()

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await inner(scope, receive, send)

        refused = False

        async def rewrite(message: Any) -> None:
            nonlocal refused
            if message["type"] == "http.response.start" and message["status"] == 404:
                refused = True
                error = {"code": -32000, "message": "Bad Request: No valid session ID provided"}
                body = json.dumps({"jsonrpc": "2.0", "error": error, "id": None}).encode()
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 400, "headers": headers})
                await send({"type": "http.response.body", "body": body})
            elif not refused:
                await send(message)

        await inner(scope, receive, rewrite)

    uvicorn.run(asgi, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if os.environ.get("MCP_TEST_FAIL_AT_START"):
        sys.stderr.write("calc: refusing to start\n")
        sys.exit(2)
    if os.environ.get("MCP_TEST_HANG_AT_START"):
        time.sleep(3600)
    for i in range(int(os.environ.get("MCP_TEST_CHATTY") or 0)):
        print(f"calc: starting up, line {i} of chatter")
    sys.stdout.flush()
    if len(sys.argv) >= 3 and sys.argv[1] == "--http":
        if "--session-400" in sys.argv:
            _serve_400(int(sys.argv[2]))
        else:
            app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]), json_response="--json" in sys.argv)
    else:
        app.run()
