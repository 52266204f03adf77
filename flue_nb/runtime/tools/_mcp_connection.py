"""One live connection to an MCP server, through the official `mcp` SDK.

The SDK's transports and `ClientSession` are anyio context managers whose task groups must be
entered and left by one task. So each connection has an *owner task* on the runtime's loop that
opens the transport and the session, lists the tools, reports ready and then waits to be told to
close; tool calls from other tasks of the same loop share its session. A connection that dies
(the server exits, the HTTP endpoint goes away, an HTTP server restarts and forgets our session)
is noticed before the next call where it can be — a stdio server's stdout at its end, an HTTP
answer of 404 or 400 to our session id — or by the call itself, and `ensure()` opens a fresh one.

The SDK is imported here only, inside functions: `import flue_nb` never loads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from flue_nb.runtime.errors import McpConnectionError
from flue_nb.runtime.redact import redact, register_env, register_headers
from flue_nb.runtime.tools._locks import OrderedGate
from flue_nb.runtime.tools._mcp_sdk import (
    describe,
    import_sdk,
    is_connection_closed,
    leaf,
    list_tools,
    noise_line,
)
from flue_nb.runtime.tools._mcp_stdio import TOO_LARGE, UNREADABLE, exited, stdio_transport
from flue_nb.runtime.tools._mcp_tasks import call_as_task

if TYPE_CHECKING:
    from flue_nb.runtime.tools._mcp_http import HttpWatch
    from flue_nb.runtime.tools.mcp import McpServer

__all__ = ["AnswerTooLarge", "CallTimedOut", "Connection", "ConnectionGone", "SessionLost", "State"]

log = logging.getLogger("flue_nb")

State = Literal["connecting", "connected", "closed", "failed"]

STDERR_TAIL = 2000
"""Characters of a stdio server's stderr quoted when it fails."""
PING_TIMEOUT = 5.0
"""Seconds a stdio server whose last call timed out has to answer a ping before its next use: one
that does not (single-threaded, still stuck in that call) is restarted."""


class ConnectionGone(Exception):
    """The server went away during a call or before it (the call's outcome is unknown)."""


class SessionLost(ConnectionGone):
    """The HTTP server refused our session id (it restarted): the call never ran, so a new
    session may retry it."""


class AnswerTooLarge(Exception):
    """The server's answer to a call was over `_mcp_stdio.MAX_MESSAGE` and was dropped (on stdio
    and on HTTP), or could not be parsed at all."""


