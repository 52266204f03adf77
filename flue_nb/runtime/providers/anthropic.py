"""The Anthropic provider: flue_nb messages to the Messages API and its SSE stream back.

It translates and nothing more: retries belong to the runtime (contract 11.3). Requests go
through the official `anthropic` SDK (`_anthropic_sdk`). Importing the SDK takes about a second,
so a request made before it is loaded (a fresh kernel's first cell) does not wait for it: it goes
out over plain httpx2 (`_anthropic_http`, the same wire protocol) while the SDK loads on a
background thread. `FLUE_ANTHROPIC_TRANSPORT=sdk` (or `http`) pins one transport. Both streams
are read by one `_Assembler`, and every failure of either is classified into a `ProviderError`
by `_translate_errors`.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import httpx2

from flue_nb.runtime.errors import (
    ContextOverflowError,
    ModelNotConfiguredError,
    ProviderError,
    ProviderErrorKind,
    ProviderHTTPError,
)
from flue_nb.runtime.messages import (
    AssistantMessage,
    AssistantPart,
    ProviderPart,
    TextPart,
    ThinkingPart,
    ToolCall,
    Usage,
)
from flue_nb.runtime.providers import check_model_request
from flue_nb.runtime.providers._anthropic_http import Fields, HttpTransport, StatusFailure
from flue_nb.runtime.providers._anthropic_wire import EPHEMERAL, to_wire_messages, to_wire_tools
from flue_nb.runtime.providers._catalog import model_info
from flue_nb.runtime.providers.model import (
    ModelInfo,
    ModelRequest,
    ResponseDone,
    StreamEvent,
    TextChunk,
    ThinkingChunk,
    ToolCallDelta,
)
from flue_nb.runtime.providers.streaming import (
    IDLE_TIMEOUT,
    MAX_ERROR_TEXT,
    REQUEST_TIMEOUT,
    cap,
    nothing_listening,
    parse_tool_input,
    relay,
    retry_after,
    tls_context,
)
from flue_nb.runtime.redact import register_secret
from flue_nb.runtime.text import INVALID_INPUT_KEY, clean

if TYPE_CHECKING:
    import anthropic

__all__ = ["INVALID_INPUT_KEY", "AnthropicModel", "to_wire_messages", "to_wire_tools"]


_NO_KEY_MESSAGE = (
    "No Anthropic API key: set the `ANTHROPIC_API_KEY` environment variable (or pass "
    "`api_key=` to `AnthropicModel`). To use another model, set `FLUE_MODEL` or "
    "`c.FlueMagics.model`; to run offline, use `flue_nb.models.ScriptedModel`."
)


TRANSPORT_ENV = "FLUE_ANTHROPIC_TRANSPORT"
"""`sdk` or `http` pins the transport; unset (`auto`): the SDK once loaded, plain httpx2 before."""
_SDK_MODULE = "flue_nb.runtime.providers._anthropic_sdk"
_USER_AGENT = "flue-nb (anthropic-http)"

_SDK_LOADER: list[threading.Thread] = []


def sdk_loaded() -> bool:
    """Whether the SDK is wholly imported (not absent, and not still importing on a thread)."""
    return bool(getattr(sys.modules.get(_SDK_MODULE), "LOADED", False))


def load_sdk() -> None:
    """Import the SDK transport (and so the SDK) now; meant for a background thread."""
    importlib.import_module(_SDK_MODULE)


def _load_sdk_in_background() -> None:
    if _SDK_MODULE in sys.modules or _SDK_LOADER:
        return  # loaded, or being loaded (by this loader or the notebook's warm-up)

    def load() -> None:
        try:
            load_sdk()
        except Exception:  # noqa: BLE001 - requests keep going over httpx2; a pinned `sdk` reports it
            pass

    thread = threading.Thread(target=load, name="flue-anthropic-sdk", daemon=True)
    _SDK_LOADER.append(thread)
    thread.start()


_Translate = Callable[[Exception, str], "ProviderError | None"]
"""Classifies one transport library's own exceptions (`_anthropic_sdk.translate`)."""


class _Transport(Protocol):
    @property
    def host(self) -> str: ...

    @property
    def base_url(self) -> str: ...

    async def start(self, params: dict[str, Any]) -> Any: ...

    async def close(self) -> None: ...


