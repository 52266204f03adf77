"""MCP servers as tools: `use_mcp()` declares a server; `mount_mcp` connects it and builds its tools.

A server's tools are mounted as `mcp__<server>__<tool>` with the description and input schema
the server lists. Connections are process-wide (one per kernel): opened at the first render that
declares the server, on the runtime's loop, and reused by every later submission. A connection
that dies is reopened by the next render or call. The `mcp` SDK is imported lazily, by
`_mcp_connection`, and only when a server is first connected.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from flue_nb.runtime.errors import McpConnectionError
from flue_nb.runtime.messages import SignalMessage
from flue_nb.runtime.providers.model import ToolSpec
from flue_nb.runtime.tools._mcp_connection import AnswerTooLarge, CallTimedOut, Connection, ConnectionGone, SessionLost
from flue_nb.runtime.tools._mcp_content import to_output, validate
from flue_nb.runtime.tools._mcp_listing import NAME_LIMIT, needs_task, select, tool_name
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput

__all__ = [
    "McpServer",
    "McpServerStatus",
    "NAME_LIMIT",
    "McpTool",
    "close_mcp_servers",
    "mcp_servers",
    "mount_mcp",
    "to_output",
    "tool_name",
    "unavailable_signals",
]

RETRY_AFTER = 60.0
"""Seconds a server that failed to connect is left alone between the turns of one run (a hanging
URL would otherwise cost its full timeout at every turn). A submission's start retries a server
that failed fast (a wrong command), but not one that timed out less than this long ago: that
would cost the whole timeout again at every prompt. A server that dies after connecting is
restarted at once."""
CALL_TIMEOUT = 300.0
"""Default seconds one MCP tool call may take (`use_mcp(call_timeout=...)`)."""


@dataclass(frozen=True, slots=True)
class McpServer:
    """A server an agent declared with `use_mcp()` (hashable: it keys the process-wide connection)."""

    name: str
    command: tuple[str, ...] | None = None
    """The stdio server's command line; exactly one of `command` and `url` is set."""
    url: str | None = None
    """The streamable-HTTP endpoint."""
    tools: tuple[str, ...] | None = None
    """Mount only these of the server's tools (None: all of them)."""
    optional: bool = False
    """When it cannot connect, mount nothing and tell the model, instead of failing the submission."""
    env: tuple[tuple[str, str], ...] | None = None
    cwd: str | None = None
    headers: tuple[tuple[str, str], ...] | None = None
    timeout: float = 30.0
    """Seconds to start, initialise and list the tools."""
    call_timeout: float | None = CALL_TIMEOUT
    """Seconds one tool call may take before it is cancelled (None: no limit but abort)."""
    prefix: str | None = None
    """What the mounted names start with (None: `mcp__<name>__`; `""`: the server's own names)."""

    @property
    def target(self) -> str:
        """The command line or URL, for messages."""
        return " ".join(self.command) if self.command is not None else str(self.url)

    @property
    def key(self) -> tuple[Any, ...]:
        """What identifies one connection: everything but the tool filter and `optional`."""
        return (self.name, self.command, self.url, self.env, self.cwd, self.headers, self.prefix)


@dataclass(frozen=True, slots=True)
class McpServerStatus:
    """A snapshot of one connection, for `%flue mcp` and `mcp_servers()`."""

    name: str
    target: str
    state: str
    """`connected`, `connecting`, `closed` or `failed`."""
    tools: tuple[str, ...]
    """The mounted names (`mcp__<server>__<tool>`) of the tools the server lists."""
    error: str | None = None


class _AnyInput(BaseModel):
    """MCP tools validate against the server's JSON schema, not a pydantic model."""

    model_config = ConfigDict(extra="allow")


