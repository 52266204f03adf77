"""The MCP endpoint: the official SDK's streamable HTTP app behind a token and Origin guard.

Every request passes `Guard` first: an `Origin` header that is not this machine's loopback is
refused with 403 (the transport specification's defence against DNS rebinding; clients outside
a browser send none), then a missing or wrong bearer token gets a bare 401 (compared in constant
time). Only then does the SDK see it. uvicorn serves it on a thread of its own with its own loop;
the tools' code still runs on the kernel's main thread (`_main_thread`).
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import logging
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from flue_nb.notebook.serve._calls import CallOutcome
from flue_nb.runtime.tools.tool import Tool

__all__ = ["Endpoint", "Guard", "mcp_tool", "tool_hints"]

_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_STOPPED = -32000
"""The JSON-RPC error code (implementation-defined server error) of a call cut short by `stop()`."""

Call = Callable[[str, str, dict[str, Any], str], Awaitable[CallOutcome]]
"""`(client name, tool name, arguments, holder) -> outcome`; the holder names the token the call
came with ("" for the server's own, else what `Guard.admit` was given)."""


class Guard:
    """ASGI middleware: Host (when serving on loopback) and Origin checked, then the bearer token,
    before anything else runs. Names compare case-insensitively, the scheme `Bearer` too (RFC
    6750), and a Host without a port is taken as naming this server (its default port)."""

    def __init__(
        self,
        app: Any,
        token: str,
        *,
        check_host: bool = False,
        stopping: Callable[[], asyncio.Event | None] = lambda: None,
    ) -> None:
        self.app = app
        self._tokens: dict[bytes, str] = {token.encode(): ""}
        self._check_host = check_host
        self._stopping = stopping

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", [])}
        if self._check_host and not _loopback_host(headers.get("host", b"").decode("latin-1")):
            # DNS rebinding: a page whose name now points at 127.0.0.1 sends its own name.
            await _bare(send, 421, b"Invalid Host header")
            return
        origin = headers.get("origin")
        if origin is not None and not _loopback_origin(origin.decode("latin-1")):
            await _bare(send, 403, b"Forbidden")
            return
        scheme, _, credential = headers.get("authorization", b"").strip().partition(b" ")
        holder = self._holder(credential.strip()) if scheme.lower() == b"bearer" else None
        if holder is None:
            await _bare(send, 401, b"")
            return
        scope["flue.holder"] = holder
        if scope.get("method") == "GET":
            await _until_stopped(self.app, scope, receive, send, self._stopping())
            return
        if scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        # A client that goes away mid-call cancels it. The SDK answers a POST with one JSON body
        # and reads nothing more from the connection, so its loss would go unnoticed: watch it.
        gone = asyncio.Event()
        scope["flue.gone"] = gone
        watching = _Watch(receive, gone)
        try:
            await self.app(scope, watching, send)
        finally:
            watching.close()

    def admit(self, token: str, holder: str) -> None:
        """Accept `token` too; its requests carry `holder` to the call (`Call`)."""
        self._tokens = {**self._tokens, token.encode(): holder}

    def revoke(self, token: str) -> str | None:
        """No longer accept a token `admit` added; its holder (None: not one `admit` added)."""
        holder = self._tokens.get(token.encode())
        if not holder:
            return None  # the server's own token stays
        self._tokens = {k: v for k, v in self._tokens.items() if k != token.encode()}
        return holder

    def _holder(self, credential: bytes) -> str | None:
        """Whose token `credential` is (None: no one's); every token is compared, in constant time."""
        found = None
        for token, holder in self._tokens.items():
            if hmac.compare_digest(credential, token):
                found = holder
        return found


async def _until_stopped(app: Any, scope: Any, receive: Any, send: Any, stopping: asyncio.Event | None) -> None:
    """Serve a client's event stream (its GET) until the client leaves or the server stops.

    A client keeps that stream open for as long as its session lasts: stopping the server used
    to wait for it, then cut it off, with uvicorn's tracebacks on stderr. On `stop()` the stream
    is told its client left, and ends as a complete response.
    """
    if stopping is None:
        await app(scope, receive, send)
        return
    ended = {"started": False, "complete": False}
    stopped = asyncio.ensure_future(stopping.wait())

    async def receiving() -> Any:
        message = asyncio.ensure_future(receive())
        await asyncio.wait({message, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if message.done():
            return message.result()
        message.cancel()
        return {"type": "http.disconnect"}

    async def sending(message: Any) -> None:
        if message.get("type") == "http.response.start":
            ended["started"] = True
        elif message.get("type") == "http.response.body" and not message.get("more_body", False):
            ended["complete"] = True
        await send(message)

    try:
        await app(scope, receiving, sending)
    finally:
        stopped.cancel()
    if stopping.is_set() and ended["started"] and not ended["complete"]:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class _Watch:
    """An ASGI `receive` that, once the body is read, keeps listening for the disconnect."""

    def __init__(self, receive: Any, gone: asyncio.Event) -> None:
        self._receive = receive
        self._gone = gone
        self._after: asyncio.Future[Any] | None = None

    async def _listen(self) -> Any:
        message = await self._receive()
        if message.get("type") == "http.disconnect":
            self._gone.set()
        return message

    async def __call__(self) -> Any:
        if self._after is not None:
            return await asyncio.shield(self._after)
        message = await self._receive()
        if message.get("type") == "http.disconnect":
            self._gone.set()
        elif message.get("type") == "http.request" and not message.get("more_body", False):
            self._after = asyncio.ensure_future(self._listen())
        return message

    def close(self) -> None:
        """The response is sent: stop listening."""
        if self._after is not None and not self._after.done():
            self._after.cancel()


def _scope(ctx: Any) -> dict[str, Any]:
    scope = getattr(getattr(ctx, "request", None), "scope", None)
    return scope if isinstance(scope, dict) else {}


def _gone_event(ctx: Any) -> asyncio.Event | None:
    """The event `Guard` sets when the client of this request disconnects, if it is watched."""
    gone = _scope(ctx).get("flue.gone")
    return gone if isinstance(gone, asyncio.Event) else None


def _loopback_host(host: str) -> bool:
    try:
        return urlsplit(f"http://{host}").hostname in _LOOPBACK
    except ValueError:
        return False


def _loopback_origin(origin: str) -> bool:
    try:
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and parts.hostname in _LOOPBACK
    except ValueError:
        return False


async def _bare(send: Any, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


# (read-only, destructive, idempotent, open-world) for each tool `flue.kernel()` offers: what an
# outside client's allow rules go by (MCP's ToolAnnotations). Hints, as the spec says: `bash` and
# `python` can do anything, so they claim the most; the notebook's readers claim the least.
_HINTS: dict[str, tuple[bool, bool, bool, bool]] = {
    "read": (True, False, True, False),
    "grep": (True, False, True, False),
    "glob": (True, False, True, False),
    "cells": (True, False, True, False),
    "cell": (True, False, True, False),
    "variables": (True, False, True, False),
    "write": (False, True, True, False),  # replaces a file; the same call twice leaves the same file
    "edit": (False, True, False, False),
    "insert_cell": (False, False, False, False),
    "move_cell": (False, False, False, False),
    "edit_cell": (False, True, False, False),
    "delete_cell": (False, True, False, False),
    "run_cell": (False, True, False, True),
    "bash": (False, True, False, True),
    "python": (False, True, False, True),
}


def tool_hints(tool: Tool) -> dict[str, bool]:
    """MCP's behaviour hints for `tool` (camelCase keys); a tool we know nothing of claims nothing
    but what it declares (`read_only`), and MCP's defaults then treat it as able to do anything."""
    hints = _HINTS.get(tool.name)
    if hints is None:
        return {"readOnlyHint": True} if getattr(tool, "read_only", False) else {}
    keys = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
    return dict(zip(keys, hints, strict=True))


def mcp_tool(tool: Tool) -> Any:
    """The MCP description of one of our tools: the name, description and schema our model sees,
    and the behaviour hints an outside client's allow rules can go by."""
    import mcp.types as types

    spec = tool.spec()
    hints = tool_hints(tool)
    return types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=dict(spec.input_schema),
        annotations=types.ToolAnnotations.model_validate(hints) if hints else None,
    )


def _result(outcome: CallOutcome) -> Any:
    import mcp.types as types

    content: list[Any] = [types.TextContent(text=outcome.content)]
    for image in outcome.images:
        if getattr(image, "data", None):
            data = base64.b64encode(image.data).decode()
            content.append(types.ImageContent(data=data, mime_type=image.media_type))
    return types.CallToolResult(content=content, is_error=outcome.is_error)


def _client_name(ctx: Any) -> str:
    params = getattr(getattr(ctx, "session", None), "client_params", None)
    info = getattr(params, "client_info", None)
    name = str(getattr(info, "name", "") or "").strip()
    return name or "client"


class Endpoint:
    """The MCP server on a socket, served by uvicorn on its own thread until `stop()`."""

    def __init__(self, tools: list[Tool], call: Call, *, host: str, port: int, token: str) -> None:
        import mcp.types as types
        from mcp.server.lowlevel import Server
        from mcp.server.transport_security import TransportSecuritySettings

        offered = [mcp_tool(t) for t in tools]
        self._inflight = 0
        self._idle = threading.Event()
        self._idle.set()
        self._stopping: asyncio.Event | None = None  # made on the server's loop

        async def list_tools(ctx: Any, params: Any) -> Any:
            return types.ListToolsResult(tools=offered)

        async def call_tool(ctx: Any, params: Any) -> Any:
            # A tool we do not offer is the recorder's to refuse too: every call is recorded.
            client, arguments = _client_name(ctx), dict(params.arguments or {})
            holder = str(_scope(ctx).get("flue.holder") or "")
            running = lambda: call(client, params.name, arguments, holder)  # noqa: E731
            return _result(await self._answer(running, _gone_event(ctx)))

        server = Server("flue-kernel", on_list_tools=list_tools, on_call_tool=call_tool)
        # `Guard` checks Host (on loopback) and Origin; the SDK's own check compares them
        # case-sensitively and wants a port in Host, refusing what real clients send. Past
        # loopback (an explicit --host) Host is whatever name clients use; Origin is still checked.
        loopback = host in _LOOPBACK
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        app = server.streamable_http_app(transport_security=security, host=host, json_response=True)
        self.sock = _bind(host, port)
        self.host, self.port = host, self.sock.getsockname()[1]
        self.guard = Guard(app, token, check_host=loopback, stopping=lambda: self._stopping)
        self._uvicorn = _uvicorn(self.guard)
        self._thread = threading.Thread(target=self._serve, name="flue-serve", daemon=True)
        self._started = threading.Event()
        self._thread.start()
        self._started.wait(10)

    @property
    def url(self) -> str:
        """Where clients connect (on this machine's loopback when every interface is served)."""
        host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)  # noqa: S104
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/mcp"

    async def _answer(self, running: Callable[[], Awaitable[CallOutcome]], gone: asyncio.Event | None) -> CallOutcome:
        """The call's outcome; if `stop()` comes first, the call is aborted and the client gets
        a JSON-RPC error saying so (not a bare 500 from a server torn down under it); if its
        client disconnects, the call is aborted (as when the client cancels it)."""
        from mcp.shared.exceptions import MCPError

        stopping = self._stopping
        if stopping is None or stopping.is_set():
            raise MCPError(_STOPPED, "the kernel stopped serving (flue.serve().stop()); this call did not run")
        task = asyncio.ensure_future(running())
        waiter = asyncio.ensure_future(stopping.wait())
        left = asyncio.ensure_future(gone.wait()) if gone is not None else None
        self._inflight += 1
        self._idle.clear()
        try:
            await asyncio.wait({task, waiter} | ({left} if left else set()), return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                return task.result()
            task.cancel()  # the recorder aborts the call's submission, as on the client's cancel
            await asyncio.gather(task, return_exceptions=True)
            if not stopping.is_set():
                return CallOutcome("The client disconnected; the call was aborted.", True)  # read by no one
            raise MCPError(
                _STOPPED, "the kernel stopped serving (flue.serve().stop()) during this call; it was aborted"
            )
        except asyncio.CancelledError:
            task.cancel()  # the client cancelled the request: so is the call
            raise
        finally:
            waiter.cancel()
            if left is not None:
                left.cancel()
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    def _serve(self) -> None:
        async def main() -> None:
            self._stopping = asyncio.Event()
            self._loop = asyncio.get_running_loop()
            self._started.set()
            await self._uvicorn.serve(sockets=[self.sock])

        asyncio.run(main())

    @property
    def running(self) -> bool:
        """True while the server thread serves."""
        return self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and close the socket; calls under way are aborted and answered first."""
        stopping, loop = self._stopping, getattr(self, "_loop", None)
        if stopping is not None and loop is not None and self._thread.is_alive():
            loop.call_soon_threadsafe(stopping.set)
            self._idle.wait(timeout)  # each call's JSON-RPC error is on its way before we shut down
        self._uvicorn.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._uvicorn.force_exit = True
            self._thread.join(timeout)
        self.sock.close()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto named: asyncio sets TCP_NODELAY on accepted sockets only when it is IPPROTO_TCP, and
    # without it every response after a connection's first waited ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(64)
    sock.set_inheritable(False)
    return sock


def _uvicorn(app: Any) -> Any:
    import uvicorn

    # uvicorn's access log would print every request under whichever cell is running.
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    return uvicorn.Server(config)
