"""MCP servers as tools: `use_mcp()` declares a server; `mount_mcp` connects it and builds its tools.

A server's tools are mounted as `mcp__<server>__<tool>` with the description and input schema
the server lists. Connections are process-wide (one per kernel): opened at the first render that
declares the server, on the runtime's loop, and reused by every later submission. A connection
that dies is reopened by the next render or call. The `mcp` SDK is imported lazily, by
`_mcp_connection`, and only when a server is first connected.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from flue_nb.runtime.errors import McpConnectionError
from flue_nb.runtime.messages import ImagePart, SignalMessage
from flue_nb.runtime.providers.model import ToolSpec
from flue_nb.runtime.tools._mcp_connection import Connection, ConnectionGone
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput

__all__ = [
    "McpServer",
    "McpServerStatus",
    "McpTool",
    "close_mcp_servers",
    "mcp_servers",
    "mount_mcp",
    "unavailable_signals",
]

NAME_LIMIT = 64
"""Longest tool name every provider accepts."""
RETRY_AFTER = 60.0
"""Seconds a server that failed to connect is left alone between the turns of one run (a hanging
URL would otherwise cost its full timeout at every turn). A submission's start always retries,
and a server that dies after connecting is restarted at once."""

_NAME_OK = re.compile(r"^[A-Za-z0-9_-]+$")


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

    @property
    def target(self) -> str:
        """The command line or URL, for messages."""
        return " ".join(self.command) if self.command is not None else str(self.url)

    @property
    def key(self) -> tuple[Any, ...]:
        """What identifies one connection: everything but the tool filter and `optional`."""
        return (self.name, self.command, self.url, self.env, self.cwd, self.headers)


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

    def spec(self) -> ToolSpec:
        """The server's name, description and schema, as the model sees them."""
        if self._spec is None:
            self._spec = ToolSpec(self.name, self.description, self.schema)
        return self._spec


def tool_name(server: str, remote: str) -> str:
    """`mcp__<server>__<tool>`, with characters providers refuse replaced and long names shortened."""
    name = f"mcp__{server}__{re.sub(r'[^A-Za-z0-9_-]', '_', remote)}"
    if len(name) > NAME_LIMIT:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[: NAME_LIMIT - 9]}_{digest}"
    return name


# --- the process-wide registry ------------------------------------------------------------------

_connections: dict[tuple[Any, ...], Connection] = {}
_tools: dict[tuple[Any, ...], tuple[int, list[McpTool]]] = {}
"""Per connection: the generation its tools were built for, and the tools (schemas are costly)."""


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
    cached = _tools.get(conn.server.key)
    if cached is not None and cached[0] == conn.generation:
        return cached[1]
    built = [_build_tool(conn, t) for t in conn.listing]
    _tools[conn.server.key] = (conn.generation, built)
    return built


def _select(server: McpServer, tools: list[McpTool]) -> list[McpTool]:
    if server.tools is None:
        return tools
    by_remote = {t.remote_name: t for t in tools}
    missing = [n for n in server.tools if n not in by_remote]
    if missing:
        listed = ", ".join(f"`{t.remote_name}`" for t in tools) or "none"
        raise McpConnectionError(
            f"MCP server `{server.name}` has no tool "
            + ", ".join(f"`{n}`" for n in missing)
            + f" (it lists: {listed}); fix `tools=` in use_mcp()",
            server=server.name,
        )
    return [by_remote[n] for n in server.tools]


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
        recent = conn.failed_at is not None and time.monotonic() - conn.failed_at < RETRY_AFTER
        if not conn.alive and not first and recent:
            return McpConnectionError(conn.error or "unavailable")
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
            tools.extend(_select(server, _server_tools(conn)))
        elif first and not server.optional:
            raise failure
        else:
            unavailable[server.name] = conn.error or str(failure)
    return tools, unavailable


