"""The streamable-HTTP transport of an MCP server, with the stdio transport's limit on one message.

The SDK reads a plain-JSON answer whole before it parses it (a 50 MB answer took seconds and
held 50 MB+ only to be cut to 50 KB), and its SSE reader refuses any event over 1 MiB, which
failed ordinary answers of a few MB as if the server had gone away. Here an httpx response hook
wraps each response's byte stream: a JSON body, or one SSE event (counted from the byte after
the blank line that ends the previous event, so a stream open for hours is not cut), stops being
read once it passes `_mcp_stdio.MAX_MESSAGE`. The error raised is one the SDK routes to the
request the response answers (`StreamError` on the JSON path, `SSEError` on the SSE path: both
end in a JSON-RPC error for that id, not in a dead transport), and `HttpWatch.too_large` tells
that error apart from a real connection failure.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx2

from flue_nb.runtime.tools import _mcp_stdio

__all__ = ["HttpWatch", "http_transport"]

log = logging.getLogger("flue_nb")

_BOUNDARIES = (b"\n\n", b"\n\r", b"\r\r")
"""Two line ends in a row end an SSE event (with \\r\\n, \\n and \\r all line ends, a blank line
always shows as one of these pairs)."""


def _why(read: int, declared: int | None) -> str:
    limit = _mcp_stdio.MAX_MESSAGE
    seen = (
        f"its Content-Length says {declared / 1e6:.1f} MB, so none of it was read"
        if declared is not None
        else f"flue_nb stopped reading it at {read / 1e6:.1f} MB"
    )
    return (
        f"the MCP server's answer is over the {limit / (1024 * 1024):g} MiB flue_nb reads from one "
        f"message ({seen}); it was dropped. Ask the tool for less (a page, a filter, a smaller range)."
    )


class _JsonTooLarge(httpx2.StreamError):
    """A plain-JSON answer past the limit (the SDK turns a `StreamError` into an error for its request)."""


class _EventTooLarge(httpx2.SSEError):
    """One SSE event past the limit (the SDK turns an `SSEError` into an error for its request)."""


def _not_ours(record: logging.LogRecord) -> bool:
    """A log filter: drop the SDK's traceback for an answer we dropped (our error result says it)."""
    return not (record.exc_info and isinstance(record.exc_info[1], (_JsonTooLarge, _EventTooLarge)))


logging.getLogger("mcp.client.streamable_http").addFilter(_not_ours)


class _Bounded(httpx2.AsyncByteStream):
    """A response's bytes, passed on until one message (the body, or one SSE event) passes the limit."""

    def __init__(self, inner: Any, events: bool, declared: int | None, refused: Any) -> None:
        self._inner = inner
        self._events = events
        self._declared = declared
        self._refused = refused

    async def __aiter__(self) -> AsyncIterator[bytes]:
        limit = _mcp_stdio.MAX_MESSAGE
        if self._declared is not None and self._declared > limit:
            raise _JsonTooLarge(self._refused(_why(0, self._declared)))
        size = 0
        last = b""
        async for chunk in self._inner:
            if self._events:
                data = last + chunk
                end = max(data.rfind(pair) for pair in _BOUNDARIES)
                size = size + len(chunk) if end < 0 else len(data) - end - 2
                last = chunk[-1:]
            else:
                size += len(chunk)
            if size > limit:
                error = _EventTooLarge if self._events else _JsonTooLarge
                raise error(self._refused(_why(size, None)))
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class HttpWatch:
    """What one HTTP session's responses showed that the SDK does not say: a refused session id,
    answers dropped for their size."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.session_refused = False
        self._dropped: list[str] = []

    def too_large(self, message: str) -> str | None:
        """Why the answer an SDK error `message` reports was dropped (None: it was not ours)."""
        for why in self._dropped:
            if why in message:
                self._dropped.remove(why)
                return why
        return None

    def _refused(self, request: Any, why: str) -> str:
        try:
            answers = json.loads(request.content).get("id") if request.method == "POST" else None
        except (ValueError, AttributeError, httpx2.RequestNotRead):
            answers = None
        if answers is None:  # the GET stream: no call waits for it, so only the log says so
            log.warning("flue_nb: MCP server `%s`: a message was dropped: %s", self.server, why)
        else:
            self._dropped.append(why)
        return why

    async def on_response(self, response: Any) -> None:
        """An httpx response hook: bound the body; notice an HTTP server refusing our session id.

        A server that restarted answers a request carrying the old `mcp-session-id` with 404 (the
        spec; the Python SDK) or 400 "No valid session ID" (the TypeScript SDK). Either way the
        request was refused before any tool ran, so a new session may send it again.
        """
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        events = kind == "text/event-stream"
        declared = response.headers.get("content-length")
        request = response.request
        response.stream = _Bounded(
            response.stream,
            events,
            int(declared) if declared and declared.isdigit() and not events else None,
            lambda why: self._refused(request, why),
        )
        if request.method == "DELETE" or "mcp-session-id" not in request.headers:
            return
        if response.status_code == 404:
            self.session_refused = True
        elif response.status_code == 400:
            with contextlib.suppress(httpx2.HTTPError, httpx2.StreamError):
                await response.aread()
                if b"session" in response.content.lower():
                    self.session_refused = True


@contextlib.asynccontextmanager
async def http_transport(url: str, headers: dict[str, str] | None, watch: HttpWatch) -> AsyncIterator[Any]:
    """The (read, write) streams of a streamable-HTTP session whose answers `watch` bounds."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    # Identity: the bound counts the bytes on the wire, which must be the bytes of the message.
    client = create_mcp_http_client(headers={"accept-encoding": "identity", **(headers or {})})
    client.event_hooks["response"].append(watch.on_response)
    # The SDK's own 1 MiB limit on an SSE event is replaced by ours (the same as on stdio); kept
    # as a backstop at twice ours, which counts every byte of the event, so ours trips first.
    limit: dict[str, Any] = {}
    if "max_sse_event_size" in inspect.signature(streamable_http_client).parameters:  # not in every mcp 2.x
        limit["max_sse_event_size"] = 2 * _mcp_stdio.MAX_MESSAGE
    transport = streamable_http_client(url, http_client=client, **limit)
    async with client, transport as streams:
        yield streams
