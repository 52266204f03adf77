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

__all__ = ["Endpoint", "Guard", "mcp_tool"]

_LOOPBACK = ("127.0.0.1", "localhost", "::1")

Call = Callable[[str, str, dict[str, Any]], Awaitable[CallOutcome]]
"""`(client name, tool name, arguments) -> outcome`."""


class Guard:
    """ASGI middleware: Origin checked, then the bearer token, before anything else runs."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", [])}
        origin = headers.get("origin")
        if origin is not None and not _loopback_origin(origin.decode("latin-1")):
            await _bare(send, 403, b"Forbidden")
            return
        if not hmac.compare_digest(headers.get("authorization", b""), self._expected):
            await _bare(send, 401, b"")
            return
        await self.app(scope, receive, send)


def _loopback_origin(origin: str) -> bool:
    try:
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and parts.hostname in _LOOPBACK
    except ValueError:
        return False


async def _bare(send: Any, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


def mcp_tool(tool: Tool) -> Any:
    """The MCP description of one of our tools: the name, description and schema our model sees."""
    import mcp.types as types

    spec = tool.spec()
    return types.Tool(name=spec.name, description=spec.description, input_schema=dict(spec.input_schema))


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
        names = {t.name for t in tools}

        async def list_tools(ctx: Any, params: Any) -> Any:
            return types.ListToolsResult(tools=offered)

        async def call_tool(ctx: Any, params: Any) -> Any:
            if params.name not in names:
                return _result(CallOutcome(f"Unknown tool `{params.name}`; this kernel offers {sorted(names)}.", True))
            return _result(await call(_client_name(ctx), params.name, dict(params.arguments or {})))

        server = Server("flue-kernel", on_list_tools=list_tools, on_call_tool=call_tool)
        # The SDK's own Host/Origin check stays on for loopback; past loopback (an explicit
        # --host) the Host header is whatever name clients use, and `Guard` still checks Origin.
        loopback = host in _LOOPBACK
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=loopback,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
        app = server.streamable_http_app(transport_security=security, host=host, json_response=True)
        self.sock = _bind(host, port)
        self.host, self.port = host, self.sock.getsockname()[1]
        self._uvicorn = _uvicorn(Guard(app, token))
        self._thread = threading.Thread(target=self._serve, name="flue-serve", daemon=True)
        self._started = threading.Event()
        self._thread.start()
        self._started.wait(10)

    @property
    def url(self) -> str:
        """Where clients connect."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/mcp"

    def _serve(self) -> None:
        async def main() -> None:
            self._started.set()
            await self._uvicorn.serve(sockets=[self.sock])

        asyncio.run(main())

    @property
    def running(self) -> bool:
        """True while the server thread serves."""
        return self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and close the socket."""
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
