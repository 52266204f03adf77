"""Small adapters around the official `mcp` SDK: its import, its errors and its tool listing."""

from __future__ import annotations

import contextlib
from typing import Any

from flue_nb.runtime.errors import McpConnectionError

__all__ = [
    "describe",
    "import_sdk",
    "is_connection_closed",
    "leaf",
    "list_tools",
    "noise_line",
]


def import_sdk() -> Any:
    """The `mcp` package and the client modules used here, or an error saying how to install it.

    Seconds of imports the first time: `Connection` runs this in a worker thread before it
    starts a server's clock, so neither the runtime's loop nor the start timeout pays for it.
    """
    try:
        import mcp
        import mcp.client.stdio
        import mcp.client.streamable_http
        import mcp.shared._httpx_utils  # noqa: F401 - imported for the side effect of loading
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise McpConnectionError("`use_mcp()` needs the `mcp` package: pip install 'flue_nb[mcp]'") from exc
    return mcp


def leaf(exc: BaseException) -> BaseException:
    """The first real error inside (possibly nested) exception groups from anyio task groups."""
    while isinstance(getattr(exc, "exceptions", None), tuple) and exc.exceptions:  # type: ignore[attr-defined]
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return exc


def is_connection_closed(exc: BaseException) -> bool:
    """Whether `exc` says the connection to the server closed."""
    from mcp.shared.exceptions import MCPError
    from mcp_types.jsonrpc import CONNECTION_CLOSED

    inner = leaf(exc)
    if isinstance(inner, MCPError):
        return inner.code == CONNECTION_CLOSED
    return isinstance(inner, (ConnectionError, EOFError, OSError)) or type(inner).__name__ in {
        "ClosedResourceError",
        "BrokenResourceError",
        "EndOfStream",
        "ConnectError",
        "RemoteProtocolError",
    }


async def list_tools(session: Any) -> list[Any]:
    """Every tool the server lists, page after page."""
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


def noise_line(exc: Exception) -> str:
    """The stdout line an SDK parse error is about, quoted and cut short."""
    errors = getattr(exc, "errors", None)
    line: Any = None
    if callable(errors):
        with contextlib.suppress(Exception):
            line = errors()[0].get("input")
    text = repr(line if isinstance(line, str) else str(exc))
    if len(text) <= 200:
        return text
    from flue_nb.runtime.redact import redact

    text = redact(text)  # before the cut, which would leave a secret's first characters
    return text if len(text) <= 200 else text[:200] + "…"


def describe(exc: BaseException) -> str:
    """Why a connect failed, in a few words."""
    from mcp.shared.exceptions import MCPError

    if isinstance(exc, FileNotFoundError):
        return f"the command was not found ({exc.filename or exc})"
    if isinstance(exc, MCPError):
        if is_connection_closed(exc):
            return "the server closed the connection before it was ready (did it exit?)"
        return f"the server answered with an error: {exc.message}"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
