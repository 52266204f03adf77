"""One live connection to an MCP server, through the official `mcp` SDK.

The SDK's transports and `ClientSession` are anyio context managers whose task groups must be
entered and left by one task. So each connection has an *owner task* on the runtime's loop that
opens the transport and the session, lists the tools, reports ready and then waits to be told to
close; tool calls from other tasks of the same loop share its session. A connection that dies
(the server exits, the HTTP endpoint goes away) is marked closed at the first call that notices,
and the next `ensure()` opens a fresh one.

The SDK is imported here only, inside functions: `import flue_nb` never loads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from typing import TYPE_CHECKING, Any, Literal

from flue_nb.runtime._redact import redact, register_env, register_headers
from flue_nb.runtime.errors import McpConnectionError

if TYPE_CHECKING:
    from flue_nb.runtime.tools.mcp import McpServer

__all__ = ["Connection", "ConnectionGone", "State"]

State = Literal["connecting", "connected", "closed", "failed"]

STDERR_TAIL = 2000
"""Characters of a stdio server's stderr quoted when it fails."""


class ConnectionGone(Exception):
    """The server went away during a call or before it (the call's outcome is unknown)."""


def _import_sdk() -> Any:
    try:
        import mcp
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise McpConnectionError("`use_mcp()` needs the `mcp` package: pip install 'flue_nb[mcp]'") from exc
    return mcp


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (possibly nested) exception groups from anyio task groups."""
    while isinstance(getattr(exc, "exceptions", None), tuple) and exc.exceptions:  # type: ignore[attr-defined]
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return exc


def _is_connection_closed(exc: BaseException) -> bool:
    from mcp.shared.exceptions import MCPError
    from mcp_types.jsonrpc import CONNECTION_CLOSED

    leaf = _leaf(exc)
    if isinstance(leaf, MCPError):
        return leaf.code == CONNECTION_CLOSED
    return isinstance(leaf, (ConnectionError, EOFError, OSError)) or type(leaf).__name__ in {
        "ClosedResourceError",
        "BrokenResourceError",
        "EndOfStream",
        "ConnectError",
        "RemoteProtocolError",
    }


class Connection:
    """A connection to one MCP server, opened on demand and reused until it dies or is closed."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.state: State = "closed"
        self.error: str | None = None
        """Why the last connect failed or the connection died."""
        self.failed_at: float | None = None
        """When the last connect failed (a connection that died is reopened at once)."""
        self.listing: list[Any] = []
        """The server's tools (`mcp.types.Tool`) as last listed."""
        self.generation = 0
        """Bumped at every successful connect or re-listing: cached `Tool`s compare against it."""
        self.session: Any = None
        self.stale = False
        """The server said its tool list changed; re-list before the next mount."""
        self._lock: asyncio.Lock | None = None
        self._stop: asyncio.Event | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stderr: Any = None

    @property
    def alive(self) -> bool:
        """True while the session is open and no call has seen it die."""
        return self.state == "connected" and self.session is not None

    def stderr_tail(self, since: int = 0) -> str:
        """The end of what a stdio server wrote to stderr from offset `since` ("" for HTTP)."""
        f = self._stderr
        if f is None or f.closed:
            return ""
        try:
            f.flush()
            f.seek(since)
            text = f.read()
        except (OSError, ValueError):
            return ""
        # Redacted before the cut, which could leave a secret's prefix: what a server writes to
        # stderr reaches errors, the stored roster and the model's `resources` signal.
        # A margin beyond the tail so a secret across the cut is whole when it is redacted.
        return redact(str(text)[-(STDERR_TAIL + 4096) :])[-STDERR_TAIL:].strip()

    def _stderr_size(self) -> int:
        f = self._stderr
        if f is None or f.closed:
            return 0
        try:
            return os.fstat(f.fileno()).st_size
        except OSError:
            return 0

    # --- connecting ---------------------------------------------------------------------------

    async def ensure(self) -> None:
        """Open the connection unless it is alive; re-list tools the server said changed.

        Raises:
            McpConnectionError: the server could not be started, reached or initialised.
        """
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.alive:
                if self.stale:
                    await self._relist()
                return
            await self._shutdown()
            await self._open()

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._stop = asyncio.Event()
        self.state = "connecting"
        self.error = None
        self._owner = loop.create_task(self._own(ready, self._stop), name=f"flue-mcp-{self.server.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.server.timeout)
        except asyncio.TimeoutError:
            await self._shutdown(cancel=True)
            raise self._failure(f"it did not finish starting within {self.server.timeout:g} s") from None
        except McpConnectionError:
            await self._shutdown()
            raise
        except BaseException:
            await self._shutdown(cancel=True)
            raise

    def _failure(self, reason: str) -> McpConnectionError:
        """Record a failed connect and return the error that says so."""
        self.state = "failed"
        self.failed_at = time.monotonic()
        tail = self.stderr_tail()
        self.error = reason + (f"\nIts stderr ended with:\n{tail}" if tail else "")
        return McpConnectionError(
            f"could not connect to MCP server `{self.server.name}` ({self.server.target}): {self.error}\n"
            "Check the command or URL given to use_mcp(), or pass optional=True to run without it.",
            server=self.server.name,
        )

    def _transport(self) -> Any:
        server = self.server
        # What the author gives the server is a secret by the same rules as the kernel's own
        # environment: a server echoing its `*_API_KEY` must not hand it to the model (20.2).
        register_env(dict(server.env or ()))
        register_headers(dict(server.headers or ()))
        if server.command is not None:
            from mcp.client.stdio import StdioServerParameters, stdio_client

            if self._stderr is not None:
                self._stderr.close()
            self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
            params = StdioServerParameters(
                command=server.command[0],
                args=list(server.command[1:]),
                env=dict(server.env) if server.env is not None else None,
                cwd=server.cwd,
            )
            return stdio_client(params, errlog=self._stderr)
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        client = create_mcp_http_client(headers=dict(server.headers) if server.headers else None)
        assert server.url is not None  # use_mcp checked that a server has a command or a url
        return _owned_http(streamable_http_client(server.url, http_client=client), client)

    async def _own(self, ready: asyncio.Future[None], stop: asyncio.Event) -> None:
        """The owner task: open, report ready, wait for `stop`, close — all in this one task."""
        mcp = _import_sdk()
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(
                    mcp.ClientSession(read, write, message_handler=self._on_message)
                )
                await session.initialize()
                self.listing = await _list_tools(session)
                self.session = session
                self.state = "connected"
                self.failed_at = None
                self.stale = False
                self.generation += 1
                ready.set_result(None)
                await stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except BaseException as exc:  # noqa: BLE001 - reported to whoever waits for the connect
            if not ready.done():
                leaf = _leaf(exc)
                err = self._failure(_describe(leaf))
                err.__cause__ = leaf
                ready.set_exception(err)
            elif self.state == "connected":
                self._died(_describe(_leaf(exc)))
        finally:
            self.session = None
            if self.state in ("connected", "connecting"):
                self.state = "closed"

    async def _relist(self) -> None:
        try:
            self.listing = await _list_tools(self.session)
        except Exception as exc:  # noqa: BLE001 - a dead session is reopened by the next ensure()
            if _is_connection_closed(exc):
                self._died("the connection closed")
                await self._shutdown()
                await self._open()
                return
            raise
        self.stale = False
        self.generation += 1

    async def _on_message(self, message: Any) -> None:
        from mcp import types

        if isinstance(message, types.ToolListChangedNotification):
            self.stale = True

    # --- calling ------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """Call a tool on the live session; `ConnectionGone` when the server went away."""
        session = self.session
        if session is None or not self.alive:
            raise ConnectionGone(self.error or "the connection is closed")
        since = self._stderr_size()
        try:
            return await session.call_tool(tool, arguments)
        except Exception as exc:
            if _is_connection_closed(exc):
                self._died("the connection closed during the call (the server exited or crashed)", since)
                raise ConnectionGone(self.error) from exc
            raise

    def _died(self, reason: str, since: int | None = None) -> None:
        self.state = "closed"
        tail = self.stderr_tail(since) if since is not None else ""
        self.error = reason + (f"\nWhat it wrote to stderr meanwhile:\n{tail}" if tail else "")
        if self._stop is not None:
            self._stop.set()  # let the owner task unwind the transport (reaps the process)

    # --- closing ------------------------------------------------------------------------------

    async def _shutdown(self, *, cancel: bool = False) -> None:
        owner, self._owner = self._owner, None
        if owner is not None:
            if self._stop is not None:
                self._stop.set()
            if cancel:
                owner.cancel()
            await asyncio.wait({owner})  # not gather: our own cancellation must not cancel the unwinding
            if not owner.cancelled():
                owner.exception()  # the owner reports through `ready`; nothing is left to raise

    async def close(self) -> None:
        """Close the session and stop the server process (stdio)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            await self._shutdown()
            self.state = "closed"
            if self._stderr is not None:
                self._stderr.close()


@contextlib.asynccontextmanager
async def _owned_http(transport: Any, client: Any) -> Any:
    async with client, transport as streams:
        yield streams


async def _list_tools(session: Any) -> list[Any]:
    from mcp import types

    tools: list[Any] = []
    cursor = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        result = await session.list_tools(params=params)
        tools.extend(result.tools)
        cursor = result.next_cursor
        if not cursor:
            return tools


def _describe(exc: BaseException) -> str:
    from mcp.shared.exceptions import MCPError

    if isinstance(exc, FileNotFoundError):
        return f"the command was not found ({exc.filename or exc})"
    if isinstance(exc, MCPError):
        if _is_connection_closed(exc):
            return "the server closed the connection before it was ready (did it exit?)"
        return f"the server answered with an error: {exc.message}"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
