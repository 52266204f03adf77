"""One `python` call from the official `mcp` client, timed: run by drive_serve_stop.py in the main venv.

_mcp_call.py URL TOKEN CODE   → prints {"is_error", "text", "seconds", "returned_at"} as JSON
"""

from __future__ import annotations

import asyncio
import json
import sys
import time


async def call(url: str, token: str, code: str) -> dict[str, object]:
    import mcp.types as types
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, client_info=types.Implementation(name="browser-test", version="1")) as session,
    ):
        await session.initialize()
        started = time.monotonic()
        result = await session.call_tool("python", {"code": code})
        text = "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")
        # `returned_at` is wall-clock time, comparable with the driver's click in another process.
        return {"is_error": result.is_error, "text": text, "seconds": time.monotonic() - started,
                "returned_at": time.time()}  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(asyncio.run(call(*sys.argv[1:4]))), flush=True)