class AnthropicModel:
    """A `Model` backed by the Anthropic Messages API through the official async SDK."""

    def __init__(
        self,
        model_id: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int | None = None,
        thinking: dict[str, Any] | None = None,
        client: anthropic.AsyncAnthropic | None = None,
        request_timeout: float = REQUEST_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        """Configure the model; credentials are checked when `stream` is first called.

        Args:
            model_id: The Anthropic model id, e.g. `claude-sonnet-4-6`.
            api_key: Wins over `ANTHROPIC_API_KEY`.
            base_url: Wins over `ANTHROPIC_BASE_URL`.
            max_tokens: Output cap when the request sets none (default: the model's maximum).
            thinking: Sent verbatim as the request's `thinking` parameter, e.g.
                `{"type": "enabled", "budget_tokens": 8000}`.
            client: A ready SDK client (the caller owns it, its retry and transport timeout
                settings; `request_timeout` still bounds the wait for a response to start).
            request_timeout: Seconds to wait for a response to start; then a retryable
                `ProviderError` of kind `timeout` (the SDK's own default is 600 s per try).
            idle_timeout: Seconds a stream may stay silent before the same error.
        """
        self.model_id = model_id
        self._info = model_info(model_id)
        self._api_key = api_key
        self._base_url = base_url
        self._max_tokens = max_tokens
        self._thinking = thinking
        self._client = client
        self._request_timeout = request_timeout
        self._idle_timeout = idle_timeout
        if client is not None:
            register_secret("ANTHROPIC_API_KEY", getattr(client, "api_key", None))
            register_secret("ANTHROPIC_AUTH_TOKEN", getattr(client, "auth_token", None))

    @property
    def info(self) -> ModelInfo:
        """Context window and output limits of this model."""
        return self._info

    def __repr__(self) -> str:
        return f"AnthropicModel({self.model_id!r})"

    def _transport(self) -> tuple[_Transport, _Translate | None]:
        """The transport for one call and its SDK-error translator (None for plain httpx2).

        A transport per call unless a client was injected: a client's connection pool is bound
        to the event loop that opened it, and notebooks, scripts and tests each bring their own.
        """
        pinned = os.environ.get(TRANSPORT_ENV, "").strip().lower()
        if self._client is not None or pinned == "sdk" or (pinned != "http" and sdk_loaded()):
            from flue_nb.runtime.providers import _anthropic_sdk as sdk

            if self._client is not None:
                return sdk.SdkTransport(self._client, owned=False), sdk.translate
            return sdk.SdkTransport.new(**self._connection()), sdk.translate
        if pinned != "http":
            _load_sdk_in_background()  # for the calls after this one
        return HttpTransport(**self._connection(), user_agent=_USER_AGENT), None

    def _connection(self) -> dict[str, Any]:
        # Resolved per call rather than in __init__ so a notebook can build the agent first and
        # set the key afterwards; and explicitly, so the SDK never falls back to profile files.
        key = self._api_key or os.environ.get("ANTHROPIC_API_KEY") or None
        token = None if key else os.environ.get("ANTHROPIC_AUTH_TOKEN") or None
        if key is not None:
            credential = ("api_key", key)
        elif token is not None:
            credential = ("auth_token", token)
        else:
            raise ModelNotConfiguredError(_NO_KEY_MESSAGE, model=self.model_id)
        # The key in use is kept out of every tool result, whatever its source (runtime.redact).
        register_secret("ANTHROPIC_API_KEY" if key is not None else "ANTHROPIC_AUTH_TOKEN", credential[1])
        # httpx's read timeout is the longest silence between two bytes: before the headers
        # and then inside the stream.
        timeout = httpx2.Timeout(
            self._idle_timeout, connect=min(self._request_timeout, 30.0), pool=self._request_timeout
        )
        return {
            "credential": credential,
            "base_url": self._base_url or os.environ.get("ANTHROPIC_BASE_URL") or None,
            "timeout": timeout,
            # A client per call is cheap except for its TLS context (reading the CA bundle, every
            # cell): that one is shared by every client of the process.
            "verify": tls_context(),
        }

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of `messages.create` for `request` (without `stream`)."""
        params: dict[str, Any] = {
            "model": self.model_id,
            "max_tokens": request.max_tokens or self._max_tokens or self._info.max_output_tokens,
            "messages": to_wire_messages(request.messages),
        }
        if request.system:
            params["system"] = [{"type": "text", "text": request.system, "cache_control": EPHEMERAL}]
        if request.tools:
            params["tools"] = to_wire_tools(request.tools)
        if self._thinking is not None:
            params["thinking"] = _thinking_within(self._thinking, params["max_tokens"])
        return params

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one response; raise `ProviderError` on failure. Cancellation aborts it."""
        params = self.request_params(request)
        transport, translate = self._transport()
        assembler = _Assembler(self.model_id)
        try:
            check_model_request(transport.host, provider="Anthropic")
            with _translate_errors(self.model_id, translate, url=transport.base_url):
                started = transport.start(params)
                timeout, label = self._request_timeout, "Anthropic"
                async for out in relay(started, assembler.feed, timeout=timeout, label=label, model_id=self.model_id):
                    yield out
        finally:
            await transport.close()
        if not assembler.stopped:
            # The connection closed cleanly but early: a truncated response must never pass
            # for a complete one, or the loop would act on half a tool call.
            raise ProviderError(
                f"The Anthropic stream for `{self.model_id}` ended before `message_stop`.",
                kind="connection",
                model=self.model_id,
            )
        yield ResponseDone(assembler.message())


_USAGE_FIELDS = (("input_tokens", "input_tokens"), ("output_tokens", "output_tokens"),
    ("cache_read_tokens", "cache_read_input_tokens"),
    ("cache_write_tokens", "cache_creation_input_tokens"))  # fmt: skip


class _Assembler:
    """Folds raw stream events into deltas for the caller and the final `AssistantMessage`."""

    def __init__(self, model_id: str) -> None:
        self.model = model_id
        self.parts: dict[int, AssistantPart] = {}
        self.json_buffers: dict[int, list[str]] = {}
        self.usage = Usage()
        self.stop_reason: str | None = None
        self.stop_details: dict[str, Any] | None = None
        self.stopped = False

    def feed(self, event: Any) -> Iterator[StreamEvent]:
        """Take one stream event (either transport's); yield what the caller should see now."""
        kind = event.type
        if kind == "message_start":
            msg = event.message
            self.model = msg.model or self.model
            self._take_usage(msg.usage)
            # A continued turn (programmatic tool calling) can start with its blocks already
            # there, and even its stop reason: the blocks are the message's first ones.
            for index, block in enumerate(getattr(msg, "content", None) or []):
                yield from self._start_block(index, Fields(block) if isinstance(block, dict) else block)
                self._stop_block(index)
            self.stop_reason = getattr(msg, "stop_reason", None) or self.stop_reason
        elif kind == "content_block_start":
            yield from self._start_block(event.index, event.content_block)
        elif kind == "content_block_delta":
            yield from self._delta(event.index, event.delta)
        elif kind == "content_block_stop":
            self._stop_block(event.index)
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            if (details := event.delta.stop_details) is not None:
                self.stop_details = _raw(details)
            self._take_usage(event.usage)
        elif kind == "message_stop":
            self.stopped = True

    def _take_usage(self, usage: Any) -> None:
        # message_delta carries cumulative counts; fields it leaves None keep message_start's.
        if usage is None:
            return
        for ours, theirs in _USAGE_FIELDS:
            if (value := getattr(usage, theirs, None)) is not None:
                setattr(self.usage, ours, value)

    def _start_block(self, index: int, block: Any) -> Iterator[StreamEvent]:
        if block.type == "text":
            self.parts[index] = TextPart(block.text or "")
            if block.text:
                yield TextChunk(block.text)
        elif block.type == "thinking":
            self.parts[index] = ThinkingPart(block.thinking or "", block.signature or None)
            if block.thinking:
                yield ThinkingChunk(block.thinking)
        elif block.type == "tool_use":
            # The input streams as deltas, or comes whole in the start (programmatic calls).
            start = getattr(block, "input", None)
            caller = getattr(block, "caller", None)
            self.parts[index] = ToolCall(
                block.id, block.name, _raw(start) if start else {}, caller=_raw(caller) if caller else None
            )
            self.json_buffers[index] = []
            yield ToolCallDelta(block.id, block.name)
        else:
            # Anthropic's own blocks (redacted thinking, server tool use and its results, MCP
            # connector blocks) are kept verbatim: the API wants them back as it sent them.
            self.parts[index] = ProviderPart("anthropic", _raw(block))

    def _delta(self, index: int, delta: Any) -> Iterator[StreamEvent]:
        part = self.parts.get(index)
        if delta.type == "text_delta" and isinstance(part, TextPart):
            text = clean(delta.text)  # a lone surrogate must not reach the store or the display
            part.text += text
            yield TextChunk(text)
        elif delta.type == "thinking_delta" and isinstance(part, ThinkingPart):
            thinking = clean(delta.thinking)
            part.thinking += thinking
            yield ThinkingChunk(thinking)
        elif delta.type == "signature_delta" and isinstance(part, ThinkingPart):
            part.signature = (part.signature or "") + delta.signature
        elif delta.type == "citations_delta" and isinstance(part, TextPart):
            part.citations = [*(part.citations or []), _raw(delta.citation)]
        elif delta.type == "compaction_delta" and isinstance(part, ProviderPart) and part.block_type == "compaction":
            # The API's own context compaction: its summary streams into the block's `content`.
            part.block["content"] = (part.block.get("content") or "") + (_raw(delta).get("content") or "")
        elif delta.type == "input_json_delta" and (index in self.json_buffers or isinstance(part, ProviderPart)):
            # A server tool's input streams like a tool call's, whether or not its start had one.
            self.json_buffers.setdefault(index, []).append(delta.partial_json)
        elif isinstance(part, ProviderPart) or delta.type not in _KNOWN_DELTAS:
            # Dropping it would send the block back altered; the API would reject that or, worse,
            # take it as said. Better a clear failure than a silent one.
            block = part.block_type if isinstance(part, ProviderPart) else getattr(part, "kind", "unknown")
            raise ProviderError(
                f"The Anthropic stream for `{self.model}` sent a `{delta.type}` delta for a `{block}` block, "
                "which flue_nb cannot keep, so the response cannot be stored or sent back faithfully.",
                kind="other",
                model=self.model,
            )

    def _stop_block(self, index: int) -> None:
        part = self.parts.get(index)
        chunks = self.json_buffers.pop(index, None)
        if isinstance(part, ToolCall) and chunks is not None and (not part.input or "".join(chunks).strip()):
            part.input = parse_tool_input("".join(chunks))
        elif isinstance(part, ProviderPart) and chunks and (joined := "".join(chunks)).strip():
            # An empty input streams as one empty delta (the advisor tool): the start's `{}` stands.
            try:
                part.block["input"] = json.loads(joined)
            except ValueError as exc:
                raise ProviderError(
                    f"The Anthropic stream for `{self.model}` sent `{part.block_type}` input that is not JSON.",
                    kind="server",
                    model=self.model,
                    mid_stream=True,
                ) from exc

    def message(self) -> AssistantMessage:
        """The assembled response."""
        parts = [self.parts[i] for i in sorted(self.parts)]
        return AssistantMessage(
            parts=parts,
            usage=self.usage,
            stop_reason=self.stop_reason,
            model=self.model,
            stop_details=self.stop_details,
        )


_KNOWN_DELTAS = frozenset(
    {"text_delta", "thinking_delta", "signature_delta", "input_json_delta", "citations_delta", "compaction_delta"}
)


def _raw(value: Any) -> dict[str, Any]:
    """A block or field of either transport's events as the plain JSON object the API sent."""
    if isinstance(value, Fields):
        return value.as_dict()
    to_dict = getattr(value, "to_dict", None)  # the SDK's models
    if callable(to_dict):
        return dict(to_dict(mode="json"))
    return dict(value)


# --- transport errors -> ProviderError --------------------------------------------------------------

# Anthropic gives no stable code for "the prompt does not fit", only these messages; matching
# text is the documented way to tell an overflow (compact and retry) from any other 400.
_OVERFLOW = re.compile(
    r"prompt is too long|exceed(s|ed)? (the )?context (limit|window)|context length"
    r"|too many (input )?tokens",
    re.IGNORECASE,
)

_KIND_BY_STATUS: dict[int, ProviderErrorKind] = {
    401: "auth", 403: "auth", 408: "timeout", 429: "rate_limit", 529: "overloaded",
}  # fmt: skip

# For an `event: error` inside a 200 stream (only the body says what failed), and for statuses
# the table above does not decide.
_KIND_BY_ERROR_TYPE: dict[str, ProviderErrorKind] = {
    "overloaded_error": "overloaded", "rate_limit_error": "rate_limit", "api_error": "server",
    "timeout_error": "timeout", "authentication_error": "auth", "permission_error": "auth",
}  # fmt: skip


@contextlib.contextmanager
def _translate_errors(model_id: str, translate: _Translate | None = None, *, url: str = "") -> Iterator[None]:
    """Re-raise transport exceptions as classified `ProviderError`s, `from` the original.

    `translate` classifies the SDK's own exception types (`_anthropic_sdk.translate`); `url`
    is the API root, named when a loopback server refuses the connection.
    """
    try:
        yield
    except ProviderError:
        raise
    except StatusFailure as exc:
        raise status_error(exc, model_id) from exc
    except (json.JSONDecodeError, UnicodeDecodeError, httpx2.DecodingError) as exc:
        # Each SSE `data:` line is decoded as UTF-8 JSON: a damaged line (or a body that does
        # not decompress) is a fault of the server or the network, worth a retry, never an
        # internal error of ours.
        what = (
            "bytes that are not UTF-8 in an SSE event"
            if isinstance(exc, UnicodeDecodeError)
            else "invalid JSON in an SSE event"
            if isinstance(exc, json.JSONDecodeError)
            else "a body that does not decompress"
        )
        raise ProviderError(
            f"The Anthropic stream for `{model_id}` was malformed ({what}: {cap(str(exc), 200)}).",
            kind="server",
            model=model_id,
            mid_stream=True,
        ) from exc
    except httpx2.TimeoutException as exc:
        raise timeout_error(model_id) from exc
    except httpx2.TransportError as exc:
        # Also what the SDK lets through unwrapped when the body breaks off mid-stream.
        raise _refused(exc, model_id, url) or connection_error(exc, model_id) from exc
    except Exception as exc:
        error = translate(exc, model_id) if translate is not None else None
        if error is None:
            raise
        if error.kind == "connection":
            error = _refused(exc, model_id, url) or error
        raise error from exc


def _refused(exc: Exception, model_id: str, url: str) -> ProviderError | None:
    setting = "`base_url` (or `ANTHROPIC_BASE_URL`)"
    return nothing_listening(exc, url=url, model_id=model_id, setting=setting)


def timeout_error(model_id: str) -> ProviderError:
    """The retryable error for a request or stream that timed out."""
    return ProviderError(f"The request to Anthropic for `{model_id}` timed out.", kind="timeout", model=model_id)


def connection_error(exc: Exception, model_id: str) -> ProviderError:
    """The retryable error for a connection that failed or broke off."""
    return ProviderError(f"Lost the connection to Anthropic for `{model_id}`: {exc}", kind="connection", model=model_id)


def status_error(failure: StatusFailure, model_id: str) -> ProviderError:
    """The classified error for an error status (or an `event: error` in a 200 stream)."""
    error = failure.body.get("error") if isinstance(failure.body, dict) else None
    error = error if isinstance(error, dict) else {}
    error_type = cap(str(error.get("type") or ""), 100)
    text = cap(str(error.get("message") or failure.message), MAX_ERROR_TEXT)
    status = failure.status
    details: dict[str, Any] = {"model": model_id, "error_type": error_type or None}
    if request_id := failure.headers.get("request-id"):
        details["request_id"] = request_id
    if (hint := retry_after(failure.headers)) is not None:
        details["retry_after"] = hint  # a hint for the runtime's backoff (contract 11.3)
    if status in (400, 413, 200) and _OVERFLOW.search(text):
        message = f"The prompt is too long for `{model_id}`: {text}"
        return ContextOverflowError(message, status=status, **details)
    if status < 400:
        kind = _KIND_BY_ERROR_TYPE.get(error_type, "other")
        what = error_type or "unknown error"
        message = f"Anthropic stream for `{model_id}` failed mid-response ({what}): {text}"
        return ProviderError(message, kind=kind, mid_stream=True, **details)
    # The status decides first: every other 5xx is a server fault, whatever its body says.
    by_body = _KIND_BY_ERROR_TYPE.get(error_type) or "bad_request"
    kind = _KIND_BY_STATUS.get(status) or ("server" if status >= 500 else by_body)
    if kind == "auth":
        what = "rejected the credentials" if status == 401 else "denied access"
        message = (
            f"Anthropic {what} (HTTP {status}: {text}). Check `ANTHROPIC_API_KEY` (or the "
            f"`api_key` given to `AnthropicModel`) and that the key may use `{model_id}`."
        )
    else:
        what = error_type or "no error type"
        message = f"Anthropic returned HTTP {status} for `{model_id}` ({what}): {text}"
    return ProviderHTTPError(message, status=status, kind=kind, **details)


def _thinking_within(thinking: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    # A budget can lower `max_tokens` below the thinking budget, which the API refuses (it must
    # stay under `max_tokens` and be at least 1,024): think less, or not at all.
    budget = thinking.get("budget_tokens")
    if thinking.get("type") != "enabled" or not isinstance(budget, int) or budget < max_tokens:
        return thinking
    if max_tokens - 1 < 1024:
        return {"type": "disabled"}
    return {**thinking, "budget_tokens": max_tokens - 1}
