"""A scripted ACP agent for the host tests: `python tests/acp_scripted_agent.py` speaks ACP on stdio
(the `agent-client-protocol` package's agent side) and answers each prompt by its words:

- "hello": a thought, then "Hello from the scripted agent." in two chunks;
- "write": a `Write note.txt` edit call that asks permission first, then writes note.txt in its
  directory if allowed ("Wrote note.txt.") or not ("Not written."); "write to PATH" the same
  call (id w2) for the file PATH (its location; the title and raw input still say note.txt),
  "write to PATH reuse" with the id w1 again (which ACP does not allow);
- "kernel": a `python` call through the MCP server named `flue-kernel` it was given in
  `session/new` (the host's kernel), reported as a tool call but never asked about, whose first
  line it reports ("The kernel says: ...");
- "ask first": the same call, after asking permission for it (`session/request_permission`);
- "sneak": a `python` call into the kernel it reports to no one (no tool call, no permission);
- "wait": "Waiting." and nothing more until `session/cancel`, then "Cancelled, late." (stop
  reason `cancelled`);
- "die": "Going." then it exits with status 5, saying "dying now" on stderr.

With SCRIPTED_ACP_LOG set it appends what it was told (one JSON line per event) to that file.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    run_agent,
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_tool_call,
)
from acp.schema import (
    AgentCapabilities,
    Implementation,
    InitializeResponse,
    McpCapabilities,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ToolCallLocation,
    ToolCallUpdate,
)


def log(event: str, **data: Any) -> None:
    path = os.environ.get("SCRIPTED_ACP_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event, **data}) + "\n")


class Scripted:
    def __init__(self) -> None:
        self.conn: Any = None
        self.cwd = os.getcwd()
        self.servers: list[Any] = []
        self.cancelled: asyncio.Event = asyncio.Event()

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(
        self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None, **kw: Any
    ):
        log("initialize", client=getattr(client_info, "name", None))
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(mcp_capabilities=McpCapabilities(http=True)),
            agent_info=Implementation(name="scripted", title="Scripted ACP agent", version="1"),
        )

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kw: Any) -> NewSessionResponse:
        self.cwd = cwd
        self.servers = list(mcp_servers or [])
        log("new_session", cwd=cwd, servers=[s.name for s in self.servers])
        return NewSessionResponse(session_id="scripted-1")

    async def cancel(self, session_id: str, **kw: Any) -> None:
        log("cancel", session=session_id)
        self.cancelled.set()

    async def say(self, sid: str, text: str) -> None:
        await self.conn.session_update(sid, update_agent_message_text(text))

    async def prompt(self, session_id: str, prompt: list[Any], **kw: Any) -> PromptResponse:
        text = " ".join(getattr(b, "text", "") for b in prompt)
        log("prompt", text=text)
        self.cancelled.clear()
        sid = session_id
        if "write" in text:
            target = text.split("write to ", 1)[1].split()[0] if "write to " in text else None
            return await self.write(sid, target, reuse="reuse" in text)
        if "sneak" in text:
            return await self.kernel(sid, report=False)
        if "ask first" in text:
            return await self.kernel(sid, ask=True)
        if "kernel" in text:
            return await self.kernel(sid)
        if "die" in text:
            await self.say(sid, "Going.")
            print("dying now", file=sys.stderr, flush=True)
            os._exit(5)
        if "wait" in text:
            await self.say(sid, "Waiting.")
            await self.cancelled.wait()
            await self.say(sid, "Cancelled, late.")  # after the cancel: belongs to no later reply
            return PromptResponse(stop_reason="cancelled")
        await self.conn.session_update(sid, update_agent_thought_text("A greeting."))
        await self.say(sid, "Hello from ")
        await self.say(sid, "the scripted agent.")
        return PromptResponse(stop_reason="end_turn")

    async def write(self, sid: str, target: str | None = None, *, reuse: bool = False) -> PromptResponse:
        path = target or os.path.join(self.cwd, "note.txt")
        # A call id is the session's: never used twice, except to test a host (`reuse`).
        cid = "w2" if target and not reuse else "w1"
        where = [ToolCallLocation(path=path)]
        await self.say(sid, "Let me write it. ")
        start = start_tool_call(
            cid, "Write note.txt", kind="edit", status="pending", locations=where, raw_input={"path": "note.txt"}
        )
        await self.conn.session_update(sid, start)
        options = [
            PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
            PermissionOption(option_id="no", name="Reject", kind="reject_once"),
        ]
        call = ToolCallUpdate(tool_call_id=cid, title="Write note.txt", kind="edit", status="pending")
        answer = await self.conn.request_permission(session_id=sid, tool_call=call, options=options)
        outcome = answer.outcome
        log("permission", outcome=outcome.outcome, option=getattr(outcome, "option_id", None))
        if outcome.outcome == "cancelled":
            return PromptResponse(stop_reason="cancelled")
        if outcome.option_id == "yes":
            with open(path, "w", encoding="utf-8") as f:
                f.write("from the scripted agent\n")
            done = update_tool_call(cid, status="completed", content=[tool_content(text_block("wrote note.txt"))])
            await self.conn.session_update(sid, done)
            await self.say(sid, "Wrote note.txt.")
        else:
            await self.conn.session_update(sid, update_tool_call(cid, status="failed"))
            await self.say(sid, "Not written.")
        return PromptResponse(stop_reason="end_turn")

    async def kernel(self, sid: str, *, report: bool = True, ask: bool = False) -> PromptResponse:
        server = next((s for s in self.servers if s.name == "flue-kernel"), None)
        if server is None:
            await self.say(sid, "No kernel was given to me.")
            return PromptResponse(stop_reason="end_turn")
        code = "hosted = 6 * 7\nprint(hosted)"
        if report:
            start = start_tool_call(
                "k1", "python: hosted = 6 * 7", kind="execute", status="in_progress", raw_input={"code": code}
            )
            await self.conn.session_update(sid, start)
        if ask:
            options = [
                PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
                PermissionOption(option_id="no", name="Reject", kind="reject_once"),
            ]
            call = ToolCallUpdate(tool_call_id="k1", title="python: hosted = 6 * 7", kind="execute")
            answer = await self.conn.request_permission(session_id=sid, tool_call=call, options=options)
            log("permission", outcome=answer.outcome.outcome, option=getattr(answer.outcome, "option_id", None))
            if getattr(answer.outcome, "option_id", None) != "yes":
                await self.conn.session_update(sid, update_tool_call("k1", status="failed"))
                await self.say(sid, "Not run.")
                return PromptResponse(stop_reason="end_turn")
        result = await call_tool(server, "python", {"code": code})
        log("kernel", result=result)
        if report:
            done = update_tool_call("k1", status="completed", content=[tool_content(text_block(result))])
            await self.conn.session_update(sid, done)
        await self.say(sid, f"The kernel says: {result.strip().splitlines()[0]}")
        return PromptResponse(stop_reason="end_turn")


async def call_tool(server: Any, tool: str, arguments: dict[str, Any]) -> str:
    """One call through an HTTP MCP server the client gave (the official `mcp` client)."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={h.name: h.value for h in server.headers})
    async with (
        http,
        streamable_http_client(server.url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await session.call_tool(tool, arguments)
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    asyncio.run(run_agent(Scripted()))