@dataclass(slots=True)
class McpTool(Tool):
    """A tool of an MCP server; the model sees the server's own description and schema."""

    server: str = ""
    remote_name: str = ""
    """The tool's name on the server."""
    schema: dict[str, Any] = field(default_factory=dict)
    concurrent: bool = True
    """Whether a call may run beside other calls of the same server: False for a stdio server's
    tools the server does not mark read-only (`readOnlyHint`), whose calls run alone, after the
    calls made before them and before those made after them (a stdio server is one process,
    often with one state file it rewrites at every call)."""
    destructive: bool = True
    """The server's `destructiveHint` (MCP's default, true, when it gives none): the approval
    question says so. A tool it marks `readOnlyHint` is `read_only` and never asked about."""

    def spec(self) -> ToolSpec:
        """The server's name, description and schema, as the model sees them."""
        if self._spec is None:
            self._spec = ToolSpec(self.name, self.description, self.schema)
        return self._spec


# --- the process-wide registry ------------------------------------------------------------------

_connections: dict[tuple[Any, ...], Connection] = {}
_tools: dict[tuple[Any, ...], tuple[int, list[McpTool] | McpConnectionError]] = {}
"""Per connection: the generation its tools were built for, and the tools (schemas are costly),
or why they cannot be mounted (names that collide)."""


async def _on_runtime_loop(coro_fn: Any) -> Any:
    """Run on the coordinator's loop, where the connections live, whichever loop calls."""
    from flue_nb.runtime.coordinator import coordinator

    co = coordinator()
    if asyncio.get_running_loop() is co.loop:
        return await coro_fn()
    return await asyncio.wrap_future(co.submit(coro_fn()))


def _connection(server: McpServer) -> Connection:
    conn = _connections.get(server.key)
    if conn is None:
        conn = _connections[server.key] = Connection(server)
    return conn


def _server_tools(conn: Connection) -> list[McpTool]:
    """The server's tools as flue_nb tools; `McpConnectionError` if two names collide."""
    cached = _tools.get(conn.server.key)
    if cached is None or cached[0] != conn.generation:
        cached = (conn.generation, _build_tools(conn))
        _tools[conn.server.key] = cached
    if isinstance(cached[1], McpConnectionError):
        raise cached[1]
    return cached[1]


def _build_tools(conn: Connection) -> list[McpTool] | McpConnectionError:
    built: dict[str, McpTool] = {}
    for listed in conn.listing:
        tool = _build_tool(conn, listed)
        other = built.get(tool.name)
        if other is not None:
            return McpConnectionError(
                f"MCP server `{conn.server.name}` lists tools `{other.remote_name}` and `{tool.remote_name}`, "
                f"which both become `{tool.name}` (characters other than letters, digits, `_` and `-` "
                "become `_`); none of its tools are mounted. Rename one on the server, or mount the "
                "other alone with `tools=[...]` in use_mcp() once the server lists unique names.",
                server=conn.server.name,
            )
        built[tool.name] = tool
    return list(built.values())


async def mount_mcp(servers: Sequence[McpServer], *, first: bool) -> tuple[list[Tool], dict[str, str]]:
    """Connect (or reuse) each declared server; return the tools to mount and the unavailable servers.

    Args:
        servers: What the render declared, in order.
        first: True at a submission's first render. Then a required server that cannot connect
            raises; at later renders a server that went away is reported as unavailable (its
            tools unmount, the model is told) and retried no more often than `RETRY_AFTER`.

    Returns:
        The tools, in declaration order, and `{server name: reason}` for each one not mounted.

    Raises:
        McpConnectionError: a required server failed at the first render, or `tools=` names a
            tool the server does not list.
    """
    if not servers:
        return [], {}
    mounted: tuple[list[Tool], dict[str, str]] = await _on_runtime_loop(lambda: _mount(servers, first))
    return mounted


