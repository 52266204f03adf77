"""An MCP server for the bounding and redaction tests (issue 20.1, 20.2), with the official SDK.

`big` returns a result far over the tool-result limit; `env_value` echoes a variable the client
gave it through `use_mcp(env=...)`. With MCP_LEAKY_FAIL_AT_START set it writes its environment's
`LEAKY_API_KEY` to stderr and exits before it answers.
"""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import MCPServer

app = MCPServer("leaky")


@app.tool()
def big(lines: int, width: int = 60) -> str:
    """`lines` lines of `width` characters each."""
    return "\n".join(f"{i:08d} " + "x" * (width - 9) for i in range(lines))


@app.tool()
def env_value(name: str) -> str:
    """The value of an environment variable of the server process."""
    return os.environ.get(name, "(unset)")


if __name__ == "__main__":
    if os.environ.get("MCP_LEAKY_FAIL_AT_START"):
        sys.stderr.write(f"leaky: bad key {os.environ.get('LEAKY_API_KEY')!r}, refusing to start\n")
        sys.exit(2)
    app.run()
