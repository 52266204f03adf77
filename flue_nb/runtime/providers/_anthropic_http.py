"""The Messages API over plain httpx2, for requests sent while the `anthropic` SDK still loads.

Importing the SDK costs about a second (thousands of modules); httpx2, which the SDK itself sends
with, costs a tenth of that. So a process's first request does not wait for the SDK: it goes out
through this module, speaking the same wire protocol the SDK speaks (the same endpoint, headers
and body, the same reading of the SSE stream, the same status errors), while the SDK is imported
on a background thread for every later request. The provider tests run against both transports.

Nothing here knows flue_nb's messages or errors: the provider (`anthropic.py`) builds the
request's parameters and classifies `StatusFailure` and httpx2's exceptions, for both transports.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import httpx2

__all__ = ["API_VERSION", "DEFAULT_BASE_URL", "HttpTransport", "StatusFailure"]

API_VERSION = "2026-10-21"
"""The `anthropic-version` header the SDK sends (a test compares it with the SDK's constant)."""
DEFAULT_BASE_URL = "https://api.anthropic.com"


class StatusFailure(Exception):
    """The API answered with an error status, or sent `event: error` inside a 200 stream."""

    def __init__(self, message: str, *, status: int, body: object, headers: Mapping[str, str]) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.body = body
        self.headers = headers


class HttpTransport:
    """One streamed Messages API call on its own httpx2 client (closed by `close`)."""

    def __init__(
        self,
        *,
        credential: tuple[str, str],
        base_url: str | None,
        timeout: httpx2.Timeout,
        verify: Any,
        user_agent: str,
    ) -> None:
        _, secret = credential  # an API key and an auth token both travel as a bearer token
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        """The API root requests go to."""
        self._url = self.base_url + "/v1/messages"
        self._headers = {
            "Accept": "application/json",
            "Content-Type": "application/json",
            "User-Agent": user_agent,
            "anthropic-version": API_VERSION,
            "Authorization": f"Bearer {secret}",
        }
        # Redirects followed and TLS verified as the SDK's default client does.
        self._client = httpx2.AsyncClient(verify=verify, timeout=timeout, follow_redirects=True)

    @property
    def host(self) -> str:
        """The host the request goes to."""
        return httpx2.URL(self._url).host

    async def start(self, params: dict[str, Any]) -> _EventStream:
        """Send the request; return its event stream once the response has started.

        Raises `StatusFailure` for an error status, httpx2's exceptions for transport failures.
        """
        body = json.dumps({**params, "stream": True}, separators=(",", ":")).encode()
        request = self._client.build_request("POST", self._url, headers=self._headers, content=body)
        response = await self._client.send(request, stream=True)
        if response.status_code >= 400:
            try:
                raw = (await response.aread()).decode("utf-8", "replace").strip()
            finally:
                await response.aclose()
            raise _status_failure(response.status_code, raw, response.headers)
        return _EventStream(response)

    async def close(self) -> None:
        """Close the client and its connections."""
        await self._client.aclose()


def _status_failure(status: int, raw: str, headers: Mapping[str, str]) -> StatusFailure:
    # Worded as the SDK words it, so both transports' errors read alike.
    try:
        body: object = json.loads(raw)
    except ValueError:
        return StatusFailure(raw or f"Error code: {status}", status=status, body=raw, headers=headers)
    return StatusFailure(f"Error code: {status} - {body}", status=status, body=body, headers=headers)


class _EventStream:
    """The response's SSE events as objects with the SDK's attribute names."""

    def __init__(self, response: httpx2.Response) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[Any]:
        decoder = SSEDecoder()
        async for chunk in self._response.aiter_bytes():
            for event, data in decoder.feed(chunk):
                if (item := self._item(event, data)) is not None:
                    yield item
        for event, data in decoder.close():
            if (item := self._item(event, data)) is not None:
                yield item

    def _item(self, event: str | None, data: str) -> Any:
        # What the SDK's stream skips, raises and yields, in its order.
        if event is None or event == "ping":
            return None
        if event == "error":
            try:
                body: object = json.loads(data)
            except ValueError:
                body = data
            message = str(body) if body else f"Error code: {self._response.status_code}"
            raise StatusFailure(message, status=self._response.status_code, body=body, headers=self._response.headers)
        if not data:
            return None
        value = json.loads(data)
        if not isinstance(value, dict):
            raise json.JSONDecodeError("an SSE event's data is not a JSON object", data, 0)
        return Fields(value)

    async def close(self) -> None:
        """Close the response (and stop reading it)."""
        await self._response.aclose()


class Fields:
    """A JSON object read by attribute, as the SDK's event models are; a missing key reads None."""

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def __getattr__(self, name: str) -> Any:
        value = self._values.get(name)
        return Fields(value) if isinstance(value, dict) else value

    def as_dict(self) -> dict[str, Any]:
        """A copy of the object, as JSON gave it (for blocks kept verbatim)."""
        copy: dict[str, Any] = json.loads(json.dumps(self._values))
        return copy

    def __repr__(self) -> str:
        return f"Fields({self._values!r})"


class SSEDecoder:
    """Server-sent events from a byte stream: `(event, data)` per blank-line-terminated event.

    Lines end in LF, CRLF or CR; each is decoded as strict UTF-8 (a damaged line raises
    `UnicodeDecodeError`, as the SDK's decoder does); an event cut off by the end of the stream
    is dropped, as the SSE specification says.
    """

    def __init__(self) -> None:
        self._pending = b""
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> Iterator[tuple[str | None, str]]:
        """Take the next bytes of the stream; yield the events they complete."""
        buffer = self._pending + chunk
        lines = buffer.splitlines(keepends=True)
        # An unterminated last line waits for more; so does a final CR, which may be half a CRLF.
        if lines and (lines[-1].endswith(b"\r") or not lines[-1].endswith(b"\n")):
            self._pending = lines.pop()
        else:
            self._pending = b""
        for raw in lines:
            yield from self._line(raw.rstrip(b"\r\n").decode("utf-8"))

    def close(self) -> Iterator[tuple[str | None, str]]:
        """The end of the stream: a held-back final CR still ends its line (and maybe an event)."""
        pending, self._pending = self._pending, b""
        if pending.endswith(b"\r"):
            yield from self._line(pending[:-1].decode("utf-8"))

    def _line(self, line: str) -> Iterator[tuple[str | None, str]]:
        if not line:
            if self._event is not None or self._data:
                yield self._event, "\n".join(self._data)
            self._event, self._data = None, []
            return
        if line.startswith(":"):
            return  # a comment
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        # `id` and `retry` mean nothing to a one-shot request.