async def _mount(servers: Sequence[McpServer], first: bool) -> tuple[list[Tool], dict[str, str]]:
    conns = [_connection(s) for s in servers]

    async def ensure(conn: Connection) -> BaseException | None:
        ago = time.monotonic() - conn.failed_at if conn.failed_at is not None else None
        if not conn.alive and ago is not None and ago < RETRY_AFTER and (not first or conn.timed_out):
            return _not_retried(conn, ago)
        try:
            await conn.ensure()
        except McpConnectionError as exc:
            return exc
        return None

    outcomes = await asyncio.gather(*(ensure(c) for c in conns))  # servers start in parallel
    tools: list[Tool] = []
    unavailable: dict[str, str] = {}
    for server, conn, failure in zip(servers, conns, outcomes):
        if failure is None:
            try:
                tools.extend(select(server, _server_tools(conn)))
                continue
            except McpConnectionError as exc:
                if server.tools is not None:
                    raise  # `tools=` is wrong: the agent's own mistake, whatever `optional` says
                failure = exc
        if first and not server.optional:
            raise failure
        unavailable[server.name] = str(failure) if conn.alive else conn.error or str(failure)
    return tools, unavailable


def _not_retried(conn: Connection, ago: float) -> McpConnectionError:
    """The error for a server left alone after a recent failure, saying so."""
    server = conn.server
    return McpConnectionError(
        f"could not connect to MCP server `{server.name}` ({server.target}) {ago:.0f} s ago: {conn.error}\n"
        f"It is not tried again until {RETRY_AFTER:g} s after that failure (each try costs its "
        f"{server.timeout:g} s timeout); to try at once, call "
        "`flue_nb.runtime.tools.mcp.close_mcp_servers()` or restart the kernel. Pass optional=True "
        "to use_mcp() to run without it.",
        server=server.name,
    )


def mcp_servers() -> list[McpServerStatus]:
    """What this process is connected to (or failed to connect to), in the order first used."""
    out = []
    for conn in list(_connections.values()):
        alive = conn.alive
        names = tuple(tool_name(conn.server.name, t.name, conn.server.prefix) for t in conn.listing) if alive else ()
        state = conn.state if alive or conn.state != "connected" else "closed"
        out.append(McpServerStatus(conn.server.name, conn.server.target, state, names, conn.error))
    return out


@atexit.register
def _close_at_exit() -> None:
    # A server that timed out at start is stopped in the background (it takes the SDK seconds);
    # a script that exits right after that error would otherwise leave it running, orphaned.
    try:
        close_mcp_servers(timeout=5.0)
    except Exception:  # noqa: BLE001 - the process is ending; nothing more to do with them
        pass


def close_mcp_servers(timeout: float = 10.0) -> None:
    """Close every connection and stop every stdio server this process started."""
    if not _connections:
        return
    from flue_nb.runtime.coordinator import coordinator

    conns = list(_connections.values())
    _connections.clear()
    _tools.clear()

    async def close_all() -> None:
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    co = coordinator()
    if co.thread is threading.current_thread():
        raise RuntimeError("close_mcp_servers() blocks: call it from outside the runtime's loop")
    co.submit(close_all()).result(timeout)


# --- one tool -----------------------------------------------------------------------------------


def _build_tool(conn: Connection, listed: Any) -> McpTool:
    server = conn.server
    schema = dict(listed.input_schema or {"type": "object", "properties": {}})
    schema.pop("title", None)
    description = listed.description or getattr(listed, "title", None) or listed.name
    remote = listed.name
    annotations = getattr(listed, "annotations", None)
    read_only = bool(getattr(annotations, "read_only_hint", False))
    hint = getattr(annotations, "destructive_hint", None)
    destructive = not read_only and (hint is None or bool(hint))
    concurrent = server.command is None or read_only
    as_task = needs_task(listed)  # run through the task flow (create, poll, fetch): _mcp_tasks

    async def run(args: BaseModel, ctx: ToolContext) -> ToolOutput:
        arguments = dict(args.model_extra or {})
        invalid = validate(schema, arguments, tool_name(server.name, remote, server.prefix))
        if invalid is not None:
            return ToolOutput(invalid, is_error=True)
        out: ToolOutput = await _on_runtime_loop(lambda: _call(server, remote, arguments, ctx, concurrent, as_task))
        return out

    return McpTool(
        tool_name(server.name, remote, server.prefix),
        description,
        _AnyInput,
        run,
        server=server.name,
        remote_name=remote,
        schema=schema,
        concurrent=concurrent,
        read_only=read_only,
        destructive=destructive,
    )