def mcp_servers() -> list[McpServerStatus]:
    """What this process is connected to (or failed to connect to), in the order first used."""
    out = []
    for conn in list(_connections.values()):
        names = tuple(tool_name(conn.server.name, t.name) for t in conn.listing) if conn.alive else ()
        out.append(McpServerStatus(conn.server.name, conn.server.target, conn.state, names, conn.error))
    return out


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

    async def run(args: BaseModel, ctx: ToolContext) -> ToolOutput:
        arguments = dict(args.model_extra or {})
        invalid = _validate(schema, arguments, tool_name(server.name, remote))
        if invalid is not None:
            return ToolOutput(invalid, is_error=True)
        out: ToolOutput = await _on_runtime_loop(lambda: _call(server, remote, arguments))
        return out

    return McpTool(
        tool_name(server.name, remote),
        description,
        _AnyInput,
        run,
        server=server.name,
        remote_name=remote,
        schema=schema,
    )


async def _call(server: McpServer, remote: str, arguments: dict[str, Any]) -> ToolOutput:
    conn = _connection(server)
    try:
        await conn.ensure()  # reopens a server that died since the render
    except McpConnectionError as exc:
        return ToolOutput(
            f"MCP server `{server.name}` is gone and could not be restarted: {exc.message}",
            is_error=True,
            details={"mcp": {"server": server.name, "tool": remote}},
        )
    try:
        result = await conn.call(remote, arguments)
    except ConnectionGone as exc:
        return ToolOutput(
            f"MCP server `{server.name}` went away during this call, so its outcome is unknown: {exc}\n"
            "The server will be restarted at the next call of one of its tools.",
            is_error=True,
            details={"mcp": {"server": server.name, "tool": remote}},
        )
    return to_output(result, server.name, remote)


def _validate(schema: dict[str, Any], arguments: dict[str, Any], name: str) -> str | None:
    """Check the input against the server's schema (contract 1.6): None, or what is wrong."""
    try:
        from jsonschema.exceptions import SchemaError
        from jsonschema.validators import validator_for
    except ImportError:  # pragma: no cover - jsonschema comes with the mcp SDK
        return None
    try:
        validator = validator_for(schema)(schema)
        errors = sorted(validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.path])
    except SchemaError:
        return None  # the server's schema is broken; let the server judge the input
    if not errors:
        return None
    lines = [f"Invalid input for tool `{name}`:"]
    for err in errors:
        loc = ".".join(str(p) for p in err.path) or "(input)"
        lines.append(f"- field `{loc}`: {err.message}")
    lines.append("Fix the input and call the tool again.")
    return "\n".join(lines)


def to_output(result: Any, server: str, remote: str) -> ToolOutput:
    """A `CallToolResult` as an ordinary tool result: text and images for the model.

    Each image becomes an image block of the result (scaled to the model's limits, stored once by
    digest), with a line in the text that names it; one the model cannot take (SVG, say) is
    only named.
    """
    from flue_nb.runtime.errors import ConfigError
    from flue_nb.runtime.images import image_from_bytes

    texts: list[str] = []
    images: list[ImagePart] = []
    for block in result.content:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(block.text)
        elif kind == "image":
            line = f"[image {len(images) + 1}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
            try:
                images.append(image_from_bytes(base64.b64decode(block.data), label=f"{server} image {len(images) + 1}"))
            except (ConfigError, ValueError) as exc:
                line = f"[image: {block.mime_type}, not shown: {exc}]"
            texts.append(line)
        elif kind == "audio":
            texts.append(f"[audio: {block.mime_type}, not shown]")
        elif kind == "resource":
            res = block.resource
            text = getattr(res, "text", None)
            texts.append(
                text
                if text is not None
                else f"[resource {res.uri}: {getattr(res, 'mime_type', None) or 'binary'}, not shown]"
            )
        elif kind == "resource_link":
            texts.append(
                f"[resource link: {block.uri}" + (f" — {block.description}" if block.description else "") + "]"
            )
        else:
            texts.append(f"[{kind} content, not shown]")
    if not texts and result.structured_content is not None:
        texts.append(json.dumps(result.structured_content, default=str))
    details: dict[str, Any] = {"mcp": {"server": server, "tool": remote}}
    return ToolOutput("\n".join(texts), is_error=bool(result.is_error), details=details, images=images)


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