class CallTimedOut(Exception):
    """The server did not answer a call within its `call_timeout` (it was asked to cancel)."""


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
        self._dispatcher: Any = None
        self.stale = False
        """The server said its tool list changed; re-list before the next mount."""
        self.timed_out = False
        """The last connect failed by running out of time (so retrying it costs that time again)."""
        self.call_timed_out = False
        """A call of this stdio server timed out: ping it before its next use."""
        self.restarted: str | None = None
        """Why `ensure()` restarted a server that was not known dead, for the next call's result."""
        self.noise = 0
        """Lines the server wrote to stdout that are not JSON-RPC (ignored)."""
        self.gate = OrderedGate()
        """A stdio server's calls pass it in the order they were made: its read-only tools'
        calls overlap one another, any other call runs alone (one process, often one state
        file), and a read made after a write sees what the write did."""
        self._lock: asyncio.Lock | None = None
        self._stop: asyncio.Event | None = None
        self._owner: asyncio.Task[None] | None = None
        self._unwinding: set[asyncio.Task[None]] = set()
        """Owners of connects that timed out, still stopping their server in the background."""
        self._stderr: Any = None
        self._read: Any = None
        self._pid: int | None = None
        """The stdio server's process id while it runs (None for HTTP)."""
        self._http: HttpWatch | None = None
        """What the HTTP session's responses showed (None for stdio)."""

    @property
    def alive(self) -> bool:
        """True while the session is open and nothing has shown it dead."""
        return self.state == "connected" and self.session is not None and self._gone() is None

    def _gone(self) -> str | None:
        """Why a connection that looks open is not (None: no sign of it)."""
        if self._http is not None and self._http.session_refused:
            return "the server no longer knows our session (it restarted)"
        stats = getattr(self._read, "statistics", None)
        if stats is not None and stats().open_send_streams == 0:
            return "the server exited since its last call"
        if self._pid is not None and exited(self._pid):
            return "the server exited since its last call"
        return None

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
            if self.alive and self.call_timed_out and not await self._answers_ping():
                stuck = (
                    f"it did not answer a ping within {PING_TIMEOUT:g} s after a call of it timed out "
                    "(a server that handles one request at a time is still stuck in that call)"
                )
                self._died(stuck)
                self.restarted = stuck
                log.warning("flue_nb: MCP server `%s`: %s; starting it again", self.server.name, stuck)
            if self.alive:
                if self.stale:
                    await self._relist()
                return
            if self.state == "connected" and (why := self._gone()) is not None:
                self._died(why)
                log.info("flue_nb: MCP server `%s`: %s; starting it again", self.server.name, why)
            await self._shutdown()
            await self._open()

    async def _open(self) -> None:
        await asyncio.to_thread(import_sdk)  # off the loop, and before the start clock runs
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._stop = asyncio.Event()
        self.state = "connecting"
        self.error = None
        self.timed_out = False
        self.call_timed_out = False
        self._http = None
        self._owner = loop.create_task(self._own(ready, self._stop), name=f"flue-mcp-{self.server.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.server.timeout)
        except asyncio.TimeoutError:
            # Not awaited: stopping a server that hangs takes the SDK seconds more (it waits for
            # the process to exit, then escalates), and the timeout is what was asked for.
            self._shutdown_in_background()
            err = self._failure(f"it did not finish starting within {self.server.timeout:g} s")
            self.timed_out = True
            raise err from None
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

    def _shutdown_in_background(self) -> None:
        owner, self._owner = self._owner, None
        if owner is None:
            return
        if self._stop is not None:
            self._stop.set()
        owner.cancel()
        self._unwinding.add(owner)
        owner.add_done_callback(self._unwound)

    def _unwound(self, owner: asyncio.Task[None]) -> None:
        self._unwinding.discard(owner)
        if not owner.cancelled():
            owner.exception()  # reported through `ready` already

    def _transport(self) -> Any:
        server = self.server
        # What the author gives the server is a secret by the same rules as the kernel's own
        # environment: a server echoing its `*_API_KEY` must not hand it to the model (20.2).
        register_env(dict(server.env or ()))
        register_headers(dict(server.headers or ()))
        if server.command is not None:
            if self._stderr is not None:
                self._stderr.close()
            self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
            env = dict(server.env) if server.env is not None else None
            return stdio_transport(list(server.command), env, server.cwd, self._stderr, server.name, self._started)
        from flue_nb.runtime.tools._mcp_http import HttpWatch, http_transport

        assert server.url is not None  # use_mcp checked that a server has a command or a url
        self._http = HttpWatch(server.name)
        return http_transport(server.url, dict(server.headers) if server.headers else None, self._http)

    def _started(self, pid: int) -> None:
        self._pid = pid

    async def _own(self, ready: asyncio.Future[None], stop: asyncio.Event) -> None:
        """The owner task: open, report ready, wait for `stop`, close — all in this one task."""
        mcp = import_sdk()
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                self._read = read
                from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

                # Ours to hold: a task-augmented `tools/call` is sent on it (see _mcp_tasks).
                dispatcher = JSONRPCDispatcher(read, write)
                session = await stack.enter_async_context(
                    mcp.ClientSession(dispatcher=dispatcher, message_handler=self._on_message)
                )
                self._dispatcher = dispatcher
                await session.initialize()
                self.listing = await list_tools(session)
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
                inner = leaf(exc)
                err = self._failure(describe(inner))
                err.__cause__ = inner
                ready.set_exception(err)
            elif self.state == "connected":
                self._died(describe(leaf(exc)))
        finally:
            self.session = None
            self._read = None
            self._pid = None
            if self.state in ("connected", "connecting"):
                self.state = "closed"

    async def _relist(self) -> None:
        try:
            self.listing = await list_tools(self.session)
        except Exception as exc:  # noqa: BLE001 - a dead session is reopened by the next ensure()
            if is_connection_closed(exc):
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
        elif isinstance(message, Exception) and self.server.command is not None:
            self.noise += 1
            if self.noise == 1:
                log.warning(
                    "flue_nb: MCP server `%s` wrote a line that is not JSON-RPC to its stdout, which "
                    "is the protocol's channel; such lines are ignored (only this first one is logged): %s",
                    self.server.name,
                    noise_line(message),
                )

    # --- calling ------------------------------------------------------------------------------

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        timeout: float | None = None,
        progress: Callable[[float, float | None, str | None], None] | None = None,
        task: bool = False,
    ) -> Any:
        """Call a tool on the live session (as a task, created, polled and fetched, with `task`).

        Raises:
            SessionLost: the HTTP server refused our session (the call did not run).
            ConnectionGone: the server went away (the call's outcome is unknown).
            CallTimedOut: no answer within `timeout` seconds.
            AnswerTooLarge: the answer was too large to read, or could not be parsed.
        """
        from mcp.shared.exceptions import MCPError
        from mcp_types.jsonrpc import REQUEST_TIMEOUT

        session = self.session
        if session is None or not self.alive:
            raise ConnectionGone(self.error or "the connection is closed")
        since = self._stderr_size()

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            if progress is not None:
                progress(value, total, message)

        try:
            if task:
                return await call_as_task(
                    session, self._dispatcher, tool, arguments, timeout=timeout, progress=on_progress
                )
            return await session.call_tool(tool, arguments, read_timeout_seconds=timeout, progress_callback=on_progress)
        except Exception as exc:
            if self._http is not None and (why := self._http.too_large(str(exc))) is not None:
                raise AnswerTooLarge(why) from exc
            if self._http is not None and self._http.session_refused:
                self._died("the server no longer knows our session (it restarted)")
                raise SessionLost(self.error) from exc
            if is_connection_closed(exc):
                self._died("the connection closed during the call (the server exited or crashed)", since)
                raise ConnectionGone(self.error) from exc
            if isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT:
                # The SDK has sent the server `notifications/cancelled` for it; a server that
                # handles one request at a time may still be stuck in it, so ensure() pings.
                self.call_timed_out = self.server.command is not None
                raise CallTimedOut(str(timeout)) from exc
            if isinstance(exc, MCPError) and exc.code in (TOO_LARGE, UNREADABLE):
                raise AnswerTooLarge(exc.message) from exc
            raise

    async def _answers_ping(self) -> bool:
        """Whether the server answers a ping within `PING_TIMEOUT` (an error answer counts)."""
        from mcp.shared.exceptions import MCPError

        self.call_timed_out = False
        try:
            await asyncio.wait_for(self.session.send_ping(), PING_TIMEOUT)
        except asyncio.TimeoutError:
            return False
        except MCPError as exc:
            return not is_connection_closed(exc)
        except Exception as exc:  # noqa: BLE001 - a dead session is restarted like a stuck one
            if is_connection_closed(exc):
                return False
            raise
        return True

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
            if self._unwinding:
                await asyncio.wait(set(self._unwinding))
            self.state = "closed"
            if self._stderr is not None:
                self._stderr.close()