async def _call(
    server: McpServer, remote: str, arguments: dict[str, Any], ctx: ToolContext, concurrent: bool, task: bool
) -> ToolOutput:
    conn = _connection(server)
    if server.command is None:
        return await _call_once(conn, remote, arguments, ctx, task)
    # In the order the model made them: reads beside reads, a write alone (a read made after a
    # write in one batch would otherwise see the state before it: the memory server's read_graph).
    async with conn.gate.read() if concurrent else conn.gate.write():
        return await _call_once(conn, remote, arguments, ctx, task)


async def _call_once(
    conn: Connection, remote: str, arguments: dict[str, Any], ctx: ToolContext, task: bool
) -> ToolOutput:
    out = await _call_on_live(conn, remote, arguments, ctx, task)
    if (why := conn.restarted) is not None:
        conn.restarted = None
        # Told where the model looks: the restart lost whatever the server held in memory.
        note = (
            f"[MCP server `{conn.server.name}` was restarted before this call: {why}. What it held in memory is gone.]"
        )
        out = dataclasses.replace(out, content=f"{note}\n{out.content}")
    return out


async def _call_on_live(
    conn: Connection, remote: str, arguments: dict[str, Any], ctx: ToolContext, task: bool
) -> ToolOutput:
    server = conn.server
    where = {"mcp": {"server": server.name, "tool": remote}}
    retried = False
    while True:
        try:
            await conn.ensure()  # restarts a server that died since the last call
        except McpConnectionError as exc:
            return ToolOutput(
                f"MCP server `{server.name}` is gone and could not be restarted: {exc.message}",
                is_error=True,
                details=where,
            )
        try:
            result = await conn.call(remote, arguments, timeout=server.call_timeout, progress=ctx.report, task=task)
        except ConnectionGone as exc:
            if isinstance(exc, SessionLost) and not retried:
                retried = True
                continue  # refused before it ran: safe to send again on a new session
            return ToolOutput(
                f"MCP server `{server.name}` went away during this call, so its outcome is unknown: {exc}\n"
                "The server will be restarted at the next call of one of its tools.",
                is_error=True,
                details=where,
            )
        except AnswerTooLarge as exc:
            return ToolOutput(f"MCP tool `{remote}` of server `{server.name}`: {exc}", is_error=True, details=where)
        except CallTimedOut:
            return ToolOutput(
                f"MCP tool `{remote}` of server `{server.name}` did not answer within {server.call_timeout:g} s "
                "(`call_timeout` in use_mcp()), so it was cancelled and its outcome is unknown. Check "
                "its effects before calling it again.",
                is_error=True,
                details=where,
            )
        return to_output(result, server.name, remote)


def unavailable_signals(old: dict[str, Any] | None, new: dict[str, Any]) -> list[SignalMessage]:
    """A `resources` signal naming servers that became unavailable since roster `old` (12.2).

    The roster keeps `{name: reason}` under `mcp_unavailable`, so a server still down at the
    next submission is not announced again; one that comes back shows up as mounted tools.
    """
    before = (old or {}).get("mcp_unavailable", {})
    fresh = {n: r for n, r in new.get("mcp_unavailable", {}).items() if n not in before}
    if not fresh:
        return []
    lines = [
        f"MCP server `{n}` is unavailable, so none of its tools (`mcp__{n}__*`) are mounted: " + reason.splitlines()[0]
        for n, reason in fresh.items()
    ]
    return [SignalMessage("resources", "Your resources changed.\n" + "\n".join(lines), lines)]
