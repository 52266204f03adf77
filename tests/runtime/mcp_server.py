"""A small MCP server for the tests, written with the official SDK.

`python mcp_server.py` speaks stdio; `python mcp_server.py --http PORT` serves streamable HTTP on
127.0.0.1:PORT/mcp. Set MCP_TEST_FAIL_AT_START=1 to make it exit before it answers.
"""

from __future__ import annotations

import base64
import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.types import Image

PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

app = MCPServer("calc")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


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


if __name__ == "__main__":
    if os.environ.get("MCP_TEST_FAIL_AT_START"):
        sys.stderr.write("calc: refusing to start\n")
        sys.exit(2)
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
