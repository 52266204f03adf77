"""What every provider's stream shares: timeouts, the TLS context, starting and relaying a stream,
error texts cut to size, retry hints and tool-input parsing. Neutral ground, so no provider
imports another's internals."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Protocol, TypeVar

import httpx2

from flue_nb.runtime.errors import ProviderError
from flue_nb.runtime.providers.model import StreamEvent
from flue_nb.runtime.redact import redact
from flue_nb.runtime.text import INVALID_INPUT_KEY, clean
from flue_nb.runtime.waits import within

__all__ = [
    "IDLE_TIMEOUT",
    "MAX_ERROR_TEXT",
    "REQUEST_TIMEOUT",
    "cap",
    "capitalized",
    "nothing_listening",
    "parse_tool_input",
    "relay",
    "retry_after",
    "tls_context",
]

REQUEST_TIMEOUT = 120.0
"""Default seconds to wait for a response to start (status and headers), connecting included."""
IDLE_TIMEOUT = 120.0
"""Default seconds a started stream may go without sending a byte (Anthropic sends `ping`
events while it works, so a silent stream is a hung one)."""
MAX_ERROR_TEXT = 2000
"""Characters of a provider's error message kept in our error (bodies can be megabytes)."""

_TLS: list[Any] = []
_TLS_LOCK = threading.Lock()


def tls_context() -> Any:
    """One TLS context for every client of this process (what httpx2 would build for each)."""
    # Locked: a first cell that arrives while the warm-up thread is reading the CA bundle waits
    # for that context instead of reading the bundle a second time beside it.
    with _TLS_LOCK:
        if not _TLS:
            _TLS.append(httpx2.create_ssl_context())
        return _TLS[0]


class _Closable(Protocol):
    def __aiter__(self) -> AsyncIterator[Any]: ...

    async def close(self) -> None: ...


_S = TypeVar("_S", bound=_Closable)


async def relay(
    start: Awaitable[_S],
    feed: Callable[[Any], Iterable[StreamEvent]],
    *,
    timeout: float,
    label: str,
    model_id: str,
) -> AsyncIterator[StreamEvent]:
    """Start a stream within `timeout` seconds, yield what `feed` makes of each of its events, and
    close it however the reading ends."""
    try:
        events = await within(start, timeout)
    except asyncio.TimeoutError as exc:
        raise ProviderError(
            f"{capitalized(label)} did not start answering for `{model_id}` within {timeout:g} s.",
            kind="timeout",
            model=model_id,
        ) from exc
    try:
        async for event in events:
            for out in feed(event):
                yield out
    finally:
        await events.close()


def retry_after(headers: Any) -> float | None:
    """The server's retry hint in seconds (`retry-after-ms`, else `retry-after`), or None."""
    # Both providers send `retry-after-ms` (precise) and `retry-after` in seconds; dates are ignored.
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return max(0.0, float(headers[name]) * scale)
        except (KeyError, ValueError):
            continue
    return None


def cap(text: str, limit: int) -> str:
    """`text` with secrets redacted, cut to `limit` characters with a note saying how much was
    dropped: what providers' error bodies pass through, redacted before the cut (a body echoing
    the key sent, e.g. a 401 "invalid x-api-key: sk-...", must not leave the key or its prefix)."""
    text = redact(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit:,} more characters]"


def capitalized(text: str) -> str:
    """`text` with its first letter upper-case: a provider's label (`the server at ...`) that
    opens a sentence."""
    return text[:1].upper() + text[1:]


def nothing_listening(exc: BaseException, *, url: str, model_id: str, setting: str) -> ProviderError | None:
    """A final error when `exc` is a refused connection to a loopback `url`, else None.

    Nothing listens there: retrying for minutes only hides that the server is not running.
    `setting` names where the URL comes from (`base_url` or an environment variable).
    """
    from flue_nb.runtime.providers import _is_loopback

    if not url or not _refused(exc) or not _is_loopback(httpx2.URL(url).host):
        return None
    return ProviderError(
        f"Nothing is listening at {url} (the connection to `{model_id}` was refused). Check that "
        f"the model server is running and that {setting} has its host and port, then run the cell again.",
        kind="connection",
        model=model_id,
        url=url,
        final=True,
    )


def _refused(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(8):  # the SDK's error wraps httpx's, which wraps the OS's
        if seen is None:
            return False
        if isinstance(seen, ConnectionRefusedError) or "connection refused" in str(seen).lower():
            return True
        if "all connection attempts failed" in str(seen).lower():
            return True  # httpx's text when every address of the host refused
        seen = seen.__cause__ or seen.__context__
    return False


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):  # 1e999: too large for a double
        raise ValueError(f"{text} does not fit a double")
    return value


def parse_tool_input(raw: str) -> dict[str, Any]:
    """A streamed tool call's arguments as a dict; what is not a JSON object becomes an invalid
    input the tool's validation reports to the model."""
    if not raw.strip():
        return {}
    try:
        # Strict JSON: NaN, Infinity and 1e999 make the input invalid (a tool validation result
        # for the model, contract 1.6) instead of a message the store cannot encode.
        value = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except ValueError:
        return {INVALID_INPUT_KEY: clean(raw)}
    return value if isinstance(value, dict) else {INVALID_INPUT_KEY: clean(raw)}
